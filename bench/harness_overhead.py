"""Per-step overhead of evalfleet's runner over a bare loop of the same environment, and vla-eval's.

    python bench/harness_overhead.py [--episodes 10] [--max-steps 100] [--repeats 3] [--no-vla-eval] [--profile]

The same seeded Push-T episodes (state observations, the plan's episode seeds, evalfleet's `random` policy's
action stream) are stepped three ways:
- bare: a plain gymnasium loop, nothing else;
- evalfleet: `rollout.runner.run_shards` in this process (the runner a worker runs: env adapter, policy,
  records appended and flushed per episode, heartbeats), with the Run's plan;
- vla-eval 0.8.0: its sync episode runner against its websocket model server (served in-process, as its
  `serve_background` does), in its own venv under ~/.cache/evalfleet/venvs/ (made on first use; vla-eval
  ships no Push-T, so bench/_vlaeval_pusht.py defines a minimal one), next to a bare loop in that venv.
Overhead per step = (harness seconds − bare seconds) / steps, pair by pair (interleaved repeats), in ms;
median and spread. Target: evalfleet ≤ 1 ms per step. `--profile` adds evalfleet's top functions by own
time (cProfile) to find where the overhead goes.

LIBERO (when the libero extra is installed; `--no-libero` skips it): libero_spatial task 0, state only, the
plan's episodes from initial states 0..N-1, the `random` policy's actions; bare is LIBERO's own env (built the
way the adapter builds it, soft resets) stepped in a plain loop: seed, reset, set_init_state, the settling
no-op steps, then the actions with `check_success()` each step. The overhead is taken without building the
env (the runner's `env_build` phase, the bare loop's own build: ~1.7 s of the same work that varies by a second
under load, i.e. ±2 ms a step at 500 steps), and again without the seconds inside LIBERO's own `ControlEnv.step`
on both sides (its time swings with the load): what the adapter and the runner add per step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from _common import add_repeat_arg, emit, interleaved, machine, spread

HERE = Path(__file__).resolve().parent
VLA_EVAL = "vla-eval==0.8.0"
VENV = Path(os.environ.get("EVALFLEET_CACHE", Path.home() / ".cache" / "evalfleet")) / "venvs" / "vla-eval-0.8.0"
PUSHT = "gym-pusht==0.1.8"


def make_plan(tmp: Path, episodes: int, max_steps: int):
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import make_plan as plan_of

    path = tmp / "overhead.yaml"
    path.write_text(yaml.safe_dump({"name": "overhead", "seed": 0, "runs": {"pusht_random": {
        "environment": {"type": "pusht", "obs_type": "state", "actions": "normalized", "max_steps": max_steps},
        "policy": {"type": "random"}, "rollout_limit": {"num_episodes": episodes}}}}))
    return plan_of(load_experiment(path), workers=1)


def bare_pusht(seeds: list[int], max_steps: int) -> tuple[float, int]:
    import gym_pusht  # noqa: F401 - registers the gym id
    import gymnasium

    env = gymnasium.make("gym_pusht/PushT-v0", obs_type="state", render_mode="rgb_array", max_episode_steps=max_steps)
    steps = 0
    t0 = time.perf_counter()
    for seed in seeds:
        rng = np.random.default_rng([seed, 0x7A11D])  # evalfleet's `random` policy's stream
        env.reset(seed=seed)
        for _ in range(max_steps):
            a = rng.uniform(-1.0, 1.0, size=2).astype(np.float32)
            _obs, _r, terminated, truncated, info = env.step((np.clip(a, -1.0, 1.0) + 1.0) * 256.0)
            steps += 1
            if info.get("is_success") or terminated or truncated:
                break
    seconds = time.perf_counter() - t0
    env.close()
    return seconds, steps


def evalfleet_pusht(plan, profile: bool = False) -> tuple[float, int, list | None]:
    from evalfleet.rollout.runner import run_shards

    with tempfile.TemporaryDirectory() as out:
        profiler = None
        if profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        t0 = time.perf_counter()
        outcomes = run_shards(plan.runs, plan.shards, out)
        seconds = time.perf_counter() - t0
        if profiler is not None:
            profiler.disable()
        steps = sum(o.steps for o in outcomes)
    return seconds, steps, _top(profiler) if profiler is not None else None


def _top(profiler, n: int = 15) -> list[dict]:
    import pstats

    stats = pstats.Stats(profiler)
    rows = []
    for (file, line, fn), (_cc, calls, own, cumulative, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{Path(file).name}:{line}({fn})", "calls": calls, "own_s": round(own, 4),
                     "cumulative_s": round(cumulative, 4)})
    return sorted(rows, key=lambda r: -r["own_s"])[:n]


def vla_eval_python() -> Path:
    """vla-eval's venv (made once, then reused): vla-eval 0.8.0 and gym-pusht, nothing of evalfleet's."""
    python = VENV / "bin" / "python"
    if not python.exists() or subprocess.run([str(python), "-c", "import vla_eval, gym_pusht"],
                                             capture_output=True).returncode != 0:
        print(f"making vla-eval's venv in {VENV} (once) ...", file=sys.stderr)
        VENV.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", VLA_EVAL, PUSHT], check=True)
    return python


def vla_eval_pusht(seeds: list[int], max_steps: int, repeats: int) -> dict:
    python = vla_eval_python()
    arg = json.dumps({"seeds": seeds, "max_steps": max_steps, "repeats": repeats})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of evalfleet's in its interpreter
    proc = subprocess.run([str(python), str(HERE / "_vlaeval_pusht.py"), arg], capture_output=True, text=True,
                          env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"vla-eval's Push-T loop failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


LIBERO_SUITE, LIBERO_TASK = "libero_spatial", 0


def make_libero_plan(tmp: Path, episodes: int, max_steps: int):
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import make_plan as plan_of

    path = tmp / "overhead_libero.yaml"
    path.write_text(yaml.safe_dump({"name": "overhead", "seed": 0, "runs": {"libero_random": {
        "environment": {"type": "libero", "suite": LIBERO_SUITE, "task": LIBERO_TASK, "max_steps": max_steps},
        "policy": {"type": "random"}, "rollout_limit": {"num_episodes": episodes}}}}))
    return plan_of(load_experiment(path), workers=1)


class InnerClock:
    """Seconds spent inside LIBERO's own `ControlEnv.step` (patched on the class, for both loops alike)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> "InnerClock":
        from libero.libero.envs.env_wrapper import ControlEnv

        self._cls, self._step = ControlEnv, ControlEnv.step
        clock, step = self, self._step

        def timed(env, action):
            t0 = time.perf_counter()
            try:
                return step(env, action)
            finally:
                clock.seconds += time.perf_counter() - t0

        ControlEnv.step = timed
        return self

    def __exit__(self, *exc) -> None:
        self._cls.step = self._step


