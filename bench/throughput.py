"""Throughput of the local backend against a plain two-process loop over the same episodes.

    python bench/throughput.py [--episodes-per-task 250] [--workers 2] [--repeats 3]

Prints JSON: evalfleet's episodes/s (the whole `evalfleet run`: planning, worker start-up under the
watchdog, records, collect and report) next to a bare multiprocessing loop that steps the same seeded
Meta-World episodes with the same experts and writes nothing, and their ratio (target ≥ 0.95, issue #29), measured
in `--repeats` interleaved pairs (plain, evalfleet; evalfleet, plain; ...) after one untimed round of each on a
single episode per task: median and spread of each figure and of the pairwise ratio, with the machine's cores and
load average. Both sides keep compiled bytecode as an installed copy does (`_common.cache_bytecode`).

    python bench/throughput.py --side-by-side [--episodes-per-task 125] [--repeats 9]

runs the two at the same time instead, one worker each, each side's processes (evalfleet's driver, watchdog and
runner alike) held to a core of its own, the cores swapped every repeat. On a shared VM whose speed moves by tens of
per cent within minutes, two sides measured one after the other differ by the minute they ran in as much as by
their code; side by side they share it, and each pair's ratio is the code's. It needs two cores that are not
siblings of one core (each side then has one to itself); the plain side is one process looping in place.

    python bench/throughput.py --side-by-side --against OTHER/src

puts another evalfleet source tree (a checkout's `src`, e.g. main before a change) where the plain loop was: the
ratio is then the other tree's time / this one's, and the same tree on both sides gives 1 within about a per cent.

    python bench/throughput.py --camera corner [--image-size 224] ...

makes it a vision workload: evalfleet renders that Meta-World camera into every observation (as a Run listing it in
`cameras` does) and the plain loop renders the same camera, at the same size and quality, with the same offscreen
renderer after every reset and step (the experts still act on the state). Fewer episodes by default: a frame costs
milliseconds on a CPU.

The plain loop iterates MuJoCo's struct lists (`data.contact`, which Meta-World's reward loops over) as evalfleet's
adapters make them iterate, without the exception that ends them (`evalfleet.sim.mujoco_lists`: a quarter of a
push-v3 step, the outcomes bit-identical), so the ratio is evalfleet's own cost alone; `--stock-plain` leaves the
plain loop's as mujoco ships them, as a loop a user writes runs them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from _common import (add_repeat_arg, cache_bytecode, emit, interleaved, machine, ratios, spread,
                     waited_process)

TASKS = ("reach-v3", "push-v3", "pick-place-v3", "drawer-open-v3")
CAMERAS = ("topview", "corner", "corner2", "corner3", "corner4", "behindGripper", "gripperPOV")  # Meta-World's


@dataclass
class Timed:
    seconds: float  # wall to wall
    successes: int
    first: float  # seconds from the start to the first episode's end
    last: float  # ... to the last episode's end
    episodes: int
    cpu: float | None = None  # CPU seconds of the side's processes, where measured (--side-by-side)

    @property
    def steady_rate(self) -> float:
        """Episodes/s between the first episode's end and the last's."""
        return (self.episodes - 1) / max(self.last - self.first, 1e-9)


def plain_worker(items: list[tuple[str, int]], camera: str | None = None, image_size: int = 224,
                 stock: bool = False) -> tuple[int, int, float, float]:
    """(successes, steps, time.time() when its first and its last episode ended). With `camera`, that camera is
    rendered after every reset and step, as evalfleet renders it into each observation. Unless `stock`, MuJoCo's
    struct lists iterate as evalfleet's adapters make them (like for like)."""
    import warnings

    warnings.filterwarnings("ignore")
    import metaworld.policies as mw_policies

    from evalfleet.policies.builtin import expert_class_name
    from evalfleet.sim.metaworld_env import make_task_env
    from evalfleet.sim.mujoco_lists import bounded_iteration
    from evalfleet.sim.rendering import RendererCache

    if not stock:
        bounded_iteration()

    envs, experts, renderers = {}, {}, {}
    successes = steps = 0
    ends = []
    for task, seed in items:
        if task not in envs:
            for renderer in renderers.values():  # as a runner moving to its next Run: the GL context is reused
                renderer.close()
            envs[task] = env = make_task_env(task)
            experts[task] = getattr(mw_policies, expert_class_name(task))()
            renderers[task] = RendererCache(lambda env=env: env.model, (image_size, image_size))
        env, expert, renderer = envs[task], experts[task], renderers[task]
        env.seed(seed)
        obs, _ = env.reset()
        if camera:
            renderer.rgb(env.data, camera)
        for _ in range(500):
            obs, _, _, _, info = env.step(expert.get_action(obs))
            if camera:
                renderer.rgb(env.data, camera)
            steps += 1
            if info["success"]:
                successes += 1
                break
        ends.append(time.time())
    for renderer in renderers.values():
        renderer.close()
    return successes, steps, min(ends), max(ends)


