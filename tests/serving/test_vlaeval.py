"""vla-eval's websocket protocol against the real `vla-eval` package: our `vlaeval_remote` client against
vla-eval's own model-server base class (`PredictModelServer` + `serve_async`) running a trivial model,
and vla-eval's own client (`vla_eval.connection.Connection`) against evalfleet's server (in-process and
`evalfleet serve --protocol vla-eval`). Images (PNG), state and actions round-trip; an error frame and a
dropped connection are infrastructure errors."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml
from serving_test_policies import ServingTestPolicy

from evalfleet.errors import InfrastructureError
from evalfleet.serving import vlaeval
from evalfleet.serving.common import RemotePolicyError
from evalfleet.serving.process import ServerProcess, ServerThread
from evalfleet.serving.vlaeval import VlaEvalRemoteOptions, VlaEvalRemotePolicy, VlaEvalServer

TRIVIAL_MODEL_SERVER = textwrap.dedent('''
    import sys

    import anyio
    import numpy as np
    from vla_eval.model_servers.predict import PredictModelServer
    from vla_eval.model_servers.serve import serve_async
    from vla_eval.specs import GRIPPER_CLOSE_POS, IMAGE_RGB, DimSpec

    class Trivial(PredictModelServer):
        """actions: [2 * state[0], image sum mod 997, image height, width, step within the episode]."""

        def predict(self, obs, ctx):
            if "fail" in obs:
                raise ValueError("asked to fail")
            image = obs["images"]["top"]
            state = np.asarray(obs["state"], dtype=np.float32)
            assert obs["task_description"] == "push the T"
            return {"actions": np.array([2 * state[0], int(image.astype(np.int64).sum()) % 997, *image.shape[:2],
                                         ctx.step], dtype=np.float32)}

        def get_action_spec(self):
            return {"position": DimSpec("position", 4, "raw", (-1000, 1000)), "gripper": GRIPPER_CLOSE_POS}

        def get_observation_spec(self):
            return {"image": IMAGE_RGB, "state": DimSpec("state", 1, "raw")}

    anyio.run(serve_async, Trivial(), "127.0.0.1", int(sys.argv[1]))
''')


def require_vla_eval() -> None:
    try:
        import vla_eval  # noqa: F401 - only whether it imports
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("vla-eval is not installed (pip install vla-eval==0.8.0)")


@pytest.fixture()
def model_server(tmp_path):
    require_vla_eval()
    script = tmp_path / "trivial_model_server.py"
    script.write_text(TRIVIAL_MODEL_SERVER)
    proc = ServerProcess([sys.executable, str(script), "{port}"], protocol="vla-eval",
                         log_path=tmp_path / "server.log", name="vla-eval model server")
    with proc:
        proc.wait_healthy(60)
        yield proc


def client(port: int, **kw) -> VlaEvalRemotePolicy:
    options = VlaEvalRemoteOptions(**{"port": port, "connect_timeout_s": 10, "request_timeout_s": 10, **kw})
    return VlaEvalRemotePolicy(options, context=None)


def observation(image: np.ndarray, state: float) -> dict:
    return {"observation/images/top": image, "observation/image": image,
            "observation/state": np.array([state], np.float32), "prompt": "push the T"}


@pytest.mark.parametrize("image_format", ["png", "raw"])
def test_our_client_drives_a_vla_eval_model_server(model_server, image_format):
    remote = client(model_server.port, image_format=image_format)
    try:
        assert remote.metadata["model_server"] == "Trivial"
        spec = remote.declared_spec()
        assert spec.action_dim == 5 and spec.gripper == "positive_closes" and spec.state_dim == 1
        assert spec.action_low == (-1000,) * 4 + (-1,) and "vla-eval server at ws://127.0.0.1:" in spec.source
        rng = np.random.default_rng(1)
        for episode in range(2):
            remote.reset(episode, 0)
            for step in range(3):
                image = rng.integers(0, 256, size=(24, 32, 3), dtype=np.uint8)
                action = remote.act(observation(image, step + 0.5), 0)
                np.testing.assert_allclose(action, [2 * step + 1, int(image.astype(np.int64).sum()) % 997, 24, 32,
                                                    step])  # the step restarts at every episode_start
        # two envs: two connections (two sessions on the server), answered together
        for env_id in (0, 1):
            remote.reset(9, env_id)
        image = np.zeros((4, 4, 3), np.uint8)
        batch = remote.act_batch([observation(image, 1.0), observation(image, 2.0)], [0, 1])
        assert [float(a[0]) for a in batch] == [2.0, 4.0] and len(remote._sessions) == 2
    finally:
        remote.close()


def test_an_error_frame_and_a_dropped_connection_are_infrastructure_errors(model_server):
    remote = client(model_server.port, connect_timeout_s=30)
    image = np.zeros((4, 4, 3), np.uint8)
    try:
        remote.reset(0, 0)
        with pytest.raises(RemotePolicyError, match="observation_failed: ValueError: asked to fail") as err:
            remote.act({**observation(image, 1.0), "fail": 1}, 0)
        assert isinstance(err.value, InfrastructureError)
        np.testing.assert_allclose(remote.act(observation(image, 1.0), 0)[0], 2.0)  # the connection stayed
        model_server.kill()  # the server dies mid-episode
        with pytest.raises(InfrastructureError, match="lost"):
            remote.act(observation(image, 1.0), 0)
        model_server.restart(60)  # same port: the runner's retry resets, which reconnects
        remote.reset(1, 0)
        np.testing.assert_allclose(remote.act(observation(image, 3.0), 0)[0], 6.0)
    finally:
        remote.close()


# ----------------------------------------------------------------------------- vla-eval's client, our server


async def _drive_with_vla_eval_client(port: int, images: list[np.ndarray]) -> tuple[dict, list, str]:
    from vla_eval.connection import Connection

    async with Connection(f"ws://127.0.0.1:{port}", timeout=10, max_retries=2) as conn:
        await conn.start_episode({"task": {"name": "push"}, "seed": 7})
        actions = []
        for i, image in enumerate(images):
            reply = await conn.act({"images": {"top": image, "wrist": image[::-1]}, "state": np.array([i, 1.5]),
                                    "task_description": "push the T"})
            actions.append(reply["actions"])
        try:
            await conn.act({"state": np.array([0.0]), "fail": "now"})
            error = ""
        except RuntimeError as exc:
            error = str(exc)
        after = await conn.act({"state": np.array([4.0])})  # the connection is still usable
        actions.append(after["actions"])
        await conn.end_episode({"success": False})
        return conn.server_info, actions, error


def test_vla_eval_client_drives_our_server():
    require_vla_eval()
    policy = ServingTestPolicy({})
    spec = vlaeval.PolicySpec(action_dim=4, cameras=("top",), image_sizes={"top": (24, 32)}, state_dim=2)
    images = [np.random.default_rng(i).integers(0, 256, size=(24, 32, 3), dtype=np.uint8) for i in range(3)]
    with ServerThread(VlaEvalServer(policy, spec=spec)) as server:
        info, actions, error = asyncio.run(_drive_with_vla_eval_client(server.port, images))
    assert info["protocol_version"] == 1 and info["spec"]["action_dim"] == 4
    assert info["action_spec"]["actions"]["dims"] == 4 and info["observation_spec"]["state"]["dims"] == 2
    for i, action in enumerate(actions[:3]):
        np.testing.assert_allclose(action, [2 * i, 3.0, 7, 0])  # 2*state, the episode_start seed, env 0
        got = policy.observations[i]
        np.testing.assert_array_equal(got["observation/images/top"], images[i])  # PNG, lossless
        np.testing.assert_array_equal(got["observation/images/wrist"], images[i][::-1])
        np.testing.assert_array_equal(got["observation/image"], images[i])
        assert got["prompt"] == "push the T" and got["observation/state"].tolist() == [i, 1.5]
    assert "observation_failed: ValueError: boom: now" in error
    np.testing.assert_allclose(actions[3], [8.0, 7, 0])


def test_vla_eval_client_drives_evalfleet_serve_subprocess(tmp_path, subprocess_env):
    require_vla_eval()
    proc = ServerProcess(["evalfleet", "serve", "serving_test", "--import", "serving_test_policies", "--protocol",
                          "vla-eval", "--port", "{port}"], protocol="vla-eval", log_path=tmp_path / "serve.log",
                         env=subprocess_env)
    image = np.full((8, 8, 3), 200, np.uint8)
    with proc:
        proc.wait_healthy(60)
        info, actions, error = asyncio.run(_drive_with_vla_eval_client(proc.port, [image]))
    assert info["model_server"] == "ServingTestPolicy"
    np.testing.assert_allclose(actions[0], [0, 3.0, 7, 0])
    assert "boom: now" in error
    assert f"serving vla-eval on 127.0.0.1:{proc.port}" in (tmp_path / "serve.log").read_text()


def test_frames_outside_the_protocol_are_refused():
    good = vlaeval.pack("observation", {"images": {"a": np.zeros((2, 2, 3), np.uint8)}}, 3)
    assert vlaeval.unpack(good)[0] == "observation"
    import msgpack

    bad = [
        b"\xc1", "text",
        msgpack.packb({"type": "observation", "payload": {}, "seq": 1}),  # no timestamp
        msgpack.packb({"type": "nope", "payload": {}, "seq": 1, "timestamp": 0.0}),
        msgpack.packb({"type": "observation", "payload": {"x": {"__ndarray__": True, "data": b"\0" * 3,
                       "dtype": "<f4", "shape": [1]}}, "seq": 1, "timestamp": 0.0}),
        msgpack.packb({"type": "observation", "payload": {"x": {"__ndarray__": True, "data": b"",
                       "dtype": "|O", "shape": [0]}}, "seq": 1, "timestamp": 0.0}),
        msgpack.packb({"type": "observation", "payload": {"x": {"__image__": True, "format": "png",
                       "data": b"not png", "shape": [2, 2, 3]}}, "seq": 1, "timestamp": 0.0}),
    ]
    for frame in bad:
        with pytest.raises(vlaeval.WireFormatError):
            vlaeval.unpack(frame)


@pytest.mark.slow
def test_a_run_through_the_vla_eval_binding(tmp_path):
    """`vlaeval_remote` with `serve:` starts `evalfleet serve --protocol vla-eval` and runs the Run."""
    exp = tmp_path / "vla.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "vla", "seed": 0,
        "runs": {"zero_over_vla_eval": {
            "environment": {"type": "pusht", "obs_type": "state", "actions": "normalized", "max_steps": 3},
            "policy": {"type": "vlaeval_remote", "serve": {"type": "zero"}},
            "rollout_limit": {"num_episodes": 2}}},
    }))
    out = tmp_path / "out"
    from evalfleet_testkit import run_evalfleet

    env = dict(os.environ, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    done = run_evalfleet("run", str(exp), "--output", str(out), "--workers", "1", env=env)
    assert done.returncode == 0, done.stderr
    lines = (out / "zero_over_vla_eval" / "episode_results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["status"] for r in records] == ["failure", "failure"] and all(r["episode_length"] == 3 for r in records)


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
