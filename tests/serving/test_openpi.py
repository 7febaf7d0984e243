from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
import websockets
from serving_test_policies import require_openpi_client
from serving_test_policies import ServingTestPolicy
from websockets.sync.client import connect

from evalfleet.errors import InfrastructureError
from evalfleet.serving import msgpack_numpy
from evalfleet.serving.common import AuthenticationError, RemotePolicyError
from evalfleet.serving.openpi import OpenpiRemoteOptions, OpenpiRemotePolicy, OpenpiServer, openpi_healthy
from evalfleet.serving.process import ServerThread, free_port


def observation(i: int = 0) -> dict:
    return {
        "observation/image": np.full((2, 224, 224, 3), i % 255, dtype=np.uint8),
        "observation/state": np.array([i, i + 0.5], dtype=np.float32),
        "observation/joints": np.arange(3, dtype=np.float64) + i,
        "observation/ids": np.array([[i, -i]], dtype=np.int32),
        "prompt": f"pick up puck {i}",
    }


def client(port: int, **kw) -> OpenpiRemotePolicy:
    return OpenpiRemotePolicy(OpenpiRemoteOptions(port=port, connect_timeout_s=5, request_timeout_s=5, **kw))


def test_openpi_client_peer_drives_our_server():
    peer = require_openpi_client()
    policy = ServingTestPolicy({"chunk": 3})
    with ServerThread(OpenpiServer(policy)) as server:
        remote = peer.WebsocketClientPolicy(host="127.0.0.1", port=server.port)
        meta = remote.get_server_metadata()
        assert meta["name"] == "serving_test" and meta["action_dim"] == 4
        np.testing.assert_array_equal(meta["table"], np.arange(6).reshape(2, 3))
        assert meta["table"].dtype == np.int64 and meta["scale"] == np.float32(0.5)
        for i in range(4):
            sent = observation(i)
            reply = remote.infer(sent)
            assert reply["actions"].shape == (3, 4) and reply["actions"].dtype == np.float32
            np.testing.assert_allclose(reply["actions"][0, :2], [2 * i, 2 * i + 1])
            assert reply["server_timing"]["infer_ms"] >= 0
            assert ("prev_total_ms" in reply["server_timing"]) == (i > 0)
            got = policy.observations[-1]
            for key, value in sent.items():
                if isinstance(value, np.ndarray):
                    assert got[key].dtype == value.dtype and got[key].shape == value.shape
                    np.testing.assert_array_equal(got[key], value)
                else:
                    assert got[key] == value


def test_openpi_client_peer_gets_policy_errors_as_text_frames():
    peer = require_openpi_client()
    with ServerThread(OpenpiServer(ServingTestPolicy({}))) as server:
        remote = peer.WebsocketClientPolicy(host="127.0.0.1", port=server.port)
        with pytest.raises(RuntimeError, match="boom: now"):
            remote.infer({"fail": "now"})


def test_our_client_against_our_server_with_reset_and_batch():
    policy = ServingTestPolicy({})
    with ServerThread(OpenpiServer(policy, max_batch=4, max_wait_ms=50)) as server:
        remote = client(server.port)
        assert remote.metadata["name"] == "serving_test"
        for env_id, seed in ((0, 11), (1, 12), (2, 13)):
            remote.reset(seed, env_id)
        actions = remote.act_batch([observation(i) for i in range(3)], [0, 1, 2])
        for i, action in enumerate(actions):
            np.testing.assert_allclose(action[:3], [2 * i, 2 * i + 1, 11 + i])
        single = remote.act(observation(7), env_id=1)
        np.testing.assert_allclose(single[:3], [14, 15, 12])
        remote.close()


def test_policy_error_is_text_frame_then_close_1011_and_client_raises_infrastructure_error():
    with ServerThread(OpenpiServer(ServingTestPolicy({}))) as server:
        with connect(f"ws://127.0.0.1:{server.port}", proxy=None) as ws:
            msgpack_numpy.unpackb(ws.recv(timeout=5))
            ws.send(msgpack_numpy.packb({"fail": "x"}))
            text = ws.recv(timeout=5)
            assert isinstance(text, str) and "ValueError: boom: x" in text
            with pytest.raises(websockets.ConnectionClosed) as closed:
                ws.recv(timeout=5)
            assert closed.value.rcvd.code == 1011
        remote = client(server.port)
        with pytest.raises(RemotePolicyError, match="boom"):
            remote.act({"fail": "y"})
        np.testing.assert_allclose(remote.act(observation(1))[:2], [2, 3])  # reconnects afterwards


