"""Properties of both wire codecs, over inputs Hypothesis makes up: any bytes and any msgpack structure
decode to a value or to `WireFormatError` (never another exception, never an allocation the message does
not pay for), and any allowed array survives a round trip exactly."""

from __future__ import annotations

import io
import os

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from evalfleet.serving import msgpack_numpy as codec

DECODERS = {"openpi": codec.unpackb, "gr00t": codec.gr00t_unpackb}
# a few seconds in all; EVALFLEET_HYPOTHESIS_EXAMPLES=5000 for a soak run
EXAMPLES = int(os.environ.get("EVALFLEET_HYPOTHESIS_EXAMPLES", "150"))
FAST = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def decodes_or_refuses(decode, data: bytes) -> None:
    try:
        decode(data)
    except codec.WireFormatError:
        pass


# ------------------------------------------------------------------ malformed input


@pytest.mark.parametrize("name", sorted(DECODERS))
@FAST
@given(data=st.binary(max_size=256))
def test_arbitrary_bytes_decode_or_raise_the_protocol_error(name, data):
    decodes_or_refuses(DECODERS[name], data)
    try:
        codec.peek_map(data, ["api_token", "endpoint"])
    except codec.WireFormatError:
        pass


def npy_bytes(header: dict, body: bytes, version: tuple[int, int] = (1, 0)) -> bytes:
    """An .npy file with whatever header (and format version) we like, however wrong."""
    buffer = io.BytesIO()
    header_text = repr(header).encode("utf8")
    buffer.write(codec._NPY_MAGIC + bytes(version))
    width = 2 if version == (1, 0) else 4
    buffer.write(len(header_text).to_bytes(width, "little") + header_text)
    return buffer.getvalue() + body


WIRE_DTYPES = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(endianness="?"),
    hnp.unsigned_integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?"),
    hnp.complex_number_dtypes(endianness="?"),
    hnp.byte_string_dtypes(min_len=1, max_len=4),
    hnp.unicode_string_dtypes(endianness="?", min_len=1, max_len=4),
    hnp.datetime64_dtypes(endianness="?"),
    hnp.timedelta64_dtypes(endianness="?"),
)
ARRAYS = hnp.arrays(WIRE_DTYPES, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))


def openpi_fields(array: np.ndarray) -> dict:
    return {b"__ndarray__": True, b"data": array.tobytes(), b"dtype": array.dtype.str, b"shape": list(array.shape)}


def npy_of(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


@st.composite
def near_valid_arrays(draw) -> dict:
    """A correct encoding of a real array, then maybe one field replaced or its bytes cut, grown or flipped."""
    array = draw(ARRAYS)
    if draw(st.booleans()):
        fields = openpi_fields(array)
        if draw(st.booleans()):
            fields[draw(st.sampled_from(sorted(fields)))] = draw(st.one_of(SCALARS, DTYPE_SPECS, SHAPES))
        return fields
    blob = bytearray(npy_of(array))
    edit = draw(st.sampled_from(["none", "cut", "grow", "flip"]))
    if edit == "cut":
        del blob[draw(st.integers(0, len(blob) - 1)):]
    elif edit == "grow":
        blob += draw(st.binary(min_size=1, max_size=16))
    elif edit == "flip":
        blob[draw(st.integers(0, len(blob) - 1))] ^= draw(st.integers(1, 255))
    return {"__ndarray_class__": True, "as_npy": bytes(blob)}


DTYPE_SPECS = st.one_of(
    st.sampled_from(["<f4", ">f8", "|u1", "<i8", "|b1", "<c16", "|S3", "<U2", "<M8[ns]", "<m8[s]", "|O", "|V8",
                     "|S0", "<U0", "f4,i4", "(2,3)f4", "M8[bogus]", "", "float128"]),
    st.text(max_size=6),
)
SHAPES = st.one_of(
    st.lists(st.integers(min_value=-2, max_value=2**62), max_size=4),
    st.lists(st.integers(min_value=0, max_value=4), max_size=40),
    st.sampled_from([[10**6, 10**6], [0, 2**62], [True, 2], [2.0], "3", None, [[1]]]),
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1),
                    st.floats(), st.text(max_size=8), st.binary(max_size=8))
