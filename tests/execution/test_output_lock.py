"""Issue #52 finding 12: one process writes an output folder at a time. While a real `evalfleet run` holds its
folder (a runner held at the test gate), a second `run --resume`, a new `run` and `collect --output OUT` are
refused (exit 2, the holder named, nothing in the folder touched) instead of playing its episodes a second time;
once it ends, `--resume` takes the folder again. The lock is the run process's own: it dies with it, also when a
child forked while it was held lives on."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from evalfleet_testkit import ROOT, evalfleet_cmd, plugin_env, results_by_episode
from test_run_metadata import gated, read, start_run


def snapshot(out: Path) -> dict[str, tuple[int, int]]:
    """Every file under the folder with its size and modification time, but the holder's own worker files (its
    watchdog rewrites them while it waits): what a refused writer must not change."""
    found = {}
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out)
        if rel.parts[0] == ".evalfleet" and (path.is_dir() or rel.name.startswith("worker-")):
            continue
        st = path.lstat()
        found[str(rel)] = (st.st_size, st.st_mtime_ns)
    return found


def refused_or_running(args: list[str], gate: Path, holder_runners: set[str]) -> subprocess.CompletedProcess | None:
    """Start `evalfleet ARGS`; its result once it exits, or None once a runner of its own reaches the gate (it is
    running beside the holder: the double-writer bug). Either event ends the wait, however fast the machine."""
    proc = subprocess.Popen(evalfleet_cmd(*args), cwd=ROOT, env=plugin_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300  # a bound on a hang, not a timing
    while proc.poll() is None:
        if {p.name for p in gate.glob("*.waiting")} - holder_runners or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None
        time.sleep(0.05)
    out, err = proc.communicate()
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def test_a_second_writer_is_refused_while_a_run_holds_the_folder(tmp_path: Path) -> None:
    exp, gate = gated(tmp_path, 4)
    out = tmp_path / "out"
    holder = start_run(exp, out, gate)
    try:
        runners = {p.name for p in gate.glob("*.waiting")}
        before = snapshot(out)
        for args in (["run", str(exp), "--output", str(out), "--workers", "1", "--resume"],
                     ["run", str(exp), "--output", str(out), "--workers", "1"],
                     ["collect", str(out), "--output", str(out)]):
            done = refused_or_running(args, gate, runners)
            assert done is not None, f"`evalfleet {' '.join(args[:1])}` ran beside the run holding {out}"
            assert done.returncode == 2, done.stderr
            line = done.stderr.strip()
            assert "\n" not in line and line.startswith(f"evalfleet: error: {out}: in use by another evalfleet run ("
                                                        f"pid {holder.pid} on host {socket.gethostname()}, since ")
            assert line.endswith("; wait for it to end, or use another --output"), line
            assert snapshot(out) == before, "a refused writer changed the folder"
    finally:
        (gate / "release").write_text("")
        _, err = holder.communicate(timeout=300)
    assert holder.returncode == 0, err
    results_by_episode(out)  # every episode once
    meta = read(out / "experiment_metadata.json")
    assert meta["status"] == "finished" and "previous" not in meta  # no other attempt wrote the history

    # The run ended: its lock went with it, a --resume takes the folder (nothing left to play).
    done = subprocess.run(evalfleet_cmd("run", str(exp), "--output", str(out), "--workers", "1", "--resume"),
                          cwd=ROOT, capture_output=True, text=True, env=plugin_env(), timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    meta = read(out / "experiment_metadata.json")
    assert meta["status"] == "finished" and [p["status"] for p in meta["previous"]] == ["finished"]


HOLD_AND_FORK = """
import os, sys
from pathlib import Path
from evalfleet.outputs.output_lock import lock_output
out = Path(sys.argv[1])
lock = lock_output(out)
pid = os.fork()
if pid == 0:  # a child forked while the lock is held (a standby runner, collect's second half): it lives on
    (out / "child").write_text(str(os.getpid()))
    os.read(int(sys.argv[2]), 1)  # until the test closes the pipe
    os._exit(0)
while not (out / "child").exists():
    os.sched_yield()
(out / "holding").write_text(str(os.getpid()))
os.read(int(sys.argv[2]), 1)
"""

TRY_LOCK = """
import sys
from pathlib import Path
from evalfleet.errors import UserError
from evalfleet.outputs.output_lock import lock_output
try:
    lock_output(Path(sys.argv[1]))
except UserError as exc:
    print(exc.line())
    sys.exit(2)
print("taken")
"""


def test_the_lock_dies_with_its_holder_though_a_forked_child_lives_on(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    read_end, write_end = os.pipe()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_AND_FORK, str(out), str(read_end)], env=os.environ.copy(),
                              pass_fds=(read_end,))
    os.close(read_end)
    try:
        while not (out / "holding").exists():
            assert holder.poll() is None, "the holder ended before it held the lock"
            time.sleep(0.02)
        child = int((out / "child").read_text())
        tried = subprocess.run([sys.executable, "-c", TRY_LOCK, str(out)], capture_output=True, text=True)
        assert tried.returncode == 2 and f"pid {holder.pid} on host" in tried.stdout, tried.stdout + tried.stderr
        holder.kill()  # SIGKILL: nothing said goodbye; the forked child still runs
        holder.wait()
        assert os.kill(child, 0) is None
        tried = subprocess.run([sys.executable, "-c", TRY_LOCK, str(out)], capture_output=True, text=True)
        assert (tried.returncode, tried.stdout.strip()) == (0, "taken"), tried.stdout + tried.stderr
        held = json.loads((out / ".evalfleet" / "lock").read_text())
        assert held["pid"] != holder.pid and held["host"] == socket.gethostname()
    finally:
        os.close(write_end)  # the child's read ends: it exits
        if holder.poll() is None:
            holder.kill()
            holder.wait()
