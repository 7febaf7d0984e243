"""vla-eval's frame codec: msgpack envelopes whose arrays and images are decoded within a budget.

Arrays travel as ``{"__ndarray__": true, data, dtype, shape}`` (bool/int/uint/float only) and HWC uint8 images
(1, 3 or 4 channels) as ``{"__image__": true, format: png|raw|jpeg, data, shape}``. A PNG or JPEG of a few
hundred bytes can declare 8192x8192 pixels (a decompression bomb), so every image is checked BEFORE its pixels
are decoded: its declared ``shape`` (height x width x channels bytes) is charged to the frame's decode budget,
the codec's own header (read by PIL without decoding) must be of the declared format and say the same height
and width, and only then are the pixels decoded. The budget of one frame is the frame size limit
(`max_bytes`): decoded arrays and images together may hold no more than a raw frame could carry, whatever the
compression. Anything else is a `WireFormatError`.
"""

from __future__ import annotations

import io
import time
from typing import Any

import msgpack
import numpy as np

from evalfleet.serving.common import DEFAULT_MAX_MESSAGE_MB

ALLOWED_DTYPE_KINDS = frozenset("biuf")
# PIL's plugin for each image format the protocol names: a "png" is never opened as a TIFF, PSD, GIF...
IMAGE_FORMATS = {"png": "PNG", "jpeg": "JPEG"}
MODES = {1: "L", 3: "RGB", 4: "RGBA"}


class WireFormatError(ValueError):
    """A frame that is not a valid vla-eval envelope."""


class DecodeBudget:
    """Bytes one frame may still decode into."""

    def __init__(self, limit: int):
        self.limit = limit
        self.left = limit

    def take(self, nbytes: int, what: str) -> None:
        if nbytes > self.left:
            raise WireFormatError(f"{what} decodes to {nbytes} bytes; the frame may decode to {self.limit} bytes"
                                  f" in all ({self.left} left): send smaller images or raise --max-message-mb")
        self.left -= nbytes


def _encode(obj: Any, image_format: str) -> Any:
    if isinstance(obj, np.ndarray):
        if image_format != "raw" and obj.ndim == 3 and obj.dtype == np.uint8 and obj.shape[2] in (1, 3, 4):
            from PIL import Image

            buf = io.BytesIO()
            Image.fromarray(obj[..., 0] if obj.shape[2] == 1 else obj).save(buf, format="PNG")
            return {"__image__": True, "format": "png", "data": buf.getvalue(), "shape": list(obj.shape)}
        if obj.dtype.kind not in ALLOWED_DTYPE_KINDS:
            raise TypeError(f"vla-eval carries bool/int/uint/float arrays, not {obj.dtype}")
        return {"__ndarray__": True, "data": obj.tobytes(), "dtype": obj.dtype.str, "shape": list(obj.shape)}
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, (tuple, set)):
        return list(obj)
    raise TypeError(f"cannot send a {type(obj).__name__} over vla-eval")


def _shape(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > 32 or not all(type(d) is int and d >= 0 for d in value):
        raise WireFormatError(f"bad array shape {str(value)[:80]}")
    return tuple(value)


def decode_image(obj: dict[str, Any], budget: DecodeBudget) -> np.ndarray:
    """One image, refused before decoding when its declared size is over the budget or its header disagrees."""
    from PIL import Image

    shape = _shape(obj.get("shape"))
    data = obj.get("data")
    if not isinstance(data, bytes) or len(shape) != 3 or shape[2] not in MODES:
        raise WireFormatError("an image needs bytes `data` and an HWC `shape` with 1, 3 or 4 channels")
    fmt = obj.get("format")
    if fmt == "raw":
        return decode_array({"data": data, "dtype": "|u1", "shape": list(shape)}, budget)
    if fmt not in IMAGE_FORMATS:
        raise WireFormatError(f"unknown image format {str(fmt)[:40]!r} (png, jpeg or raw)")
    height, width, channels = shape
    budget.take(height * width * channels, f"a {height}x{width}x{channels} image")
    try:
        with Image.open(io.BytesIO(data), formats=[IMAGE_FORMATS[fmt]]) as img:  # reads the header only
            if img.size != (width, height):
                raise WireFormatError(f"image is {img.size[1]}x{img.size[0]}, its shape says {height}x{width}")
            arr = np.asarray(img.convert(MODES[channels]), dtype=np.uint8)
    except WireFormatError:
        raise
    except Exception as exc:  # noqa: BLE001 - anything PIL says about bad bytes
        raise WireFormatError(f"image does not decode as {fmt}: {str(exc)[:200]}") from None
    return arr.reshape(shape)


def decode_array(obj: dict[str, Any], budget: DecodeBudget) -> np.ndarray:
    try:
        dtype = np.dtype(obj.get("dtype"))
    except TypeError:
        raise WireFormatError(f"bad dtype {str(obj.get('dtype'))[:40]!r}") from None
    if dtype.kind not in ALLOWED_DTYPE_KINDS:
        raise WireFormatError(f"disallowed dtype {dtype}; only bool/int/uint/float")
    shape = _shape(obj.get("shape"))
    data = obj.get("data")
    if not isinstance(data, bytes) or len(data) != int(np.prod(shape, dtype=object)) * dtype.itemsize:
        raise WireFormatError(f"array data does not fill shape {list(shape)} of {dtype}")
    budget.take(len(data), f"an array of shape {list(shape)}")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def pack(msg_type: str, payload: dict[str, Any], seq: int, *, image_format: str = "png") -> bytes:
    envelope = {"type": msg_type, "payload": payload, "seq": seq, "timestamp": time.time()}
    return msgpack.packb(envelope, default=lambda o: _encode(o, image_format), use_bin_type=True)


def unpack(data: Any, *, max_bytes: int = DEFAULT_MAX_MESSAGE_MB * 2**20) -> tuple[str, dict[str, Any], int]:
    """(type, payload, seq) of one frame. Raises WireFormatError for anything the protocol does not allow."""
    if isinstance(data, str):
        raise WireFormatError("expected a binary msgpack frame, got text")
    if len(data) > max_bytes:
        raise WireFormatError(f"frame of {len(data)} bytes is over the {max_bytes} byte limit")
    budget = DecodeBudget(max_bytes)

    def object_hook(obj: dict[str, Any]) -> Any:
        if obj.get("__image__") is True:
            return decode_image(obj, budget)
        if obj.get("__ndarray__") is True:
            return decode_array(obj, budget)
        return obj

    try:
        raw = msgpack.unpackb(data, object_hook=object_hook, raw=False, strict_map_key=True,
                              max_bin_len=max_bytes, max_str_len=max_bytes)
    except WireFormatError:
        raise
    except Exception as exc:  # noqa: BLE001 - msgpack's many error types
        raise WireFormatError(f"not msgpack: {str(exc)[:200]}") from None
    if not isinstance(raw, dict) or any(k not in raw for k in ("type", "payload", "seq", "timestamp")):
        raise WireFormatError("a message is a map with type, payload, seq and timestamp")
    if raw["type"] not in MESSAGE_TYPES or not isinstance(raw["payload"], dict) or type(raw["seq"]) is not int:
        raise WireFormatError(f"bad envelope (type {str(raw['type'])[:40]!r}, payload {type(raw['payload']).__name__})")
    return raw["type"], raw["payload"], raw["seq"]


MESSAGE_TYPES = ("hello", "observation", "action", "episode_start", "episode_end", "error")
