"""evalfleet's `openpi_remote` client against the real `openpi-server` package (openpi's own
`WebsocketPolicyServer`), serving a trivial policy on 127.0.0.1 in its own process."""

from __future__ import annotations

import os
import sys
import textwrap

import numpy as np
import pytest

from evalfleet.errors import InfrastructureError
from evalfleet.policies.base import PolicySpec
from evalfleet.serving.common import RemotePolicyError
from evalfleet.serving.openpi import OpenpiRemoteOptions, OpenpiRemotePolicy
from evalfleet.serving.process import ServerProcess

TRIVIAL_SERVER = textwrap.dedent('''
    import sys

    import numpy as np
    from openpi_server import WebsocketPolicyServer

    class Trivial:
        """actions: 2 rows of [2 * state, image sum mod 997, image height, width]; `fail` in the obs raises."""

        def infer(self, obs):
            if "fail" in obs:
                raise ValueError("asked to fail")
            state = np.asarray(obs["observation/state"], dtype=np.float32)
            image = obs["observation/image"]
            extra = np.array([int(image.astype(np.int64).sum()) % 997, *image.shape[:2]], dtype=np.float32)
            row = np.concatenate([2 * state, extra])
            return {"actions": np.stack([row, row + 1]), "prompt_seen": obs["prompt"]}

        def reset(self):
            pass

    spec = {"action_dim": 5, "cameras": ["top"], "image_sizes": {"top": [48, 64]}}
    WebsocketPolicyServer(Trivial(), host="127.0.0.1", port=int(sys.argv[1]),
                          metadata={"name": "trivial", "spec": spec}).serve_forever()
''')


def require_openpi_server() -> None:
    try:
        import openpi_server  # noqa: F401 - only whether it imports
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("openpi-server is not installed (pip install --no-deps openpi-server==0.1.0)")


@pytest.fixture()
def openpi_server(tmp_path):
    require_openpi_server()
    script = tmp_path / "trivial_server.py"
    script.write_text(TRIVIAL_SERVER)
    proc = ServerProcess([sys.executable, str(script), "{port}"], protocol="openpi",
                         log_path=tmp_path / "server.log", name="openpi-server")
    with proc:
        proc.wait_healthy(60)
        yield proc


def test_our_client_round_trips_observations_and_actions_with_the_real_openpi_server(openpi_server):
    remote = OpenpiRemotePolicy(OpenpiRemoteOptions(port=openpi_server.port, connect_timeout_s=10,
                                                    request_timeout_s=10))
    try:
        assert remote.metadata["name"] == "trivial"
        spec = remote.declared_spec()
        assert isinstance(spec, PolicySpec) and spec.action_dim == 5
        assert spec.image_sizes == {"top": (48, 64)} and "openpi server at ws://127.0.0.1:" in spec.source
        remote.reset(123, 0)  # a plain openpi server has no reset: nothing is sent
        rng = np.random.default_rng(0)
        for i in range(3):
            image = rng.integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
            state = np.array([i, -i / 2], dtype=np.float32)
            actions = remote.act({"observation/image": image, "observation/state": state, "prompt": f"push {i}"})
            assert actions.shape == (2, 5) and actions.dtype == np.float32
            np.testing.assert_allclose(actions[0], [2 * i, -i, int(image.astype(np.int64).sum()) % 997, 48, 64])
            np.testing.assert_allclose(actions[1], actions[0] + 1)
        # two envs: one connection each, both answered
        batch = remote.act_batch([{"observation/image": np.zeros((4, 4, 3), np.uint8),
                                   "observation/state": np.array([k], np.float32), "prompt": ""} for k in (1, 2)],
                                 [0, 1])
        assert [float(b[0, 0]) for b in batch] == [2.0, 4.0]
    finally:
        remote.close()


def test_a_policy_error_from_the_real_server_is_an_infrastructure_error_and_the_client_recovers(openpi_server):
    remote = OpenpiRemotePolicy(OpenpiRemoteOptions(port=openpi_server.port, connect_timeout_s=10,
                                                    request_timeout_s=10))
    good = {"observation/image": np.zeros((2, 2, 3), np.uint8), "observation/state": np.array([1.0], np.float32),
            "prompt": ""}
    try:
        with pytest.raises(RemotePolicyError, match="asked to fail") as err:
            remote.act({**good, "fail": True})
        assert isinstance(err.value, InfrastructureError)  # retried as an error episode, never a failure
        np.testing.assert_allclose(remote.act(good)[0, :1], [2.0])  # a fresh connection works again
    finally:
        remote.close()