def bare_libero(seeds: list[int], max_steps: int, settle_steps: int) -> tuple[float, int, float, float]:
    """(seconds, steps, seconds building the env, seconds inside LIBERO's step)."""
    from evalfleet.sim.libero_env import NOOP, make_control_env
    from evalfleet.sim.libero_tasks import get_task, init_states
    from evalfleet.sim.mujoco_lists import bounded_iteration

    bounded_iteration()  # MuJoCo's contact lists as the adapter has them (process-wide: like for like, every repeat)
    with InnerClock() as inner:
        t0 = time.perf_counter()
        task = get_task(LIBERO_SUITE, LIBERO_TASK)
        states = init_states(LIBERO_SUITE, task.index)
        env = make_control_env(task.bddl_file)
        build = time.perf_counter() - t0
        steps = 0
        for episode, seed in enumerate(seeds):
            rng = np.random.default_rng([seed, 0x7A11D])  # evalfleet's `random` policy's stream
            np.random.seed(seed)
            env.reset()
            for robot in env.robots:
                robot.gripper.current_action = np.zeros(robot.gripper.dof)
            env.set_init_state(states[episode % len(states)])
            for _ in range(settle_steps):
                env.step(NOOP)
            for _ in range(max_steps):
                env.step(rng.uniform(-1.0, 1.0, size=7).astype(np.float32).astype(np.float64))
                steps += 1
                if env.check_success():
                    break
        seconds = time.perf_counter() - t0
        env.close()
    return seconds, steps, build, inner.seconds


def evalfleet_libero(plan) -> tuple[float, int, float, float]:
    """(seconds, steps, seconds building the env (the runner's env_build phase), seconds inside LIBERO's step)."""
    from evalfleet.rollout.runner import run_shards

    with InnerClock() as inner, tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        outcomes = run_shards(plan.runs, plan.shards, out)
        seconds = time.perf_counter() - t0
        build = sum(json.loads(f.read_text())["phases"].get("env_build", {}).get("total_ms", 0.0)
                    for f in Path(out).glob("*/timings/*.json")) / 1000.0
    return seconds, sum(o.steps for o in outcomes), build, inner.seconds


