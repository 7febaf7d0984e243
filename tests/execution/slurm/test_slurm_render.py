"""Issue #24, without a cluster: `slurm.*` settings refused (a UserError naming the key) before anything is
written; `submit --backend slurm --dry-run --output-dir DIR` writes one batch script per job and lists them;
values with shell metacharacters reach the jobs as the words they are; no secret is in any script or line."""

from __future__ import annotations

import re

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalfleet.cli import main
from evalfleet.errors import UserError
from evalfleet.backend_registry import backend_settings
from evalfleet.backends.slurm.commands import parse_sacct
from evalfleet.experiment.overrides import format_value

SECRET = "sk-live-$(touch LEAK)-9f8e7d"


def experiment(tmp_path: Path, *, served: bool = True, secret: bool = False) -> Path:
    runs: dict[str, Any] = {"expert": {"environment": {"type": "metaworld", "task": "push-v3"},
                                       "policy": {"type": "metaworld_expert"}}}
    if served:
        policy: dict[str, Any] = {"type": "openpi_remote", "serve": {"type": "metaworld_expert"}}
        policy.update({"api_key": SECRET} if secret else {"allow_unauthenticated": True})
        runs["served"] = {"environment": {"type": "metaworld", "task": "push-v3"}, "policy": policy}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "slurm_tiny", "seed": 0, "shared": {"rollout_limit": {"num_episodes": 4}},
                                    "runs": runs}, sort_keys=False))
    return path


def dry_run(tmp_path: Path, *overrides: str, exp: Path | None = None) -> dict[str, str]:
    folder = tmp_path / "dry"
    assert main(["submit", str(exp or experiment(tmp_path)), "--backend", "slurm", "--dry-run", "--output-dir",
                 str(folder), *overrides]) == 0
    return {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}


@pytest.mark.parametrize("override, key", [
    ("slurm.time=12h", "slurm.time"), ("slurm.mem=4 G", "slurm.mem"), ("slurm.partition=gpu;rm", "slurm.partition"),
    ('slurm.extra_sbatch=["-x"]', "slurm.extra_sbatch"), ('slurm.extra_sbatch=["--a\\nb"]', "slurm.extra_sbatch"),
    ('slurm.setup=["module load x\\nrm -rf ~"]', "slurm.setup"), ("slurm.workers=0", "slurm.workers"),
    ("slurm.max_parallel=true", "slurm.max_parallel"), ("slurm.container_runtime=docker", "slurm.container_runtime"),
    ("slurm.parition=gpu", "slurm.parition"), ("slurm.signal_lead_s=-1", "slurm.signal_lead_s"),
])
def test_bad_settings_are_refused_naming_the_key_before_anything_is_written(tmp_path: Path, override: str,
                                                                             key: str, capsys) -> None:
    folder = tmp_path / "dry"
    assert main(["submit", str(experiment(tmp_path)), "--backend", "slurm", "--dry-run", "--output-dir", str(folder),
                 override]) == 2
    assert f"{key}:" in capsys.readouterr().err
    assert not folder.exists()


def test_gres_and_gpus_per_task_together_are_refused() -> None:
    with pytest.raises(UserError, match="gpus_per_task or slurm.gres"):
        backend_settings("slurm", {"slurm": {"gres": "gpu:1", "gpus_per_task": 1}})


def test_settings_take_slurm_time_formats() -> None:
    for value in ("90", "4:00:00", "1-12", "2-00:30:00", "30:00", "UNLIMITED", 90):
        assert backend_settings("slurm", {"slurm": {"time": value}}).time == str(value)