# maps that look like encoded arrays and scalars, with every field possibly wrong
FORGED = st.one_of(
    near_valid_arrays(),
    st.fixed_dictionaries({b"__ndarray__": SCALARS, b"data": st.one_of(st.binary(max_size=64), SCALARS),
                           b"dtype": st.one_of(DTYPE_SPECS, SCALARS), b"shape": st.one_of(SHAPES, SCALARS)}),
    st.fixed_dictionaries({b"__npgeneric__": SCALARS, b"data": SCALARS, b"dtype": st.one_of(DTYPE_SPECS, SCALARS)}),
    st.dictionaries(st.sampled_from([b"__ndarray__", b"data", b"dtype", b"shape", b"__npgeneric__"]), SCALARS),
    st.builds(lambda h, b, v: {"__ndarray_class__": True, "as_npy": npy_bytes(h, b, v)},
              st.fixed_dictionaries({"descr": st.one_of(DTYPE_SPECS, SCALARS), "fortran_order": st.booleans(),
                                     "shape": st.one_of(SHAPES.map(lambda s: tuple(s) if isinstance(s, list) else s),
                                                        SCALARS)}),
              st.binary(max_size=64), st.sampled_from([(1, 0), (2, 0), (3, 0), (9, 9)])),
    st.builds(lambda b: {"__ndarray_class__": True, "as_npy": b},
              st.one_of(st.binary(max_size=64), SCALARS, st.just(b"PK\x03\x04" + b"\0" * 30))),
)
MSGPACK_VALUES = st.recursive(
    st.one_of(SCALARS, FORGED),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), st.binary(max_size=8)), children, max_size=4),
    ),
    max_leaves=12,
)


@pytest.mark.parametrize("name", sorted(DECODERS))
@FAST
@given(value=MSGPACK_VALUES)
def test_arbitrary_msgpack_structures_decode_or_raise_the_protocol_error(name, value):
    decodes_or_refuses(DECODERS[name], msgpack.packb(value))


@FAST
@given(value=MSGPACK_VALUES, cut=st.integers(min_value=0, max_value=400))
def test_truncated_messages_raise_the_protocol_error(value, cut):
    whole = msgpack.packb({"endpoint": "get_action", "data": value})
    for decode in DECODERS.values():
        decodes_or_refuses(decode, whole[: min(cut, len(whole) - 1)])


@FAST
@given(token=st.one_of(st.text(max_size=8), SCALARS), endpoint=st.one_of(st.text(max_size=8), SCALARS),
       data=MSGPACK_VALUES)
def test_peek_map_reads_the_envelope_without_decoding_the_data(token, endpoint, data):
    payload = msgpack.packb({"data": data, "api_token": token, "endpoint": endpoint})
    found = codec.peek_map(payload, ["api_token", "endpoint"])
    assert msgpack.packb(found) == msgpack.packb({"api_token": token, "endpoint": endpoint})  # NaN-proof


# ------------------------------------------------------------------ round trips


def same_array(back: np.ndarray, sent: np.ndarray) -> bool:
    # bit for bit (NaNs, NaTs and signed zeros included), not merely equal
    return (isinstance(back, np.ndarray) and back.dtype == sent.dtype and back.shape == sent.shape
            and back.tobytes() == np.ascontiguousarray(sent).tobytes())


@pytest.mark.parametrize("pack,unpack", [(codec.packb, codec.unpackb), (codec.gr00t_packb, codec.gr00t_unpackb)],
                         ids=["openpi", "gr00t"])
@FAST
@given(array=ARRAYS, fortran=st.booleans())
def test_arrays_round_trip_exactly(pack, unpack, array, fortran):
    if fortran:
        array = np.asfortranarray(array)
    back = unpack(pack({"a": array, "nested": [array]}))
    assert same_array(back["a"], array) and same_array(back["nested"][0], array)


@FAST
@given(array=ARRAYS)
def test_openpi_scalars_round_trip(array):
    # .item() of a datetime or a complex is no msgpack value (openpi-client cannot send them either)
    if array.size == 0 or array.dtype.kind in "Mmc":
        return
    scalar = array.flat[0]
    back = codec.unpackb(codec.packb(scalar))
    if isinstance(scalar, (bytes, str, float)):  # np.bytes_/str_/float64 subclass these: msgpack sends them plain
        assert back == scalar or (back != back and scalar != scalar)  # NaN
    else:
        assert isinstance(back, np.generic) and back.dtype == scalar.dtype and back.tobytes() == scalar.tobytes()
