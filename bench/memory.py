"""Peak RSS of evalfleet's processes against the number of episodes: the driver, a worker, a served policy's server,
collect and report.

    python bench/memory.py [--run-episodes 100,1600,6400] [--collect-episodes 10000,100000,1000000] [--repeats 3]

- driver, worker, server: real `evalfleet run`s of Push-T (state, the `random` policy, `--max-steps` steps), one
  Run local and one Run served over openpi (`serve: {type: random}`), 2 workers, at each `--run-episodes`. The
  process tree of `evalfleet run` is sampled every 50 ms for each process's VmHWM (the kernel's peak RSS so far,
  so a sample after the peak still sees it): the `evalfleet run` process is the driver, a process whose command
  line says `serve` a server, every other descendant a worker (a runner forked from the driver, or started
  fresh after a restart); each role's figure is its largest process.
- collect, report: `evalfleet collect OUT --output OUT --no-report`, then `evalfleet report OUT`, each in a fresh
  process waited for with wait4 (its own ru_maxrss, exact), on synthetic Runs made by bench/collect.py's
  `make_runs` (40 Runs, as runners leave them) at each `--collect-episodes`; the public commands, so this
  measures whatever collect and report are on the checkout it runs in. `collect_child`: the largest peak of
  collect's children (the second half of the Runs is read in a forked child from 4 MB of records on), from
  collect's own RUSAGE_CHILDREN at its exit; none where it forked none.

Prints JSON: per role and size, the median and spread of peak RSS (MB) over `--repeats` (`--big-repeats` for
sizes of 1,000,000 or more), and per role the growth: a least-squares line MB = a + b * episodes (b as KB per
episode) over the sizes' medians, and the same line over every size but the smallest (`growth_beyond_smallest`: what is
built once, allocator arenas and imports on first use, left out); the commit measured and the machine. A worker
holds a few fields of each record of its Runs (`records.RunRecordsTail`: ~0.4 KB an episode) and collects its old
cyclic garbage once a second (`rollout.garbage`; before it, gym-pusht's per-reset pymunk Space grew a Push-T
worker ~15 KB an episode until Python's own full collection ran).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import add_repeat_arg, emit, machine, spread, waited_process
from collect import make_runs

EVALFLEET = [sys.executable, "-m", "evalfleet.cli"]


def vm_hwm_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return None
    return kb / 1024


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    """Every thread's children (a child started by a watchdog thread is listed under that thread only)."""
    out: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                out.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return out


