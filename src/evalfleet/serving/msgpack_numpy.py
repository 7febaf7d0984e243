"""msgpack with numpy, in the two encodings real policy servers speak. No pickle anywhere.

openpi encoding (the `openpi-client` package's `msgpack_numpy`): an array is the map
``{b"__ndarray__": True, b"data": raw bytes, b"dtype": dtype.str, b"shape": [..]}`` and a numpy scalar is
``{b"__npgeneric__": True, b"data": value.item(), b"dtype": dtype.str}`` (keys are msgpack *bin*, so they
arrive as ``bytes``). Decoding returns a read-only array over the received buffer (no copy), as openpi does.

GR00T encoding (Isaac-GR00T's ``MsgSerializer``): an array is ``{"__ndarray_class__": True, "as_npy":
<.npy file bytes>}`` written by ``np.save(..., allow_pickle=False)``; numpy scalars are sent as plain Python
values. We parse the .npy bytes ourselves rather than with ``np.load``, which would open an .npz archive,
and allocates what the header claims before it reads a byte of data.

Every decode is bounded by the message it reads: a dtype must be a plain one (no object, void or structured
dtypes, no zero-size items), a shape must be non-negative ints, and shape x itemsize must equal the bytes
actually present, so nothing is allocated beyond the message itself. Anything else is a `WireFormatError`,
and the decoders raise nothing but that on any input.
"""

from __future__ import annotations

import io
import math
from typing import Any, Iterable

import msgpack
import numpy as np

# dtype kinds that may cross the wire: bool, ints, floats, complex, fixed-width strings/bytes, datetimes.
_SAFE_KINDS = frozenset("biufcUSMm")
MAX_DIMS = 32  # numpy 1.x's limit (2.x allows 64): an array either side can build
_MAX_BYTES = int(np.iinfo(np.intp).max)
_NPY_MAGIC = b"\x93NUMPY"
_NPY_MAX_HEADER = 10_000  # np.load's own default bound on the header it will parse
# msgpack map headers: fixmap, map16, map32
_MAP_HEADER = frozenset([*range(0x80, 0x90), 0xDE, 0xDF])
# what msgpack raises on malformed input (ExtraData, FormatError, StackError, OutOfData are among these)
_MSGPACK_ERRORS = (ValueError, TypeError, msgpack.UnpackException)


class WireFormatError(ValueError):
    """A message that does not decode to what the protocol allows."""


def _checked_dtype(spec: Any) -> np.dtype:
    if isinstance(spec, bytes):
        spec = spec.decode("ascii", errors="replace")
    if not isinstance(spec, str):
        raise WireFormatError(f"a dtype must be a string, got {type(spec).__name__}")
    try:
        dtype = np.dtype(spec)
    except Exception as exc:  # numpy's dtype parser raises several kinds on junk
        raise WireFormatError(f"bad dtype on the wire: {spec[:40]!r}") from exc
    return _allowed_dtype(dtype)


def _allowed_dtype(dtype: np.dtype) -> np.dtype:
    if dtype.kind not in _SAFE_KINDS or dtype.hasobject:
        raise WireFormatError(f"dtype {dtype.str!r} is not allowed on the wire (no object/void arrays)")
    if dtype.itemsize == 0:
        raise WireFormatError(f"dtype {dtype.str!r} has no size")
    return dtype


def _checked_shape(shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, (list, tuple)) or len(shape) > MAX_DIMS:
        raise WireFormatError(f"a shape must be a list of at most {MAX_DIMS} sizes")
    if not all(type(n) is int and 0 <= n <= _MAX_BYTES for n in shape):  # bool is not a size
        raise WireFormatError(f"a shape must hold non-negative integers, got {list(shape)[:MAX_DIMS]}")
    return tuple(shape)


def _checked_size(shape: tuple[int, ...], dtype: np.dtype, present: int) -> int:
    """The element count, once shape x itemsize is known to be exactly the `present` bytes."""
    if math.prod(n for n in shape if n) * dtype.itemsize > _MAX_BYTES:  # numpy's own limit, zero sizes or not
        raise WireFormatError(f"array of shape {shape} and dtype {dtype.str} is larger than numpy allows")
    count = math.prod(shape)
    if count * dtype.itemsize != present:
        raise WireFormatError(
            f"array of shape {shape} and dtype {dtype.str} needs {count * dtype.itemsize} bytes, has {present}"
        )
    return count


def _described(exc: Exception) -> str:
    # msgpack raises some errors (an invalid first byte: FormatError) with no message at all
    return str(exc) or {"FormatError": "not a msgpack value"}.get(type(exc).__name__, type(exc).__name__)


def _refuse_ext(code: int, data: bytes) -> Any:
    raise WireFormatError(f"msgpack extension type {code} is not part of the protocol")


