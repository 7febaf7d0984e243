"""Decompression bombs on every protocol: a frame of a few hundred KB that declares (or decodes to) gigabytes is
refused before anything is decoded, the server answers with an error, its memory stays small and it serves the
next request. vla-eval carries PNG/JPEG images; openpi and GR00T carry raw arrays, bounded by the message."""

from __future__ import annotations

import io
import struct
import time
import zlib

import msgpack
import numpy as np
import pytest
from PIL import Image
from websockets.sync.client import connect

from evalfleet.serving import msgpack_numpy, vlaeval_codec
from evalfleet.serving.process import ServerProcess

SIDE = 8192  # 8192 x 8192 RGBA: 256 MiB of pixels, about 260 KB of PNG
RSS_GROWTH_LIMIT = 200 * 2**20


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


@pytest.fixture(scope="module")
def png_bomb() -> bytes:
    """A valid PNG of SIDE x SIDE RGBA zeros: small on the wire, 256 MiB once decoded."""
    compress = zlib.compressobj(9)
    row = b"\0" * (1 + SIDE * 4)  # filter byte + pixels
    idat = b"".join(compress.compress(row) for _ in range(SIDE)) + compress.flush()
    header = struct.pack(">IIBBBBB", SIDE, SIDE, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def _image(data: bytes, shape: list[int], fmt: str = "png") -> dict:
    return {"__image__": True, "format": fmt, "data": data, "shape": shape}


def _frame(images: dict, seq: int = 1) -> bytes:
    envelope = {"type": "observation", "payload": {"images": images, "state": [1.0, 2.0]}, "seq": seq,
                "timestamp": time.time()}
    return msgpack.packb(envelope, use_bin_type=True)


def _png(array: np.ndarray, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format=fmt)
    return buf.getvalue()


def test_vlaeval_codec_refuses_a_png_bomb_before_decoding(png_bomb):
    assert len(png_bomb) < 2**20
    with pytest.raises(vlaeval_codec.WireFormatError, match="decodes to 268435456 bytes"):
        vlaeval_codec.unpack(_frame({"top": _image(png_bomb, [SIDE, SIDE, 4])}))


def test_vlaeval_codec_bounds_the_frame_not_only_each_image():
    """Images that each fit but together decode to more than the frame limit are refused."""
    small = np.zeros((256, 256, 4), np.uint8)
    one = _image(_png(small), [256, 256, 4])  # 256 KiB decoded
    limit = 600 * 2**10
    assert vlaeval_codec.unpack(_frame({"a": one, "b": one}), max_bytes=limit)[0] == "observation"
    with pytest.raises(vlaeval_codec.WireFormatError, match="may decode to"):
        vlaeval_codec.unpack(_frame({"a": one, "b": one, "c": one}), max_bytes=limit)


def test_vlaeval_codec_opens_only_the_declared_codec():
    """A "png" that is really a GIF/BMP/JPEG is refused, so no other PIL decoder is reachable."""
    image = np.full((8, 8, 3), 100, np.uint8)
    for fmt in ("GIF", "BMP", "JPEG", "TIFF"):
        with pytest.raises(vlaeval_codec.WireFormatError, match="does not decode as png"):
            vlaeval_codec.unpack(_frame({"top": _image(_png(image, fmt), [8, 8, 3])}))
    jpeg = vlaeval_codec.unpack(_frame({"top": _image(_png(image, "JPEG"), [8, 8, 3], "jpeg")}))
    assert jpeg[1]["images"]["top"].shape == (8, 8, 3)
    with pytest.raises(vlaeval_codec.WireFormatError, match="its shape says"):  # header disagrees with shape
        vlaeval_codec.unpack(_frame({"top": _image(_png(image), [4, 16, 3])}))


def test_openpi_and_gr00t_arrays_cannot_claim_more_than_they_carry():
    """The msgpack-numpy encodings carry raw bytes: a huge declared shape with a few bytes is refused."""
    huge = {b"__ndarray__": True, b"data": b"\0" * 16, b"dtype": "|u1", b"shape": [SIDE, SIDE, 4]}
    with pytest.raises(msgpack_numpy.WireFormatError, match="needs"):
        msgpack_numpy.unpackb(msgpack.packb({"image": huge}))
    npy = io.BytesIO()
    np.lib.format.write_array_header_1_0(npy, {"descr": "|u1", "fortran_order": False, "shape": (SIDE, SIDE, 4)})
    with pytest.raises(msgpack_numpy.WireFormatError, match="needs"):
        msgpack_numpy.gr00t_unpackb(msgpack.packb({"image": {"__ndarray_class__": True,
                                                             "as_npy": npy.getvalue() + b"\0" * 16}}))


def _peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


@pytest.mark.slow
def test_vlaeval_server_refuses_png_bombs_and_keeps_serving(tmp_path, subprocess_env, png_bomb):
    proc = ServerProcess(["evalfleet", "serve", "serving_test", "--import", "serving_test_policies", "--protocol",
                          "vla-eval", "--port", "{port}"], protocol="vla-eval", log_path=tmp_path / "serve.log",
                         env=subprocess_env)
    good = _frame({"top": _image(_png(np.full((16, 16, 3), 7, np.uint8)), [16, 16, 3])}, seq=1)
    with proc:
        proc.wait_healthy(60)
        with connect(f"ws://127.0.0.1:{proc.port}", max_size=2**24, open_timeout=30) as ws:
            ws.send(good)
            assert msgpack.unpackb(ws.recv(timeout=30))["type"] == "action"
            before = _peak_rss(proc.pid)
            bombs = {f"cam{i}": _image(png_bomb, [SIDE, SIDE, 4]) for i in range(3)}
            ws.send(_frame(bombs, seq=2))
            reply = msgpack.unpackb(ws.recv(timeout=60))
            grown = _peak_rss(proc.pid) - before
            assert reply["type"] == "error" and "bad_request" in reply["payload"]["error"], reply
            assert "decodes to" in reply["payload"]["error"]
            ws.send(good)  # and the server still answers
            after = msgpack.unpackb(ws.recv(timeout=30))
    assert after["type"] == "action" and after["seq"] == 1
    assert grown < RSS_GROWTH_LIMIT, f"the server's peak RSS grew by {grown / 2**20:.0f} MiB"
