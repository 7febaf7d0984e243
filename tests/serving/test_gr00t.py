from __future__ import annotations

import numpy as np
import pytest
import zmq
from serving_test_policies import ServingTestPolicy

from evalfleet.errors import InfrastructureError
from evalfleet.serving.common import AuthenticationError, RemotePolicyError
from evalfleet.serving.gr00t import Gr00tRemoteOptions, Gr00tRemotePolicy, Gr00tServer, gr00t_ping
from evalfleet.serving.msgpack_numpy import gr00t_packb, gr00t_unpackb
from evalfleet.serving.process import ServerThread, free_port

OBS = {"observation/state": np.array([1.0, 2.0], dtype=np.float32), "video.ego": np.zeros((1, 8, 8, 3), np.uint8),
       "annotation.task": ["pick the puck"]}


def client(port: int, **kw) -> Gr00tRemotePolicy:
    kw.setdefault("connect_timeout_s", 5)
    kw.setdefault("request_timeout_s", 5)
    return Gr00tRemotePolicy(Gr00tRemoteOptions(port=port, **kw))


def raw_call(port: int, request: dict) -> object:
    """What Isaac-GR00T's own PolicyClient sends: a REQ socket and one msgpack map."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{port}")
    try:
        sock.send(gr00t_packb(request))
        assert sock.poll(5000)
        return gr00t_unpackb(sock.recv())
    finally:
        sock.close()


def test_round_trip_ping_get_action_reset_modality_config():
    policy = ServingTestPolicy({"chunk": 2})
    with ServerThread(Gr00tServer(policy)) as server:
        assert gr00t_ping("127.0.0.1", server.port)
        assert raw_call(server.port, {"endpoint": "ping"}) == {"status": "ok", "message": "Server is running"}
        remote = client(server.port)
        assert remote.ping()
        assert remote.get_modality_config() == {"state": {"keys": ["state.arm"]}}
        remote.reset(21, env_id=0)
        action = remote.act(OBS, env_id=0)
        assert action.shape == (2, 4) and action.dtype == np.float32
        np.testing.assert_allclose(action[0, :3], [2, 4, 21])
        got = policy.observations[-1]
        assert got["video.ego"].dtype == np.uint8 and got["video.ego"].shape == (1, 8, 8, 3)
        assert got["annotation.task"] == ["pick the puck"]
        # the current (N1.6) reply form is [action_dict, info]; the N1.5 form gets an action dict back
        current = raw_call(server.port, {"endpoint": "get_action", "data": {"observation": OBS, "options": None}})
        assert isinstance(current, list) and set(current[0]) == {"action"} and "infer_ms" in current[1]
        legacy = raw_call(server.port, {"endpoint": "get_action", "data": OBS})
        assert set(legacy) == {"action"}
        assert client(server.port, request_style="legacy").act(OBS).shape == (2, 4)
        assert "Unknown endpoint" in raw_call(server.port, {"endpoint": "kill"})["error"]
        remote.close()


def test_wrong_api_token_is_refused():
    with ServerThread(Gr00tServer(ServingTestPolicy({}), api_key="tok")) as server:
        assert raw_call(server.port, {"endpoint": "ping", "api_token": "nope"}) == {
            "error": "Unauthorized: Invalid API token"}
        assert "Unauthorized" in raw_call(server.port, {"endpoint": "ping"})["error"]
        with pytest.raises(AuthenticationError, match="refused the API token"):
            client(server.port, api_key="nope")
        assert not gr00t_ping("127.0.0.1", server.port)
        assert gr00t_ping("127.0.0.1", server.port, api_key="tok")
        np.testing.assert_allclose(client(server.port, api_key="tok").act(OBS)[:2], [2, 4])


def test_policy_error_is_reported_and_server_lives_on():
    with ServerThread(Gr00tServer(ServingTestPolicy({}))) as server:
        remote = client(server.port)
        with pytest.raises(RemotePolicyError, match="boom"):
            remote.act({"fail": 1})
        assert remote.act(OBS).shape == (4,)


def test_dead_server_is_an_infrastructure_error_within_the_timeout():
    port = free_port()
    with pytest.raises(InfrastructureError, match="not ready within 0.5 s"):
        Gr00tRemotePolicy(Gr00tRemoteOptions(port=port, connect_timeout_s=0.5))


def test_server_dying_mid_run_is_an_infrastructure_error():
    server = ServerThread(Gr00tServer(ServingTestPolicy({}))).start()
    # Generous for a loaded machine: a healthy answer has 3 tries of 1 s; only the dead server uses them up.
    remote = client(server.port, request_timeout_s=1.0, connect_timeout_s=2.0, max_retries=2)
    assert remote.act(OBS).shape == (4,)
    server.stop()
    with pytest.raises(InfrastructureError, match="lost"):
        remote.act(OBS)
    # a REQ socket that timed out was replaced: the client works again once a server is back
    again = ServerThread(Gr00tServer(ServingTestPolicy({}), port=server.port)).start()
    try:
        assert remote.act(OBS).shape == (4,)
    finally:
        again.stop()