def test_dry_run_writes_one_script_per_job_with_its_sbatch_lines(tmp_path: Path, capsys) -> None:
    files = dry_run(tmp_path, "slurm.partition=gpu", "slurm.account=lab", "slurm.time=1:00:00", "slurm.mem=4G",
                    "slurm.gres=gpu:1", "slurm.max_parallel=2", "slurm.workers=3", "slurm.constraint=a100|h100",
                    'slurm.extra_sbatch=["--exclusive"]', "slurm.server_gpus=1", "slurm.server_mem=8G")
    listed = capsys.readouterr().out.split()
    assert sorted(Path(p).name for p in listed) == sorted(files) == ["collect.sbatch", "runners.sbatch",
                                                                     "server-served-server.sbatch"]
    runners = files["runners.sbatch"]
    for line in ("#SBATCH --array=0-2%2", "#SBATCH --partition=gpu", "#SBATCH --account=lab", "#SBATCH --time=1:00:00",
                 "#SBATCH --mem=4G", "#SBATCH --gres=gpu:1", "#SBATCH --constraint=a100|h100", "#SBATCH --requeue",
                 "#SBATCH --signal=B:TERM@120", "#SBATCH --exclusive", "#SBATCH --open-mode=append"):
        assert line in runners.splitlines(), line
    assert "--claim-dir" in runners and '--worker-id "$TASK"' in runners
    assert "exec " in runners and "-m evalfleet.execution.watchdog" in runners
    server = files["server-served-server.sbatch"]
    assert "#SBATCH --gpus=1" in server and "#SBATCH --mem=8G" in server
    assert "-m evalfleet.backends.slurm serve" in server
    assert "-m evalfleet.backends.slurm collect" in files["collect.sbatch"]
    for text in files.values():
        subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_without_a_served_policy_there_is_no_server_job_and_no_wait(tmp_path: Path) -> None:
    files = dry_run(tmp_path, exp=experiment(tmp_path, served=False))
    assert sorted(files) == ["collect.sbatch", "runners.sbatch"]
    assert " wire " not in files["runners.sbatch"]
    assert '"$OUT"/experiment.yaml' in files["runners.sbatch"]