def plain_process(items_path: str, camera: str | None, image_size: int, stock: bool) -> None:
    """The plain side of --side-by-side: one process stepping the episodes listed in `items_path` in place."""
    items = [tuple(x) for x in json.loads(Path(items_path).read_text())]
    successes, steps, first, last = plain_worker(items, camera, image_size, stock)
    print(json.dumps({"successes": successes, "steps": steps, "first": first, "last": last}))


def timed_process(cmd: list[str], core: int | None = None, env: dict[str, str] | None = None
                  ) -> tuple[float, float, float, subprocess.CompletedProcess]:
    """`waited_process` with CPU seconds for its rusage: its own and those of every process it waited for
    (evalfleet's template, runners and plot child, all reaped by `run`)."""
    wall0, seconds, usage, done = waited_process(cmd, core, env)
    return wall0, seconds, usage.ru_utime + usage.ru_stime, done


def at_the_same_time(*calls):
    """Each call in a thread of its own, all started together; their results in order. What one raises (a
    side's `sys.exit` too) is raised here once all have ended."""
    results: list = [None] * len(calls)
    raised: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
            raised.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if raised:
        raise raised[0]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes-per-task", type=int, default=None,
                        help="default 250, with --side-by-side 125 (one worker a side); a tenth of that with --camera")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--side-by-side", action="store_true",
                        help="both sides at once, one worker each on a core of its own, the cores swapped each repeat")
    parser.add_argument("--against", metavar="SRC", type=Path,
                        help="with --side-by-side: evalfleet from this source tree instead of the plain loop")
    parser.add_argument("--camera", choices=CAMERAS, help="render this camera into every observation (both sides)")
    parser.add_argument("--image-size", type=int, default=224, help="pixels a side of the rendered image")
    parser.add_argument("--stock-plain", action="store_true",
                        help="the plain loop iterates MuJoCo's struct lists as mujoco ships them (a user's own loop)")
    parser.add_argument("--plain-process", metavar="ITEMS_JSON", help=argparse.SUPPRESS)
    add_repeat_arg(parser)
    args = parser.parse_args()
    if args.plain_process:
        return plain_process(args.plain_process, args.camera, args.image_size, args.stock_plain)
    if args.against is not None and not (args.side_by_side and (args.against / "evalfleet").is_dir()):
        sys.exit("--against SRC needs --side-by-side and a folder holding the evalfleet package (a checkout's src)")
    if args.side_by_side:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            sys.exit("--side-by-side needs two usable cores")
        args.workers, cores = 1, cores[:2]
    if args.episodes_per_task is None:
        args.episodes_per_task = (125 if args.side_by_side else 250) // (10 if args.camera else 1)
    if args.camera:  # both sides render with the same backend; no probe on either side
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    before = machine()

    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import make_plan

    with tempfile.TemporaryDirectory() as tmp:
        bytecode = cache_bytecode(Path(tmp) / "pycache")

        def experiment(name: str, episodes: int) -> Path:
            path = Path(tmp) / f"{name}.yaml"
            rendered = {"cameras": [args.camera], "image_camera": args.camera, "image_size": args.image_size}
            runs = {t.replace("-", "_"): {"environment": {"type": "metaworld", "task": t,
                                                          **(rendered if args.camera else {})},
                                          "policy": {"type": "metaworld_expert"},
                                          "rollout_limit": {"num_episodes": episodes}} for t in TASKS}
            path.write_text(yaml.safe_dump({"name": "throughput", "runs": runs}))
            return path

        def episode_list(path: Path) -> list[tuple[str, int]]:
            plan = make_plan(load_experiment(path), workers=args.workers)
            return [(rp.run.environment.options()["task"], e.seed) for rp in plan.runs.values() for e in rp.episodes()]

        exp_path, warm_path = experiment("bench", args.episodes_per_task), experiment("warm_up", 1)
        items = episode_list(exp_path)
        total = len(items)

        def plain(items: list[tuple[str, int]] = items) -> Timed:
            t0, wall0 = time.perf_counter(), time.time()
            with mp.get_context("spawn").Pool(args.workers) as pool:
                parts = pool.starmap(plain_worker, [(items[i::args.workers], args.camera, args.image_size,
                                                     args.stock_plain) for i in range(args.workers)])
            seconds = time.perf_counter() - t0
            return Timed(seconds, sum(p[0] for p in parts), min(p[2] for p in parts) - wall0,
                         max(p[3] for p in parts) - wall0, len(items))

        def evalfleet(exp_path: Path = exp_path, core: int | None = None, source: Path | None = None) -> Timed:
            out = Path(tempfile.mkdtemp(dir=tmp)) / "out"
            cmd = [sys.executable, "-m", "evalfleet.cli", "run", str(exp_path), "--output", str(out),
                   "--workers", str(args.workers), "--no-progress"]
            env = None if source is None else {**os.environ, "PYTHONPATH": str(source.resolve())}
            wall0, seconds, cpu, proc = timed_process(cmd, core, env)
            if proc.returncode != 0:
                sys.exit(f"evalfleet run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
            result = json.loads((out / "experiment_result.json").read_text())
            ends = [json.loads(line)["timestamp"] for run in result["runs"]
                    for line in (out / run / "episode_results.jsonl").read_text().splitlines() if line.strip()]
            return Timed(seconds, sum(r["counts"]["success"] for r in result["runs"].values()), min(ends) - wall0,
                         max(ends) - wall0, len(ends), cpu)

        def plain_alone(items: list[tuple[str, int]], core: int) -> Timed:
            listed = Path(tempfile.mkdtemp(dir=tmp)) / "items.json"
            listed.write_text(json.dumps(items))
            cmd = [sys.executable, __file__, "--plain-process", str(listed), "--image-size", str(args.image_size)]
            cmd += ["--stock-plain"] if args.stock_plain else []
            wall0, seconds, cpu, proc = timed_process(cmd + (["--camera", args.camera] if args.camera else []), core)
            if proc.returncode != 0:
                sys.exit(f"the plain loop failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
            done = json.loads(proc.stdout)
            return Timed(seconds, done["successes"], done["first"] - wall0, done["last"] - wall0, len(items), cpu)

        def other(path: Path, core: int) -> Timed:  # the side evalfleet is measured against
            if args.against is not None:
                return evalfleet(path, core, args.against)
            return plain_alone(episode_list(path) if path == warm_path else items, core)

        if args.side_by_side:
            plain_runs, ef_runs = [], []
            at_the_same_time(lambda: other(warm_path, cores[0]), lambda: evalfleet(warm_path, cores[1]))
            for i in range(args.repeats):  # the cores swapped every repeat: neither side keeps the better one
                plain_core, ef_core = cores if i % 2 == 0 else cores[::-1]
                p, e = at_the_same_time(lambda: other(exp_path, plain_core), lambda: evalfleet(exp_path, ef_core))
                plain_runs.append(p)
                ef_runs.append(e)
        else:
            plain(episode_list(warm_path)), evalfleet(warm_path)  # untimed: bytecode cached, files in the page cache
            plain_runs, ef_runs = interleaved(plain, evalfleet, args.repeats)

    plain_s, ef_s = [t.seconds for t in plain_runs], [t.seconds for t in ef_runs]
    base = "plain_loop" if args.against is None else "against"  # the other side's name in the figures
    report = {
        "episodes": total,
        "workers": args.workers,
        "repeats": args.repeats,
        "rendered": f"{args.camera} {args.image_size}x{args.image_size}" if args.camera else None,
        **({} if args.against is not None else
           {"plain_loop_mujoco_lists": "stock (a user's own loop)" if args.stock_plain
            else "bounded iteration, as evalfleet's adapters (like for like)"}),
        "mode": ("side by side, a core each, swapped each repeat" if args.side_by_side
                 else "interleaved, one after the other"),
        "evalfleet_s": spread(ef_s, 2),
        "evalfleet_episodes_per_s": spread([total / t for t in ef_s], 2),
        f"{base}_s": spread(plain_s, 2),
        f"{base}_episodes_per_s": spread([total / t for t in plain_s], 2),
        "ratio": spread(ratios(plain_s, ef_s), 3),  # plain (or --against) time / evalfleet time, pair by pair
        **({"target_ratio": 0.95} if args.against is None else {"against": str(args.against.resolve())}),
        # Where the difference lies: the fixed costs (start to the first episode's end, the last episode's end to
        # the exit), and episodes/s between the first and the last episode's end, evalfleet / plain pair by pair.
        "evalfleet_before_first_episode_s": spread([t.first for t in ef_runs], 3),
        f"{base}_before_first_episode_s": spread([t.first for t in plain_runs], 3),
        "evalfleet_after_last_episode_s": spread([t.seconds - t.last for t in ef_runs], 3),
        f"{base}_after_last_episode_s": spread([t.seconds - t.last for t in plain_runs], 3),
        "steady_ratio": spread([e.steady_rate / p.steady_rate for p, e in zip(plain_runs, ef_runs)], 3),
        # Side by side, each side's CPU seconds (all its processes) and their ratio, other / evalfleet pair by pair:
        # where the wall ratio falls short of the CPU ratio, a side waited (for a disk, a pipe, a poll).
        **({"evalfleet_cpu_s": spread([e.cpu for e in ef_runs], 2),
            f"{base}_cpu_s": spread([p.cpu for p in plain_runs], 2),
            "cpu_ratio": spread([p.cpu / e.cpu for p, e in zip(plain_runs, ef_runs)], 3)} if args.side_by_side else {}),
        "successes": {"evalfleet": sorted({t.successes for t in ef_runs}),
                      base: sorted({t.successes for t in plain_runs})},
        **bytecode,
    }
    emit(report, machine_before=before)


if __name__ == "__main__":
    main()
