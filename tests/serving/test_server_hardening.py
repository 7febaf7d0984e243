"""Both policy servers answer every malformed, oversized or unauthenticated request with an error (or a
close) within a second, and meanwhile keep serving a well-behaved client that runs in parallel."""

from __future__ import annotations

import io
import threading
from typing import Any, Callable

import msgpack
import numpy as np
import pytest
import websockets
import zmq
import zmq.utils.monitor
from serving_test_policies import ServingTestPolicy
from websockets.sync.client import connect

from evalfleet.serving.gr00t import Gr00tRemoteOptions, Gr00tRemotePolicy, Gr00tServer
from evalfleet.serving.msgpack_numpy import gr00t_unpackb
from evalfleet.serving.openpi import OpenpiRemoteOptions, OpenpiRemotePolicy, OpenpiServer
from evalfleet.serving.websocket import api_key_header
from evalfleet.serving.process import ServerThread

REPLY_WITHIN_S = 1.0
TOKEN = "tok"
LIMIT = 2**20  # the servers' max_message_bytes here


class GoodClient(threading.Thread):
    """A well-behaved client acting in a loop: state [i, i + 1] must come back as action [2i, 2i + 2, ...]."""

    def __init__(self, make: Callable[[], Any]):
        super().__init__(daemon=True)
        self.remote = make()
        self.correct = 0
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.progressed = threading.Condition()

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            obs = {"observation/state": np.array([i, i + 1], dtype=np.float32)}
            try:
                action = self.remote.act(obs)
                if not np.allclose(action[:2], [2 * i, 2 * i + 2]):
                    self.errors.append(f"step {i}: wrong action {action}")
            except Exception as exc:  # noqa: BLE001 - reported by wait_for_progress
                self.errors.append(f"step {i}: {type(exc).__name__}: {exc}")
            with self.progressed:
                self.correct += 1
                self.progressed.notify_all()
            i += 1

    def wait_for_progress(self, steps: int = 2) -> None:
        """Returns once the client completed `steps` more correct round trips (i.e. after whatever the test
        just sent was answered)."""
        with self.progressed:
            target = self.correct + steps
            assert self.progressed.wait_for(lambda: self.correct >= target or self.errors, timeout=10)
        assert not self.errors, self.errors

    def finish(self) -> None:
        self.stopping.set()
        self.join(10)
        self.remote.close()


# ===================================================================== GR00T (ZMQ)