def _unpack(data: Any, object_hook: Any) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireFormatError(f"expected bytes, got {type(data).__name__}")
    try:
        return msgpack.unpackb(data, object_hook=object_hook, ext_hook=_refuse_ext)
    except WireFormatError:
        raise
    except _MSGPACK_ERRORS as exc:
        raise WireFormatError(f"malformed msgpack message: {_described(exc)}") from exc


def peek_map(data: Any, keys: Iterable[str]) -> dict[str, Any]:
    """The values of `keys` in the msgpack map `data`, decoding nothing else: every other value is skipped,
    not built, and no array is decoded. For checking a request's envelope (its token) before decoding it."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireFormatError(f"expected bytes, got {type(data).__name__}")
    if not data or data[0] not in _MAP_HEADER:
        raise WireFormatError("expected a msgpack map")
    wanted = set(keys)
    unpacker = msgpack.Unpacker(max_buffer_size=len(data), ext_hook=_refuse_ext)
    found: dict[str, Any] = {}
    try:
        unpacker.feed(data)
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            if isinstance(key, str) and key in wanted:
                found[key] = unpacker.unpack()  # a repeated key: the last one wins, as in unpackb
            else:
                unpacker.skip()
    except WireFormatError:
        raise
    except _MSGPACK_ERRORS as exc:
        raise WireFormatError(f"malformed msgpack message: {_described(exc)}") from exc
    return found


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


def _openpi_array(obj: dict) -> np.ndarray:
    dtype = _checked_dtype(obj.get(b"dtype"))
    shape = _checked_shape(obj.get(b"shape"))
    data = obj.get(b"data")
    if not isinstance(data, bytes):
        raise WireFormatError(f"array data must be msgpack bin, got {type(data).__name__}")
    _checked_size(shape, dtype, len(data))
    return np.ndarray(buffer=data, dtype=dtype, shape=shape)


def _openpi_scalar(obj: dict) -> np.generic:
    dtype = _checked_dtype(obj.get(b"dtype"))
    value = obj.get(b"data")
    if not isinstance(value, (bool, int, float, complex, str, bytes)):
        raise WireFormatError(f"a numpy scalar's data must be a plain value, got {type(value).__name__}")
    try:
        return dtype.type(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise WireFormatError(f"{value!r:.40} is not a {dtype.str} scalar: {exc}") from exc


def _openpi_object_hook(obj: dict) -> Any:
    if b"__ndarray__" in obj:
        return _openpi_array(obj)
    if b"__npgeneric__" in obj:
        return _openpi_scalar(obj)
    return obj


def packb(obj: Any) -> bytes:
    """Serialise in openpi's encoding."""
    return msgpack.packb(obj, default=_openpi_default)


def unpackb(data: bytes) -> Any:
    """Deserialise openpi's encoding. Raises WireFormatError on anything malformed."""
    return _unpack(data, _openpi_object_hook)


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


def npy_array(data: bytes) -> np.ndarray:
    """The array in .npy file bytes (format 1.0 or 2.0, as `np.save` writes them), checked before anything
    is allocated: a plain dtype, and exactly shape x itemsize bytes after the header. A writable copy, as
    `np.load` gives."""
    if data[:2] == b"PK":
        raise WireFormatError("an .npz archive is not an array: send each array as .npy bytes")
    if data[:6] != _NPY_MAGIC or len(data) < 10:
        raise WireFormatError("not .npy bytes (no \\x93NUMPY magic)")
    version = (data[6], data[7])
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    if version not in readers:
        raise WireFormatError(f".npy format version {version[0]}.{version[1]} is not supported (1.0, 2.0 are)")
    stream = io.BytesIO(data)
    stream.seek(8)
    try:
        shape, fortran_order, dtype = readers[version](stream, max_header_size=_NPY_MAX_HEADER)
    except Exception as exc:  # numpy's header parser raises several kinds on junk
        raise WireFormatError(f"bad .npy header: {exc}") from exc
    dtype = _allowed_dtype(dtype)
    shape = _checked_shape(shape)
    offset = stream.tell()
    count = _checked_size(shape, dtype, len(data) - offset)
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=offset) if count else np.empty(0, dtype)
    return flat.reshape(shape, order="F" if fortran_order else "C").copy(order="K")


def _gr00t_object_hook(obj: dict) -> Any:
    if "__ndarray_class__" in obj:
        data = obj.get("as_npy")
        if not isinstance(data, bytes):
            raise WireFormatError(f"as_npy must be msgpack bin, got {type(data).__name__}")
        return npy_array(data)
    return obj


def gr00t_packb(obj: Any) -> bytes:
    """Serialise in GR00T's encoding (arrays as .npy bytes)."""
    return msgpack.packb(obj, default=_gr00t_default)


def gr00t_unpackb(data: bytes) -> Any:
    """Deserialise GR00T's encoding. Raises WireFormatError on anything malformed."""
    return _unpack(data, _gr00t_object_hook)
