"""What every bench shares: repeat a measurement (interleaved when two things are compared), summarise the
repeats as median and spread, and print the machine the figures came from next to them.

    from _common import interleaved, repeated, spread, emit
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

DEFAULT_REPEATS = 3


def waited_process(cmd: list[str], core: int | None = None, env: dict[str, str] | None = None
                   ) -> tuple[float, float, Any, subprocess.CompletedProcess]:
    """(time.time() at the start, seconds start to exit, its rusage, the process) of `cmd`, run on `core` alone
    where one is given (what it starts inherits the core). The rusage (Linux's wait4) covers it and every process it
    waited for; its output goes to files, so a child writing more than a pipe holds never blocks."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        wall0, t0 = time.time(), time.perf_counter()
        pin = None if core is None else lambda: os.sched_setaffinity(0, {core})
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, preexec_fn=pin)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(cmd, proc.returncode, out.read().decode(errors="replace"),
                                           err.read().decode(errors="replace"))
    return wall0, seconds, usage, done


def machine() -> dict[str, Any]:
    """Cores (present and usable by this process), load averages (1, 5, 15 min), CPU, Python."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cores": os.cpu_count(), "usable_cores": usable, "load_average": load, "cpu": cpu,
            "python": platform.python_version(), "platform": platform.platform()}


def cache_bytecode(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """Let this process and the processes it starts keep compiled bytecode in `folder`, as an installed package
    has it, also where the environment says to write none (PYTHONDONTWRITEBYTECODE, set in some sandboxes): every
    process would otherwise compile each module it imports from source (~0.3 s for `evalfleet run`'s own), a
    cost no installed copy pays. Nothing is written beside the sources. Returns what the bench states."""
    was = os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(folder)
    sys.dont_write_bytecode = False
    sys.pycache_prefix = str(folder)
    return {"bytecode_cache": "a folder of the bench's own", "environment_said_dont_write_bytecode": bool(was)}


def runner_costs(out: str | os.PathLike[str]) -> dict[str, Any]:
    """From an output folder's timings.json: runner starts (runners that ran shards: the `start` phase's count) and
    environment builds (count, and seconds in all)."""
    totals = json.loads(open(os.path.join(out, "timings.json"), encoding="utf-8").read())["totals"]
    builds = totals.get("env_build", {})
    return {"runner_starts": totals.get("start", {}).get("count", 0), "env_builds": builds.get("count", 0),
            "env_build_s": builds.get("total_ms", 0.0) / 1e3}


def spread(values: list[float], digits: int = 3) -> dict[str, Any]:
    """Median, min, max and quartiles of the repeats, and the values themselves."""
    xs = sorted(float(v) for v in values)
    if not xs:
        return {"n": 0}
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else (xs[0], xs[0], xs[0])
    r = lambda x: round(x, digits)  # noqa: E731 - a one-line local helper
    return {"median": r(statistics.median(xs)), "min": r(xs[0]), "max": r(xs[-1]), "q1": r(q1), "q3": r(q3),
            "n": len(xs), "values": [r(v) for v in values]}


def repeated(measure: Callable[[], Any], repeats: int = DEFAULT_REPEATS) -> list[Any]:
    """`measure()` run `repeats` times."""
    return [measure() for _ in range(repeats)]


def interleaved(first: Callable[[], Any], second: Callable[[], Any], repeats: int = DEFAULT_REPEATS
                ) -> tuple[list[Any], list[Any]]:
    """`repeats` pairs, alternating which of the two goes first (ABBA...), so drift in the machine's load or
    temperature falls on both alike."""
    a, b = [], []
    for i in range(repeats):
        if i % 2 == 0:
            a.append(first())
            b.append(second())
        else:
            b.append(second())
            a.append(first())
    return a, b


def rotated(measures: dict[str, Callable[[], Any]], repeats: int = DEFAULT_REPEATS) -> dict[str, list[Any]]:
    """`repeats` rounds of every measure, the order rotated each round (ABC, BCA, CAB, ...), so drift in the
    machine's load falls on all alike; name → its results, round by round."""
    names = list(measures)
    out: dict[str, list[Any]] = {name: [] for name in names}
    for i in range(repeats):
        for name in names[i % len(names):] + names[:i % len(names)]:
            out[name].append(measures[name]())
    return out


def ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    """Pair by pair (the pairs of `interleaved`)."""
    return [n / d for n, d in zip(numerators, denominators) if d]


class Timer:
    def __enter__(self) -> "Timer":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.start


def emit(figures: dict[str, Any], *, machine_before: dict[str, Any] | None = None) -> None:
    """Print the figures as JSON with the machine beside them (load average at the start and at the end)."""
    end = machine()
    at_end = end.pop("load_average")
    at_start = (machine_before or {}).get("load_average", at_end)
    out = {"machine": {**end, "load_average_at_start": at_start, "load_average_at_end": at_end}, **figures}
    print(compact_json(out))


def compact_json(value: Any, indent: int = 0) -> str:
    """JSON with nested objects indented, but an object of plain values (a median/spread) on one line."""
    def flat(v: Any) -> bool:
        return not isinstance(v, (dict, list)) or (
            isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v)
        )

    if isinstance(value, dict) and value and not all(flat(v) for v in value.values()):
        pad = " " * (indent + 1)
        items = [f"{pad}{json.dumps(k)}: {compact_json(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    return json.dumps(value)


def add_repeat_arg(parser: Any, default: int = DEFAULT_REPEATS) -> None:
    parser.add_argument("--repeats", type=int, default=default,
                        help=f"repeats of each measurement (default {default}; at least 3 for a median and spread)")


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM; getrusage's ru_maxrss where /proc is not there), in MB."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(kb / 1024, 1)