def test_api_key_is_checked_at_the_handshake():
    peer = require_openpi_client()
    with ServerThread(OpenpiServer(ServingTestPolicy({}), api_key="s3cret")) as server:
        assert openpi_healthy("127.0.0.1", server.port)  # health needs no key
        ok = peer.WebsocketClientPolicy(host="127.0.0.1", port=server.port, api_key="s3cret")
        assert ok.infer(observation(1))["actions"].shape == (4,)
        with pytest.raises(websockets.InvalidStatus) as refused:
            peer.WebsocketClientPolicy(host="127.0.0.1", port=server.port, api_key="wrong")
        assert refused.value.response.status_code == 401
        with pytest.raises(AuthenticationError):
            client(server.port, api_key="wrong")
        with pytest.raises(AuthenticationError):
            client(server.port)
        assert client(server.port, api_key="s3cret").act(observation(2)).shape == (4,)


def test_message_size_is_bounded():
    with ServerThread(OpenpiServer(ServingTestPolicy({}), max_message_bytes=2**20)) as server:
        with connect(f"ws://127.0.0.1:{server.port}", proxy=None, max_size=None) as ws:
            ws.recv(timeout=5)
            ws.send(msgpack_numpy.packb({"blob": np.zeros(2 * 2**20, dtype=np.uint8)}))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                ws.recv(timeout=5)
            assert closed.value.rcvd.code == 1009


def test_dead_server_is_an_infrastructure_error():
    port = free_port()
    with pytest.raises(InfrastructureError, match="not reachable"):
        OpenpiRemotePolicy(OpenpiRemoteOptions(port=port, connect_timeout_s=0.5))


def test_client_survives_a_server_restart_on_the_same_port():
    policy = ServingTestPolicy({})
    first = ServerThread(OpenpiServer(policy)).start()
    port = first.port
    remote = client(port, max_retries=5)
    remote.options.connect_timeout_s = 1.0
    np.testing.assert_allclose(remote.act(observation(1))[:2], [2, 3])
    first.stop()
    second = ServerThread(OpenpiServer(policy, port=port)).start()
    try:
        np.testing.assert_allclose(remote.act(observation(2))[:2], [4, 5])
    finally:
        second.stop()
    with pytest.raises(InfrastructureError):
        OpenpiRemotePolicy.act(remote, observation(3))  # nothing listens any more


def test_our_client_works_with_a_minimal_third_party_server():
    """A bare server written against the protocol text only (not our server class)."""
    import msgpack
    from websockets.asyncio.server import serve

    def pack(obj):
        def default(o):
            if isinstance(o, np.ndarray):
                return {b"__ndarray__": True, b"data": o.tobytes(), b"dtype": o.dtype.str, b"shape": o.shape}
            raise TypeError

        return msgpack.packb(obj, default=default)

    def hook(obj):
        if b"__ndarray__" in obj:
            return np.frombuffer(obj[b"data"], dtype=obj[b"dtype"]).reshape(obj[b"shape"])
        return obj

    async def handler(ws):
        await ws.send(pack({"model": "bare"}))
        async for message in ws:
            obs = msgpack.unpackb(message, object_hook=hook)
            await ws.send(pack({"actions": obs["observation/state"][::-1].copy() * 10}))

    started = threading.Event()
    holder = {}

    def run():
        async def main():
            async with serve(handler, "127.0.0.1", 0, max_size=None) as srv:
                holder["port"] = srv.sockets[0].getsockname()[1]
                holder["stop"] = asyncio.Event()
                holder["loop"] = asyncio.get_running_loop()
                started.set()
                await holder["stop"].wait()

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(5)
    try:
        remote = client(holder["port"])
        assert remote.metadata == {"model": "bare"}
        remote.reset(3)  # no evalfleet extension advertised: a no-op
        np.testing.assert_allclose(remote.act(observation(1)), [15, 10])
        np.testing.assert_allclose(remote.act_batch([observation(1), observation(2)], [0, 1])[1], [25, 20])
    finally:
        holder["loop"].call_soon_threadsafe(holder["stop"].set)
        thread.join(5)