def measure_libero(episodes: int, max_steps: int, repeats: int) -> dict:
    from evalfleet.sim.libero_spec import LiberoOptions

    with tempfile.TemporaryDirectory() as tmp:
        plan = make_libero_plan(Path(tmp), episodes, max_steps)
        seeds = [e.seed for e in plan.runs["libero_random"].episodes()]
        settle = LiberoOptions().settle_steps
        evalfleet_libero(plan)  # warm-up: imports, numba's compiled functions
        ours, bare = interleaved(lambda: evalfleet_libero(plan), lambda: bare_libero(seeds, max_steps, settle),
                                 repeats)
    steps = {o[1] for o in ours} | {b[1] for b in bare}
    assert len(steps) == 1, f"different episodes: {ours} vs {bare}"
    n = steps.pop()
    per_step = lambda xs: [1000.0 * x / n for x in xs]  # noqa: E731 - a one-line local helper
    diff = lambda f: per_step([f(o) - f(b) for o, b in zip(ours, bare)])  # noqa: E731 - pair by pair
    return {
        "suite": LIBERO_SUITE, "task": LIBERO_TASK, "episodes": episodes, "max_steps": max_steps,
        "settle_steps": settle, "steps": n,
        "bare_ms_per_step": spread(per_step([b[0] for b in bare]), 4),
        "evalfleet_ms_per_step": spread(per_step([o[0] for o in ours]), 4),
        # as before: both sides include building the env (~1.7 s, the same work, but it varies by ±1 s here)
        "evalfleet_overhead_ms_per_step_with_env_build": spread(diff(lambda r: r[0]), 4),
        "env_build_s": {"evalfleet": spread([o[2] for o in ours], 3), "bare": spread([b[2] for b in bare], 3)},
        "evalfleet_overhead_ms_per_step": spread(diff(lambda r: r[0] - r[2]), 4),
        # what is spent outside LIBERO's own step (its step time, which swings with the machine's load,
        # subtracted on both sides): the adapter's and the runner's own work per step
        "libero_step_ms": {"evalfleet": spread(per_step([o[3] for o in ours]), 4),
                           "bare": spread(per_step([b[3] for b in bare]), 4)},
        "evalfleet_overhead_outside_libero_step_ms_per_step": spread(diff(lambda r: r[0] - r[2] - r[3]), 4),
        "target_overhead_ms_per_step": 1.0,
    }


def per_step_ms(seconds: list[float], steps: list[int]) -> list[float]:
    return [1000.0 * s / n for s, n in zip(seconds, steps)]


def overhead_ms(harness: list[float], bare: list[float], steps: list[int]) -> list[float]:
    return [1000.0 * (h - b) / n for h, b, n in zip(harness, bare, steps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--no-vla-eval", action="store_true", help="skip vla-eval (no venv made)")
    parser.add_argument("--no-libero", action="store_true", help="skip LIBERO")
    parser.add_argument("--libero-episodes", type=int, default=5)
    parser.add_argument("--libero-max-steps", type=int, default=100)
    parser.add_argument("--profile", action="store_true", help="add evalfleet's top functions by own time")
    add_repeat_arg(parser)
    args = parser.parse_args()
    before = machine()

    with tempfile.TemporaryDirectory() as tmp:
        plan = make_plan(Path(tmp), args.episodes, args.max_steps)
        seeds = [e.seed for e in plan.runs["pusht_random"].episodes()]
        evalfleet_pusht(plan)  # warm-up: imports, gym-pusht's first make
        bare_pusht(seeds[:1], args.max_steps)
        ours, bare = interleaved(lambda: evalfleet_pusht(plan), lambda: bare_pusht(seeds, args.max_steps), args.repeats)
        profile = evalfleet_pusht(plan, profile=True)[2] if args.profile else None

    ours_s, ours_steps = [o[0] for o in ours], [o[1] for o in ours]
    bare_s, bare_steps = [b[0] for b in bare], [b[1] for b in bare]
    assert len(set(ours_steps) | set(bare_steps)) == 1, f"different episodes: {ours_steps} vs {bare_steps}"
    pusht: dict = {
        "episodes": args.episodes, "max_steps": args.max_steps, "steps": ours_steps[0],
        "bare_ms_per_step": spread(per_step_ms(bare_s, bare_steps), 4),
        "evalfleet_ms_per_step": spread(per_step_ms(ours_s, ours_steps), 4),
        "evalfleet_overhead_ms_per_step": spread(overhead_ms(ours_s, bare_s, ours_steps), 4),
        "target_overhead_ms_per_step": 1.0,
    }
    if profile is not None:
        pusht["evalfleet_profile_top_own_time"] = profile
    if not args.no_vla_eval:
        v = vla_eval_pusht(seeds, args.max_steps, args.repeats)
        assert set(v["steps"]) == set(v["bare_steps"]) == {ours_steps[0]}, f"vla-eval stepped other episodes: {v}"
        pusht["vla_eval"] = {
            "version": VLA_EVAL.split("==")[1],
            "bare_ms_per_step": spread(per_step_ms(v["bare_s"], v["bare_steps"]), 4),
            "vla_eval_ms_per_step": spread(per_step_ms(v["vlaeval_s"], v["steps"]), 4),
            "vla_eval_overhead_ms_per_step": spread(overhead_ms(v["vlaeval_s"], v["bare_s"], v["steps"]), 4),
        }
        ratio = pusht["evalfleet_overhead_ms_per_step"]["median"] / max(
            pusht["vla_eval"]["vla_eval_overhead_ms_per_step"]["median"], 1e-9)
        pusht["evalfleet_over_vla_eval_overhead"] = round(ratio, 3)
    from evalfleet.sim.libero_tasks import libero_installed

    if args.no_libero or not libero_installed():
        libero: dict = {
            "measured": False, "why": "--no-libero" if args.no_libero else "the libero extra is not installed"
        }
    else:
        libero = measure_libero(args.libero_episodes, args.libero_max_steps, args.repeats)
    emit({"pusht": pusht, "libero": libero}, machine_before=before)


if __name__ == "__main__":
    main()
