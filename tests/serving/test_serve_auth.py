"""`evalfleet serve` never serves without authentication by accident: an empty key is refused like a missing
one, a non-loopback bind without a key needs --allow-unauthenticated (and warns), and no printed line or log
holds a key."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from evalfleet.serving.common import is_loopback
from evalfleet.serving.process import ServerProcess, check_health

SECRET = "s3cr3t-Value-42"


def serve(args: list[str], env: dict[str, str] | None = None, *, remove: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """Start `evalfleet serve ARGS`; (exit code, stdout, stderr) once it exits, or (None-like -1, ...) killed as
    soon as it says it is serving (so a server that should have refused does not keep the test waiting)."""
    environ = {k: v for k, v in os.environ.items() if k not in remove}
    environ.update(env or {})
    proc = subprocess.Popen([sys.executable, "-m", "evalfleet.cli", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=environ, start_new_session=True)
    first = proc.stdout.readline()  # blocks until it serves (prints) or exits (EOF)
    if first.startswith("serving"):
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        return -1, first + out, err
    out, err = proc.communicate(timeout=60)
    return proc.returncode, first + out, err


def refused(code: int, out: str, err: str) -> str:
    assert code == 2, f"exit {code}; stdout {out!r}; stderr {err!r}"
    assert out == "" and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("args, env", [
    (["--api-key", ""], {}),
    ([], {"EVALFLEET_SERVE_API_KEY": ""}),
    (["--api-key-env", "EVALFLEET_TEST_KEY"], {"EVALFLEET_TEST_KEY": ""}),
], ids=["--api-key ''", "EVALFLEET_SERVE_API_KEY=''", "--api-key-env K, K=''"])
def test_an_empty_key_is_refused(args, env):
    err = refused(*serve(["zero", "--protocol", "openpi", "--port", "0", *args], env))
    assert "empty" in err


def test_an_unset_key_variable_is_refused_with_the_dashed_flag_name():
    err = refused(*serve(["zero", "--protocol", "openpi", "--port", "0", "--api-key-env", "EVALFLEET_TEST_NO_KEY"],
                         remove=("EVALFLEET_TEST_NO_KEY", "EVALFLEET_SERVE_API_KEY")))
    assert "--api-key-env" in err and "--api-key_env" not in err and "EVALFLEET_TEST_NO_KEY is not set" in err


def test_a_non_loopback_bind_without_a_key_needs_the_explicit_flag():
    err = refused(*serve(["zero", "--protocol", "openpi", "--host", "0.0.0.0", "--port", "0"],
                         remove=("EVALFLEET_SERVE_API_KEY",)))
    assert "--allow-unauthenticated" in err and "--host" in err


def test_allow_unauthenticated_serves_and_warns_loudly(tmp_path):
    proc = ServerProcess(["evalfleet", "serve", "zero", "--protocol", "openpi", "--host", "0.0.0.0", "--port", "{port}",
                          "--allow-unauthenticated"], protocol="openpi", host="0.0.0.0", log_path=tmp_path / "log")
    with proc:
        proc.wait_healthy(60)
        assert check_health("openpi", "127.0.0.1", proc.port)
    assert "WITHOUT AUTHENTICATION" in (tmp_path / "log").read_text()


def test_a_key_allows_a_non_loopback_bind(tmp_path):
    proc = ServerProcess(["evalfleet", "serve", "zero", "--protocol", "gr00t", "--host", "0.0.0.0", "--port", "{port}"],
                         protocol="gr00t", host="0.0.0.0", log_path=tmp_path / "log", api_key=SECRET,
                         env={"EVALFLEET_SERVE_API_KEY": SECRET})
    with proc:
        proc.wait_healthy(60)
    assert "WITHOUT AUTHENTICATION" not in (tmp_path / "log").read_text()


def test_no_secret_in_the_ready_line_or_the_log(tmp_path, subprocess_env):
    log = tmp_path / "server.log"
    proc = ServerProcess(["evalfleet", "serve", "serving_test", f"api_key={SECRET}", f"nested.token={SECRET}",
                          f"url=s3://AKIA:{SECRET}@bucket/p", "--import", "serving_test_policies", "--protocol",
                          "vla-eval", "--port", "{port}", "--api-key-env", "EVALFLEET_TEST_KEY"],
                         protocol="vla-eval", log_path=log, env={**subprocess_env, "EVALFLEET_TEST_KEY": SECRET})
    with proc:
        proc.wait_healthy(60)
    text = log.read_text()
    assert '"api_key": "***"' in text and "s3://***@bucket/p" in text
    assert SECRET not in text


def test_a_numeric_key_is_not_echoed_by_validation():
    code, out, err = serve(["openpi_remote", "api_key=987654321", "--protocol", "openpi", "--port", "0"])
    assert "987654321" not in refused(code, out, err) + out


def test_loopback_addresses():
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "", "::", "10.0.0.2", "gpu-box", "*"]))


def test_servers_evalfleet_starts_on_a_non_loopback_address_need_a_key_or_the_explicit_option():
    from evalfleet.errors import UserError
    from evalfleet.serving.bindings import binding_for

    for policy_type in ("openpi_remote", "gr00t_remote", "vlaeval_remote"):
        binding = binding_for(policy_type)
        served = {"serve": {"type": "zero"}}
        assert "--allow-unauthenticated" not in binding.command(served, "127.0.0.1", 1).argv  # loopback
        with pytest.raises(UserError, match="allow_unauthenticated: true"):
            binding.command(served, "0.0.0.0", 1)
        argv = binding.command({**served, "allow_unauthenticated": True}, "0.0.0.0", 1).argv
        assert "--allow-unauthenticated" in argv
        argv = binding.command({**served, "api_key_env": "K"}, "0.0.0.0", 1).argv
        assert "--api-key-env" in argv and "--allow-unauthenticated" not in argv


def test_a_ray_run_of_a_served_policy_without_a_key_is_refused_before_the_output_folder(tmp_path):
    import yaml

    sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
    from evalfleet_testkit import run_evalfleet

    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "ray_served", "seed": 0, "runs": {"served": {
        "environment": {"type": "pusht", "obs_type": "state", "actions": "normalized", "max_steps": 2},
        "policy": {"type": "openpi_remote", "serve": {"type": "zero"}}, "rollout_limit": {"num_episodes": 1}}}}))
    done = run_evalfleet("run", str(exp), "--backend", "ray", "--output", str(tmp_path / "out"))
    assert done.returncode == 2 and "runs.served.policy.api_key_env" in done.stderr, done.stderr
    assert "allow_unauthenticated" in done.stderr and not (tmp_path / "out").exists()
