from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from evalfleet.errors import InfrastructureError
from evalfleet.policies.base import PolicyContext
from evalfleet.serving.bindings import ServerUse, binding_for, server_process
from evalfleet.serving.gr00t import Gr00tRemoteOptions, Gr00tRemotePolicy
from evalfleet.serving.openpi import OpenpiRemoteOptions, OpenpiRemotePolicy
from evalfleet.serving.process import ServerProcess

SERVE = ["evalfleet", "serve", "serving_test", "cost_ms=0", "--import", "serving_test_policies", "--port", "{port}"]


@pytest.mark.slow
def test_serve_subprocess_health_crash_restart_and_stop(tmp_path, subprocess_env):
    log = tmp_path / "run" / "server.log"
    proc = ServerProcess([*SERVE, "--protocol", "openpi", "--task", "pick-place-v3"],
                         protocol="openpi", log_path=log, env=subprocess_env)
    proc.start()
    try:
        proc.wait_healthy(60)
        remote = OpenpiRemotePolicy(OpenpiRemoteOptions(port=proc.port, connect_timeout_s=60, max_retries=5))
        assert remote.metadata["task"] == "pick-place-v3"
        np.testing.assert_allclose(remote.act({"observation/state": np.array([1.0])})[:1], [2.0])
        proc.kill()  # a crash
        assert not proc.is_alive()
        proc.restart(60)  # same port: the client reconnects by itself
        np.testing.assert_allclose(remote.act({"observation/state": np.array([3.0])})[:1], [6.0])
        assert proc.starts == 2
    finally:
        code = proc.stop()
    assert code == 0  # SIGTERM is a clean shutdown
    text = log.read_text()
    assert f"serving openpi on 127.0.0.1:{proc.port}" in text and text.count("=== ") == 2


@pytest.mark.slow
def test_binding_starts_a_gr00t_server_with_api_key(tmp_path, subprocess_env):
    binding = binding_for("gr00t_remote")
    options = {"serve": {"type": "serving_test", "chunk": 2}, "api_key": "k3y", "batching": {"max_batch": 4}}
    context = PolicyContext(run="r1", task="reach-v3", env_type="metaworld")
    proc = server_process(binding, options, context, tmp_path / "server.log")
    proc.argv_template[3:3] = ["--import", "serving_test_policies"]
    proc.env.update(subprocess_env)
    with proc:
        proc.wait_healthy(60)
        wired = Gr00tRemoteOptions(**binding.wire_client({k: v for k, v in options.items()}, proc.host, proc.port))
        remote = Gr00tRemotePolicy(wired)
        assert remote.act({"observation/state": np.array([2.0])}).shape == (2, 3)
    assert "k3y" not in " ".join(proc.argv())  # the key travels in the environment, not on the command line


def test_dead_on_arrival_server_is_reported_with_its_log(tmp_path, subprocess_env):
    proc = ServerProcess(["evalfleet", "serve", "no_such_policy", "--protocol", "openpi", "--port", "{port}"],
                         protocol="openpi", log_path=tmp_path / "server.log", env=subprocess_env)
    proc.start()
    with pytest.raises(InfrastructureError, match="unknown policy type"):
        proc.wait_healthy(60)
    proc.stop()


def test_serve_rejects_bad_input_with_exit_2():
    out = subprocess.run([sys.executable, "-m", "evalfleet.cli", "serve", "serving_test", "novalue",
                          "--protocol", "openpi"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "expected KEY=VALUE" in out.stderr


def test_bindings_render_and_check():
    own = binding_for("openpi_remote")
    assert not own.needs_server({"host": "gpu-box", "port": 8000})
    options = {"serve": {"type": "zero"}, "batching": {"max_batch": 4, "max_wait_ms": 3}}
    ctx = PolicyContext(run="a", task="pick-place-v3", env_type="metaworld")
    cmd = own.command(options, "127.0.0.1", 9100, ctx)
    assert cmd.argv[:4] == ["evalfleet", "serve", "zero", "--protocol"] and "9100" in cmd.argv
    assert own.wire_client(options, "10.0.0.2", 9100)["host"] == "10.0.0.2"
    own.check([ServerUse("a", options, ctx), ServerUse("b", dict(options), ctx)])
    other = {**options, "serve": {"type": "random"}}
    from evalfleet.errors import UserError

    with pytest.raises(UserError, match="serve.type"):
        own.check([ServerUse("a", options, ctx), ServerUse("b", other, ctx)])
    assert own.server_identity(options, ctx) != own.server_identity(other, ctx)

    pi0 = binding_for("isaaclab_arena_openpi.policy.pi0_remote_policy.Pi0RemotePolicy")
    assert binding_for("pi0_remote") is pi0 and pi0.protocol == "openpi" and pi0.resources({}).gpus == 1
    line = pi0.command({"policy_variant": "pi05"}, "0.0.0.0", 8000).shell()
    assert "uv run scripts/serve_policy.py --port=8000 policy:checkpoint" in line
    assert "--policy.config=pi05_droid_jointpos_polaris" in line
    assert pi0.wire_client({}, "h", 1) == {"remote_host": "h", "remote_port": 1}
    with pytest.raises(UserError, match="policy_variant"):
        pi0.check([ServerUse("a", {"policy_variant": "pi05"}), ServerUse("b", {"policy_variant": "pi0"})])
    cosmos = binding_for("isaaclab_arena_cosmos.policy.cosmos_remote_policy.CosmosRemotePolicy")
    assert cosmos.protocol == "openpi" and "action_policy_server_robolab" in cosmos.command({}).shell()
    gr00t = binding_for("isaaclab_arena_gr00t.policy.gr00t_remote_closedloop_policy.Gr00tRemoteClosedloopPolicy")
    assert gr00t.protocol == "gr00t" and gr00t.default_port == 5555
    assert "gr00t/eval/run_gr00t_server.py" in gr00t.command({}, "0.0.0.0").shell()
    assert binding_for("zero") is None