class TreeSampler:
    """Every process of a tree, sampled for its VmHWM until the root exits: pid -> (largest VmHWM, command line)."""

    def __init__(self, root: int, every_s: float = 0.05):
        self.root, self.every_s = root, every_s
        self.peaks: dict[int, tuple[float, str]] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._done.is_set():
            todo, seen = [self.root], set()
            while todo:
                pid = todo.pop()
                if pid in seen:
                    continue
                seen.add(pid)
                mb = vm_hwm_mb(pid)
                if mb is not None:
                    old = self.peaks.get(pid)
                    self.peaks[pid] = (max(mb, old[0]) if old else mb, old[1] if old else cmdline(pid))
                todo.extend(children(pid))
            self._done.wait(self.every_s)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def experiment(path: Path, episodes: int, max_steps: int) -> None:
    env = {"type": "pusht", "obs_type": "state", "actions": "normalized", "max_steps": max_steps}
    half = max(1, episodes // 2)
    path.write_text(yaml.safe_dump({"name": "memory", "seed": 0, "runs": {
        "local_random": {"environment": env, "policy": {"type": "random"}, "rollout_limit": {"num_episodes": half}},
        "served_random": {"environment": env, "policy": {"type": "openpi_remote", "serve": {"type": "random"}},
                          "rollout_limit": {"num_episodes": episodes - half}},
    }}))


def measure_run(work: Path, episodes: int, max_steps: int, workers: int) -> dict[str, float | None]:
    """One `evalfleet run`: the largest peak RSS of the driver, of a worker and of a server, in MB."""
    exp = work / f"memory_{episodes}.yaml"
    experiment(exp, episodes, max_steps)
    out = Path(tempfile.mkdtemp(dir=work)) / "out"
    proc = subprocess.Popen([*EVALFLEET, "run", str(exp), "--output", str(out), "--workers", str(workers),
                             "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sampler = TreeSampler(proc.pid)
    _, stderr = proc.communicate()
    sampler.stop()
    if proc.returncode != 0:
        sys.exit(f"evalfleet run failed ({proc.returncode}):\n{stderr[-3000:]}")
    roles: dict[str, float | None] = {"driver": None, "worker": None, "server": None}  # None: never sampled
    for pid, (mb, line) in sampler.peaks.items():
        if pid != proc.pid and "evalfleet" not in line:
            continue  # git (the run's metadata), not evalfleet's
        role = "driver" if pid == proc.pid else ("server" if " serve " in f"{line} " else "worker")
        roles[role] = mb if roles[role] is None else max(roles[role], mb)
    shutil.rmtree(out.parent, ignore_errors=True)
    return {k: None if v is None else round(v, 1) for k, v in roles.items()}


def waited_peak_mb(command: list[str]) -> float:
    """A fresh process's own peak RSS (wait4's ru_maxrss), in MB."""
    _, _, usage, done = waited_process(command, env=dict(os.environ, MPLBACKEND="Agg"))
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return round(usage.ru_maxrss / 1024, 1)


# `evalfleet` whose largest child's peak RSS (collect forks one for the second half of the Runs) is written, at
# exit, to the file named by the first argument.
WITH_CHILDREN_PEAK = [sys.executable, "-c", (
    "import atexit, resource, sys\n"
    "from evalfleet.cli import main\n"
    "path = sys.argv.pop(1)\n"
    "atexit.register(lambda: open(path, 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)))\n"
    "sys.exit(main(sys.argv[1:]))")]


def measure_collect(template: str, work: Path) -> dict[str, float | None]:
    """collect (no report), then report, on a fresh copy of the synthetic Runs (the copy not measured); collect's
    child (the second half of the Runs, read at the same time) is its own figure, `collect_child`."""
    root = work / "collect"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(template, root)
    children = work / "children_peak_kb"
    children.unlink(missing_ok=True)
    collect = waited_peak_mb([*WITH_CHILDREN_PEAK, str(children), "collect", str(root), "--output", str(root),
                              "--no-report"])
    child_kb = int(children.read_text()) if children.exists() else 0
    report = waited_peak_mb([*EVALFLEET, "report", str(root)])
    shutil.rmtree(root, ignore_errors=True)
    return {"collect": collect, "collect_child": round(child_kb / 1024, 1) if child_kb else None, "report": report}


def growth(sizes: list[int], medians: list[float]) -> dict[str, float] | None:
    """Least squares MB = a + b * episodes over the sizes: a (MB), b (KB per episode)."""
    if len(sizes) < 2:
        return None
    n = len(sizes)
    mx, my = sum(sizes) / n, sum(medians) / n
    sxx = sum((x - mx) ** 2 for x in sizes)
    b = sum((x - mx) * (y - my) for x, y in zip(sizes, medians)) / sxx
    return {"intercept_mb": round(my - b * mx, 1), "kb_per_episode": round(b * 1024, 4)}


def summarise(by_size: dict[int, list[dict[str, float | None]]], roles: tuple[str, ...]) -> dict:
    out: dict = {}
    for role in roles:
        figures = {str(n): spread([m[role] for m in ms if m[role] is not None], 1) for n, ms in by_size.items()}
        sizes = list(by_size)
        sizes = [n for n in sizes if figures[str(n)]["n"]]
        medians = [figures[str(n)]["median"] for n in sizes]
        out[role] = {"peak_rss_mb": figures, "growth": growth(sizes, medians),
                     "growth_beyond_smallest": growth(sizes[1:], medians[1:])}
    return out


def commit() -> str | None:
    proc = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "describe", "--always",
                           "--dirty"], capture_output=True, text=True)
    return proc.stdout.strip() or None


def sizes_arg(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-episodes", type=sizes_arg, default=[100, 1600, 6400])
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--collect-episodes", type=sizes_arg, default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--runs", type=int, default=40, help="synthetic Runs (at most 40: collect.make_runs's names)")
    parser.add_argument("--big-repeats", type=int, default=1, help="repeats at 1,000,000 episodes or more")
    add_repeat_arg(parser)
    args = parser.parse_args()
    before = machine()
    figures: dict = {"commit": commit(), "repeats": args.repeats}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        runs: dict[int, list[dict[str, float | None]]] = {n: [] for n in args.run_episodes}
        for _ in range(args.repeats):  # sizes interleaved within each round, so drift falls on all alike
            for n in args.run_episodes:
                runs[n].append(measure_run(work, n, args.max_steps, args.workers))
        if runs:
            figures["evalfleet_run"] = {"experiment": f"Push-T state, random policy, {args.max_steps} steps an "
                                        "episode, half the episodes local, half served over openpi",
                                        "workers": args.workers, **summarise(runs, ("driver", "worker", "server"))}
        collected: dict[int, list[dict[str, float]]] = {}
        for n in args.collect_episodes:
            template = str(work / f"runs_{n}")
            make_runs(template, n, args.runs)
            reps = args.big_repeats if n >= 1_000_000 else args.repeats
            collected[n] = [measure_collect(template, work) for _ in range(reps)]
            shutil.rmtree(template, ignore_errors=True)
        if collected:
            figures["collect_report"] = {"runs": args.runs,
                                         **summarise(collected, ("collect", "collect_child", "report"))}
    emit(figures, machine_before=before)


if __name__ == "__main__":
    main()
