from __future__ import annotations

import io

import msgpack
import numpy as np
import pytest

from evalfleet.serving import msgpack_numpy as codec

ARRAYS = {
    "image": np.arange(2 * 8 * 8 * 3, dtype=np.uint8).reshape(2, 8, 8, 3),
    "state32": np.linspace(0, 1, 7, dtype=np.float32),
    "state64": np.linspace(0, 1, 5, dtype=np.float64).reshape(5, 1),
    "ints": np.array([[-3, 4], [5, -6]], dtype=np.int64),
    "flags": np.array([True, False]),
    "names": np.array(["left", "wrist"]),
    "empty": np.zeros((0, 3), dtype=np.float32),
}


@pytest.mark.parametrize("pack,unpack", [(codec.packb, codec.unpackb), (codec.gr00t_packb, codec.gr00t_unpackb)])
def test_round_trip_keeps_dtypes_and_shapes(pack, unpack):
    message = {**ARRAYS, "prompt": "pick up the puck", "nested": {"k": [1, 2.5, None]}, "n": 3}
    back = unpack(pack(message))
    for key, array in ARRAYS.items():
        assert back[key].dtype == array.dtype and back[key].shape == array.shape
        np.testing.assert_array_equal(back[key], array)
    assert back["prompt"] == "pick up the puck" and back["nested"] == {"k": [1, 2.5, None]} and back["n"] == 3


def test_openpi_scalars_and_non_contiguous_arrays():
    back = codec.unpackb(codec.packb({"s": np.float32(1.5), "i": np.int16(-2), "t": np.arange(12).reshape(3, 4).T}))
    assert back["s"] == np.float32(1.5) and back["s"].dtype == np.float32
    assert back["i"].dtype == np.int16
    np.testing.assert_array_equal(back["t"], np.arange(12).reshape(3, 4).T)


def test_object_arrays_are_refused_both_ways():
    with pytest.raises(TypeError):
        codec.packb({"x": np.array([object()], dtype=object)})
    with pytest.raises(TypeError):
        codec.gr00t_packb({"x": np.array([object()], dtype=object)})
    forged = msgpack.packb({b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "|O", b"shape": [1]})
    with pytest.raises(codec.WireFormatError):
        codec.unpackb(forged)


def test_size_mismatch_and_garbage_are_wire_errors():
    forged = msgpack.packb({b"__ndarray__": True, b"data": b"\0" * 7, b"dtype": "<f4", b"shape": [2]})
    with pytest.raises(codec.WireFormatError):
        codec.unpackb(forged)
    with pytest.raises(codec.WireFormatError):
        codec.unpackb(b"\xc1")


def test_gr00t_never_unpickles():
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    forged = msgpack.packb({"__ndarray_class__": True, "as_npy": buffer.getvalue()})
    with pytest.raises(codec.WireFormatError):
        codec.gr00t_unpackb(forged)


def test_interoperates_with_openpi_client_codec():
    peer = pytest.importorskip("openpi_client.msgpack_numpy")
    theirs = peer.unpackb(codec.packb(ARRAYS))
    ours = codec.unpackb(peer.packb(ARRAYS))
    for key, array in ARRAYS.items():
        np.testing.assert_array_equal(theirs[key], array)
        np.testing.assert_array_equal(ours[key], array)
        assert ours[key].dtype == array.dtype