def npy_header(shape: tuple, descr: str = "<f8") -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def npy(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def as_array(blob: bytes) -> dict:
    return {"__ndarray_class__": True, "as_npy": blob}


def get_action(state: Any, **envelope: Any) -> bytes:
    request = {"endpoint": "get_action", "data": {"observation": {"observation/state": state}, "options": None}}
    return msgpack.packb({**request, **envelope})


GOOD_STATE = as_array(npy(np.array([1.0, 2.0], dtype=np.float32)))
BOMB = as_array(npy_header((10**12,)) + b"\0" * 16)  # claims 8 TB, carries 16 bytes
GR00T_REFUSALS = {
    "no token": (get_action(GOOD_STATE), "Unauthorized"),
    "bad token": (get_action(GOOD_STATE, api_token="nope"), "Unauthorized"),
    "token not a string": (get_action(GOOD_STATE, api_token=123), "Unauthorized"),
    "no token, npy header claiming 10^12 elements": (get_action(BOMB), "Unauthorized"),
    "no token, npz bytes": (get_action(as_array(npz(x=np.zeros(3)))), "Unauthorized"),
    "npy header claiming 10^12 elements": (get_action(BOMB, api_token=TOKEN), "needs 8000000000000 bytes, has 16"),
    "npz bytes": (get_action(as_array(npz(x=np.zeros(3))), api_token=TOKEN), ".npz archive"),
    "object dtype (pickled npy)": (
        get_action(as_array(npy(np.array([{"a": 1}], dtype=object), allow_pickle=True)), api_token=TOKEN),
        "not allowed"),
    "truncated array data": (get_action(as_array(npy(np.zeros(100))[:-8]), api_token=TOKEN), "needs 800 bytes"),
    "as_npy not bytes": (get_action({"__ndarray_class__": True, "as_npy": 5}, api_token=TOKEN), "as_npy"),
    "truncated message": (get_action(GOOD_STATE, api_token=TOKEN)[:-10], "malformed msgpack"),
    "not msgpack": (b"\xc1 this is not msgpack", "expected a msgpack map"),
    "empty message": (b"", "expected a msgpack map"),
    "map header then garbage": (b"\x83\xc1\xc1", "malformed msgpack"),
    "envelope is a list": (msgpack.packb(["get_action", {}]), "expected a msgpack map"),
    "envelope is an int": (msgpack.packb(7), "expected a msgpack map"),
    "envelope is None": (msgpack.packb(None), "expected a msgpack map"),
    "envelope is an encoded array": (msgpack.packb({**GOOD_STATE, "api_token": TOKEN}), "a request must be a"),
    "endpoint not a string": (msgpack.packb({"endpoint": 5, "api_token": TOKEN}), "endpoint must be a string"),
    "unknown endpoint": (msgpack.packb({"endpoint": "shutdown", "api_token": TOKEN}), "Unknown endpoint: shutdown"),
    "observation not a map": (msgpack.packb({"endpoint": "get_action", "data": 5, "api_token": TOKEN}),
                              "needs an observation map"),
    "data is an array": (msgpack.packb({"endpoint": "get_action", "data": GOOD_STATE, "api_token": TOKEN}),
                         "needs an observation map"),
    "reset seed not an int": (
        msgpack.packb({"endpoint": "reset", "data": {"options": {"episode_seed": "x"}}, "api_token": TOKEN}),
        "reset takes"),
    "oversize message": (get_action(as_array(npy(np.zeros(LIMIT // 8 + 1000))), api_token=TOKEN),
                         "over this server's limit"),
}


@pytest.fixture(scope="module")
def gr00t():
    with ServerThread(Gr00tServer(ServingTestPolicy({}), api_key=TOKEN, max_message_bytes=LIMIT)) as server:
        good = GoodClient(lambda: Gr00tRemotePolicy(Gr00tRemoteOptions(
            port=server.port, api_key=TOKEN, connect_timeout_s=5, request_timeout_s=5)))
        good.start()
        try:
            yield server.port, good
        finally:
            good.finish()


def zmq_request(port: int, frames: list[bytes]) -> Any:
    """What a REQ peer gets back within REPLY_WITHIN_S (the decoded reply), or None."""
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{port}")
    try:
        sock.send_multipart(frames)
        if not sock.poll(int(REPLY_WITHIN_S * 1000)):
            return None
        return gr00t_unpackb(sock.recv())
    finally:
        sock.close()


@pytest.mark.parametrize("case", sorted(GR00T_REFUSALS))
def test_gr00t_answers_every_bad_request_with_an_error(gr00t, case):
    port, good = gr00t
    payload, expected = GR00T_REFUSALS[case]
    reply = zmq_request(port, [payload])
    assert isinstance(reply, dict) and expected in reply.get("error", ""), reply
    good.wait_for_progress()


def test_gr00t_answers_a_request_in_several_frames(gr00t):
    port, good = gr00t
    reply = zmq_request(port, [msgpack.packb({"endpoint": "ping", "api_token": TOKEN}), b"more"])
    assert "one message frame" in reply["error"]
    good.wait_for_progress()


def test_gr00t_drops_a_peer_far_over_the_limit_at_once(gr00t):
    """Over twice the limit libzmq disconnects the sender instead of reading it all: a REQ peer sees the
    disconnect (it could not be sent a reply any more)."""
    port, good = gr00t
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    try:
        sock.connect(f"tcp://127.0.0.1:{port}")
        sock.send(b"\x80" + b"\0" * (3 * LIMIT))
        assert monitor.poll(int(REPLY_WITHIN_S * 1000))
        assert zmq.utils.monitor.recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
    finally:
        sock.disable_monitor()
        monitor.close()
        sock.close()
    good.wait_for_progress()


def test_gr00t_authenticated_requests_still_work_between_bad_ones(gr00t):
    port, good = gr00t
    assert zmq_request(port, [msgpack.packb({"endpoint": "ping", "api_token": TOKEN})])["status"] == "ok"
    reply = zmq_request(port, [get_action(GOOD_STATE, api_token=TOKEN)])
    np.testing.assert_allclose(reply[0]["action"][:2], [2, 4])
    good.wait_for_progress()


# ===================================================================== openpi (websocket)

OPENPI_KEY = "s3cret"


def ndarray_map(data: Any, dtype: Any, shape: Any) -> dict:
    return {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": shape}


def observation(value: Any) -> bytes:
    return msgpack.packb({"observation/state": value, "prompt": "pick"})


OPENPI_REFUSALS = {
    "text frame": "not a binary frame",
    "not msgpack": b"\xc1 this is not msgpack",
    "empty frame": b"",
    "truncated message": msgpack.packb({"observation/state": b"\0" * 64})[:-10],
    "envelope is a list": msgpack.packb([1, 2]),
    "envelope is an int": msgpack.packb(7),
    "envelope is None": msgpack.packb(None),
    "object dtype": observation(ndarray_map(b"\0" * 8, "|O", [1])),
    "header claiming 10^12 elements": observation(ndarray_map(b"\0" * 8, "<f8", [10**6, 10**6])),
    "truncated array data": observation(ndarray_map(b"\0" * 7, "<f4", [2])),
    "negative size": observation(ndarray_map(b"", "<f4", [-1, 0])),
    "dtype not a string": observation(ndarray_map(b"\0" * 4, 5, [1])),
    "structured dtype": observation(ndarray_map(b"\0" * 8, "f4,i4", [1])),
    "scalar out of range": observation({b"__npgeneric__": True, b"data": 1000, b"dtype": "|i1"}),
    "msgpack extension type": observation(msgpack.ExtType(5, b"x")),
    "reset seed not an int": msgpack.packb({"__evalfleet_reset__": {"episode_seed": "x"}}),
}


@pytest.fixture(scope="module")
def openpi():
    policy = ServingTestPolicy({})
    with ServerThread(OpenpiServer(policy, api_key=OPENPI_KEY, max_message_bytes=LIMIT)) as server:
        good = GoodClient(lambda: OpenpiRemotePolicy(OpenpiRemoteOptions(
            port=server.port, api_key=OPENPI_KEY, connect_timeout_s=5, request_timeout_s=5)))
        good.start()
        try:
            yield server.port, good
        finally:
            good.finish()


def ws_connect(port: int, headers: Any = None):
    return connect(f"ws://127.0.0.1:{port}", proxy=None, max_size=None, open_timeout=REPLY_WITHIN_S,
                   additional_headers=headers)


def ws_exchange(port: int, frame: bytes | str) -> tuple[list[Any], int | None]:
    """Send one frame after the metadata; the frames that came back and the server's close code."""
    received: list[Any] = []
    with ws_connect(port, api_key_header(OPENPI_KEY)) as ws:
        ws.recv(timeout=REPLY_WITHIN_S)  # the metadata frame
        ws.send(frame)
        try:
            while True:
                received.append(ws.recv(timeout=REPLY_WITHIN_S))
        except websockets.ConnectionClosed as closed:
            return received, closed.rcvd.code if closed.rcvd else None


@pytest.mark.parametrize("headers", [None, api_key_header("wrong"),
                                     [("Authorization", f"Api-Key {OPENPI_KEY}"), ("Authorization", "Api-Key x")]],
                         ids=["no key", "wrong key", "two keys"])
def test_openpi_refuses_a_missing_or_wrong_key_at_the_handshake(openpi, headers):
    port, good = openpi
    with pytest.raises(websockets.InvalidStatus) as refused:
        ws_connect(port, headers)
    assert refused.value.response.status_code == 401
    good.wait_for_progress()


@pytest.mark.parametrize("case", sorted(OPENPI_REFUSALS))
def test_openpi_answers_every_bad_frame_with_an_error_and_a_close(openpi, case):
    port, good = openpi
    received, code = ws_exchange(port, OPENPI_REFUSALS[case])
    assert len(received) == 1 and isinstance(received[0], str) and received[0].startswith("bad request"), received
    assert code == 1007
    good.wait_for_progress()


def test_openpi_closes_on_an_oversize_frame(openpi):
    port, good = openpi
    received, code = ws_exchange(port, observation(np.zeros(LIMIT + 1, np.uint8).tobytes()))
    assert received == [] and code == 1009
    good.wait_for_progress()


def test_openpi_well_formed_frames_still_work_between_bad_ones(openpi):
    port, good = openpi
    with ws_connect(port, api_key_header(OPENPI_KEY)) as ws:
        ws.recv(timeout=REPLY_WITHIN_S)
        ws.send(observation(ndarray_map(np.array([3, 4], "<f4").tobytes(), "<f4", [2])))
        reply = msgpack.unpackb(ws.recv(timeout=REPLY_WITHIN_S))
    assert np.frombuffer(reply["actions"][b"data"], "<f4")[:2].tolist() == [6, 8]
    good.wait_for_progress()
