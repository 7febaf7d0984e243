"""msgpack with numpy, in the two encodings real policy servers speak. No pickle anywhere.

openpi encoding (the `openpi-client` package's `msgpack_numpy`): an array is the map
``{b"__ndarray__": True, b"data": raw bytes, b"dtype": dtype.str, b"shape": [..]}`` and a numpy scalar is
``{b"__npgeneric__": True, b"data": value.item(), b"dtype": dtype.str}`` (keys are msgpack *bin*, so they
arrive as ``bytes``). Decoding checks the dtype (no object or void dtypes) and that the byte count
matches the shape, and returns a read-only array over the received buffer (no copy), as openpi does.

GR00T encoding (Isaac-GR00T's ``MsgSerializer``): an array is ``{"__ndarray_class__": True, "as_npy":
<.npy file bytes>}`` written by ``np.save(..., allow_pickle=False)`` and read by ``np.load(...,
allow_pickle=False)``; numpy scalars are sent as plain Python values.
"""

from __future__ import annotations

import io
import math
from typing import Any

import msgpack
import numpy as np

# dtype kinds that may cross the wire: bool, ints, floats, complex, fixed-width strings/bytes, datetimes.
_SAFE_KINDS = frozenset("biufcUSMm")


class WireFormatError(ValueError):
    """A message that does not decode to what the protocol allows."""


def _checked_dtype(spec: Any) -> np.dtype:
    try:
        dtype = np.dtype(spec.decode() if isinstance(spec, bytes) else spec)
    except TypeError as exc:
        raise WireFormatError(f"bad dtype on the wire: {spec!r}") from exc
    if dtype.kind not in _SAFE_KINDS or dtype.hasobject:
        raise WireFormatError(f"dtype {dtype.str!r} is not allowed on the wire (no object/void arrays)")
    return dtype


# ---------------------------------------------------------------- openpi encoding


def _openpi_default(obj: Any) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind not in _SAFE_KINDS:
        raise TypeError(f"cannot send numpy dtype {obj.dtype} (object/void arrays are not allowed)")
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            obj = np.ascontiguousarray(obj)
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot serialise {type(obj).__name__} with msgpack")


def _openpi_object_hook(obj: dict) -> Any:
    if b"__ndarray__" in obj:
        dtype = _checked_dtype(obj[b"dtype"])
        shape = tuple(int(n) for n in obj[b"shape"])
        data = obj[b"data"]
        if any(n < 0 for n in shape) or len(data) != math.prod(shape) * dtype.itemsize:
            raise WireFormatError(f"array of shape {shape} and dtype {dtype.str} does not match {len(data)} bytes")
        return np.ndarray(buffer=data, dtype=dtype, shape=shape)
    if b"__npgeneric__" in obj:
        return _checked_dtype(obj[b"dtype"]).type(obj[b"data"])
    return obj


def packb(obj: Any) -> bytes:
    """Serialise in openpi's encoding."""
    return msgpack.packb(obj, default=_openpi_default)


def unpackb(data: bytes) -> Any:
    """Deserialise openpi's encoding. Raises WireFormatError on anything malformed."""
    try:
        return msgpack.unpackb(data, object_hook=_openpi_object_hook)
    except WireFormatError:
        raise
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise WireFormatError(f"malformed msgpack message: {exc}") from exc


# ---------------------------------------------------------------- GR00T encoding


def _gr00t_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in _SAFE_KINDS:
            raise TypeError(f"cannot send numpy dtype {obj.dtype} (object/void arrays are not allowed)")
        buffer = io.BytesIO()
        np.save(buffer, obj, allow_pickle=False)
        return {"__ndarray_class__": True, "as_npy": buffer.getvalue()}
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot serialise {type(obj).__name__} with msgpack")


def _gr00t_object_hook(obj: dict) -> Any:
    if "__ndarray_class__" in obj:
        try:
            array = np.load(io.BytesIO(obj["as_npy"]), allow_pickle=False)
        except (ValueError, OSError, TypeError, KeyError) as exc:
            raise WireFormatError(f"bad .npy payload: {exc}") from exc
        _checked_dtype(array.dtype)
        return array
    return obj


def gr00t_packb(obj: Any) -> bytes:
    """Serialise in GR00T's encoding (arrays as .npy bytes)."""
    return msgpack.packb(obj, default=_gr00t_default)


def gr00t_unpackb(data: bytes) -> Any:
    """Deserialise GR00T's encoding. Raises WireFormatError on anything malformed."""
    try:
        return msgpack.unpackb(data, object_hook=_gr00t_object_hook)
    except WireFormatError:
        raise
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise WireFormatError(f"malformed msgpack message: {exc}") from exc