def test_a_dry_run_without_a_folder_prints_every_script(tmp_path: Path, capsys) -> None:
    assert main(["submit", str(experiment(tmp_path)), "--backend", "slurm", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("#!/bin/bash") == 3 and "# ==> runners.sbatch <==" in out


def test_no_secret_in_any_script_or_printed_line(tmp_path: Path, capsys) -> None:
    files = dry_run(tmp_path, exp=experiment(tmp_path, secret=True))
    printed = capsys.readouterr()
    for text in [*files.values(), printed.out, printed.err]:
        assert "sk-live" not in text


def test_an_output_folder_sbatch_cannot_carry_is_refused(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "my results %j"
    assert main(["submit", str(experiment(tmp_path)), "--backend", "slurm", "--dry-run", "--output-dir",
                 str(folder)]) == 2
    assert "--output-dir" in capsys.readouterr().err
    assert not folder.exists()


HOSTILE = ['/opt/my env/$(touch INJECTED)/python3', "/opt/`touch INJECTED`;x/python3", "/opt/'q'\"d\"/$HOME/py"]


@pytest.mark.parametrize("python", HOSTILE)
def test_metacharacter_values_reach_the_job_as_the_words_they_are(tmp_path: Path, python: str) -> None:
    """The runner array script is run by bash as Slurm would, `slurm.python` a stand-in at a hostile path that
    records its argv: nothing is injected, nothing expands, the watchdog gets exactly the rendered command."""
    work = tmp_path / "work"
    work.mkdir()
    stand_in = work / python.lstrip("/")
    stand_in.parent.mkdir(parents=True)
    record = tmp_path / "argv.json"
    stand_in.write_text(f"#!{sys.executable}\nimport json, sys\n"
                        f"json.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n")
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IEXEC)
    target = str(work) + python
    files = dry_run(tmp_path, f"slurm.python={format_value(target)}")
    proc = subprocess.run(["bash", "-c", files["runners.sbatch"]], cwd=work, capture_output=True, text=True,
                          env={**os.environ, "SLURM_ARRAY_TASK_ID": "1", "SLURM_JOB_ID": "7"}, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert not list(work.glob("INJECTED")) and not (tmp_path / "INJECTED").exists()
    argv = json.loads(record.read_text())
    assert argv[:3] == ["-P", "-m", "evalfleet.execution.watchdog"]
    out = str((tmp_path / "dry").absolute())
    assert f"{out}/.evalfleet/slurm/task-1.heartbeat" in argv
    child = argv[argv.index("--") + 1:]
    assert child[0] == target and child[4] == "wire" and child[child.index("--task") + 1] == "1"
    runner = child[child.index("--") + 1:]
    assert runner[0] == target and runner[runner.index("--worker-id") + 1] == "1"
    assert runner[5] == f"{out}/.evalfleet/slurm/experiment.wired-1.yaml"


def test_a_task_requeued_too_often_exits_saying_so(tmp_path: Path) -> None:
    files = dry_run(tmp_path, "slurm.max_requeues=1")
    proc = subprocess.run(["bash", "-c", files["runners.sbatch"]], capture_output=True, text=True,
                          env={**os.environ, "SLURM_ARRAY_TASK_ID": "0", "SLURM_RESTART_COUNT": "2"}, timeout=30)
    assert proc.returncode == 3
    assert "requeued 2 times, more than slurm.max_requeues=1" in proc.stderr


def test_setup_lines_are_placed_as_given_before_evalfleet(tmp_path: Path) -> None:
    files = dry_run(tmp_path, 'slurm.setup=["module load cuda/12", "source /shared/venv/bin/activate"]')
    lines = files["runners.sbatch"].splitlines()
    assert lines.index("module load cuda/12") < lines.index("source /shared/venv/bin/activate") < \
        next(i for i, line in enumerate(lines) if line.startswith("exec "))


def test_container_runtimes(tmp_path: Path) -> None:
    pyxis = dry_run(tmp_path, "slurm.container_image=nvcr.io/team/evalfleet:1")["runners.sbatch"]
    exec_line = shlex.split(next(line for line in pyxis.splitlines() if line.startswith("exec ")))
    assert exec_line[1:4] == ["srun", "--container-image=nvcr.io/team/evalfleet:1", '--container-mounts=$OUT:$OUT']
    apptainer = dry_run(tmp_path, "slurm.container_image=/shared/evalfleet.sif",
                        "slurm.container_runtime=apptainer")["runners.sbatch"]
    assert 'exec apptainer exec --bind "$OUT" /shared/evalfleet.sif python3 -P -m evalfleet.execution.watchdog' \
        in apptainer


def test_sacct_lines_become_task_states_with_slurm_reasons() -> None:
    states = parse_sacct("12_0|COMPLETED|0:0|None|n1\n12_1|TIMEOUT|0:0|TimeLimit|n1\n"
                         "12_2|OUT_OF_MEMORY|0:125|OutOfMemory|n2\n12_3|FAILED|1:0|NonZeroExitCode|n1\n"
                         "12_4|CANCELLED by 0|0:15|None|n1\n")
    assert states["12_0"].problem() is None
    assert states["12_1"].problem() == "Slurm job 12_1 TIMEOUT (TimeLimit, on n1)"
    assert states["12_2"].problem() == "Slurm job 12_2 OUT_OF_MEMORY (exit code 0, signal 125, OutOfMemory, on n2)" \
        or states["12_2"].problem().startswith("Slurm job 12_2 OUT_OF_MEMORY")
    assert states["12_3"].problem() == "Slurm job 12_3 FAILED (exit code 1, NonZeroExitCode, on n1)"
    assert states["12_4"].state == "CANCELLED" and states["12_4"].final


def test_a_task_stopped_by_the_signal_before_its_time_limit_says_so() -> None:
    states = parse_sacct("5_1|FAILED|15:0|NonZeroExitCode|vm|00:00:31|00:01:00\n"
                         "5_2|TIMEOUT|0:15|TimeLimit|vm|00:01:02|00:01:00\n"
                         "5_3|FAILED|143:0|NonZeroExitCode|vm|00:00:05|1-00:00:00\n")
    assert states["5_1"].stopped_before_limit(30)
    assert not states["5_3"].stopped_before_limit(30)  # an scancel long before the limit
    assert states["5_2"].problem() == "Slurm job 5_2 TIMEOUT (signal 15, TimeLimit, on vm, time limit 00:01:00)"


@pytest.mark.parametrize("override, output, key", [("slurm.time=5h", "out", "slurm.time"),
                                                   ("slurm.mem=4G", "my out", "--output")])
def test_run_refuses_before_the_output_folder_exists(tmp_path: Path, monkeypatch, capsys, override: str,
                                                     output: str, key: str) -> None:
    import evalfleet.backends.slurm.commands as commands

    monkeypatch.setattr(commands.shutil, "which", lambda name: f"/usr/bin/{name}")  # as on a login node
    folder = tmp_path / output
    assert main(["run", str(experiment(tmp_path)), override, "--backend", "slurm", "--output", str(folder)]) == 2
    assert f"{key}:" in capsys.readouterr().err
    assert not folder.exists()


STOPPING = ["stopping.wave=2", "stopping.max_episodes=4", "stopping.precision.half_width=0.3"]


def test_osmo_submit_of_a_stopping_experiment_is_refused_naming_the_key(tmp_path: Path, capsys) -> None:
    """Issue #25: OSMO's tasks are fixed at submission: exit 2, the file, the key and the fix; nothing written,
    dry run or not."""
    for dry in (["--dry-run"], []):
        folder = tmp_path / f"out{len(dry)}"
        assert main(["submit", str(experiment(tmp_path, served=False)), *STOPPING, "--backend", "osmo", *dry,
                     "--output-dir", str(folder)]) == 2
        err = capsys.readouterr().err
        assert ("exp.yaml: stopping: sequential stopping releases episodes a wave at a time, which the osmo backend"
                " cannot do (its tasks are fixed at submission): run it with --backend local, ray or slurm") in err
        assert not folder.exists()


def test_slurm_submit_dry_run_of_a_stopping_experiment_writes_the_driver_only(tmp_path: Path, capsys) -> None:
    """Issue #25: the driver job's script (1 CPU, `evalfleet run --resume` on the saved Experiment), written;
    no runner array, nothing submitted (no sbatch is needed), no experiment.yaml."""
    folder = tmp_path / "out"
    assert main(["submit", str(experiment(tmp_path, served=False)), *STOPPING, "--backend", "slurm", "--dry-run",
                 "--output-dir", str(folder)]) == 0
    written = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert written == [".evalfleet/slurm/driver.sbatch"]
    text = (folder / written[0]).read_text()
    assert "#SBATCH --cpus-per-task=1" in text and f"#SBATCH --output={folder}/.evalfleet/slurm/logs/driver.log" in text
    assert re.search(r"exec \S+ -\S+ -m evalfleet\.cli run --backend slurm --output \"\$OUT\" --resume", text), text
    assert "--array" not in text


def test_the_collect_job_waits_for_the_accounting_of_an_ended_array(tmp_path: Path, monkeypatch) -> None:
    # slurmctld hands an ended task's record to slurmdbd a moment later: a job after the array (afterany) can ask
    # sacct before it knows task 0. A `sacct` on PATH that learns of task 0 on its third call.
    from evalfleet.backends.slurm.commands import settled_array_states

    calls = tmp_path / "calls"
    sacct = tmp_path / "bin" / "sacct"
    sacct.parent.mkdir()
    sacct.write_text(f"""#!/bin/sh
echo x >> {calls}
echo '11_1|CANCELLED by 0|0:15|None|n1|00:00:09|00:10:00'
[ "$(wc -l < {calls})" -ge 3 ] && echo '11_0|COMPLETED|0:0|None|n1|00:00:12|00:10:00'
exit 0
""")
    sacct.chmod(0o755)
    monkeypatch.setenv("PATH", f"{sacct.parent}{os.pathsep}{os.environ['PATH']}")
    states = settled_array_states("11", 2, poll_s=0.01)
    assert len(calls.read_text().splitlines()) == 3
    assert states["11_0"].problem() is None and states["11_1"].state == "CANCELLED"
    # Past the lag, what sacct shows is the answer (the task never started: no record).
    calls.write_text("")
    states = settled_array_states("11", 3, lag_s=0.05, poll_s=0.01)
    assert "11_2" not in states and states["11_1"].state == "CANCELLED"
