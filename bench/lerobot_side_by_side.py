"""A trained LeRobot ACT checkpoint on Push-T through `lerobot-eval` and through evalfleet, in two modes. Prints JSON.

    python3 bench/lerobot_side_by_side.py [--episodes 50,200] [--modes same_seeds,best] [--repeats 3]
                                          [--checkpoint DIR] [--workers 2] [--num-envs 8]

The checkpoint is scripts/pusht-checkpoint.sh's (built once into ~/.cache/evalfleet: ACT trained here on
demonstrations of evalfleet's Push-T planner, keypoint observations), so episodes succeed and fail and
per-episode agreement can fail. Every side runs gym-pusht 0.1.8 with `obs_type=environment_state_agent_pos`.

Sides (each timed wall to wall, process start to exit):
* `lerobot_eval`: `lerobot-eval` with its defaults: `eval.batch_size` 0 (its auto size: 70% of the cores, so 1
  on 2 cores) and async envs. Beside its wall time, its own `eval_s` (imports and policy load left out).
* `lerobot_eval_batched`: `lerobot-eval --eval.batch_size=8 --eval.use_async_envs=false`, its fastest setting
  measured on 2 cores (a vector env of 8 steps every env until the last is done; async is slower here).
* `evalfleet`: evalfleet at its best for a LeRobot checkpoint: `evalfleet run` from LeRobot's venv with the
  checkpoint in each runner (`type: lerobot_local`, torch's threads split among the runners), `--workers`
  runners of `--num-envs` lockstepped envs each, one forward pass per runner per step for all its envs.
* `evalfleet_unbatched` (same_seeds only, unless named in `--sides`): the same with one env per runner, so every
  forward pass sees one observation, as lerobot-eval's does with its batch of 1.
* `evalfleet_served`: evalfleet's usual path, from its own environment: `type: lerobot`, the checkpoint served
  over openpi from LeRobot's venv, `--workers` runners of `--num-envs` envs, the server batching up to 16.

Modes:
* same_seeds: every side plays seeds S..S+n-1, lerobot-eval's numbering for `--seed=S` (each batch of its
  vector env takes the next seeds); evalfleet replays exactly those through a condition set
  (`runs.<run>.conditions`). Per-episode success is compared seed by seed against `lerobot_eval`, and each
  side's success rate is given with its Wilson interval. A forward pass on a batch of observations differs from
  one on each alone in the last bits (the matrix products take another path and sum in another order), and
  Push-T's contacts grow such a difference into another episode now and then: sides that batch may disagree
  where the unbatched ones agree, so each disagreement lists what `evalfleet_unbatched` and
  `lerobot_eval_batched` got on that seed.
* best: each side on its own seeds (lerobot-eval's default `--seed` 1000, evalfleet's plan).

Each measurement is repeated `--repeats` times, the order of the sides rotated each round: median and spread of
each figure, and evalfleet's speed-up over each lerobot-eval side pair by pair (same round).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import yaml
from _common import add_repeat_arg, emit, machine, ratios, rotated, spread

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
RUN = "pusht_act"
FIRST_SEED = 0  # same_seeds: lerobot-eval's --seed, evalfleet's first replayed seed
LEROBOT_DEFAULT_SEED = 1000  # lerobot-eval's own --seed default
SERVER_BATCH = 16
SIDES = ("lerobot_eval", "lerobot_eval_batched", "evalfleet", "evalfleet_unbatched", "evalfleet_served")
BATCHED = {"lerobot_eval_batched", "evalfleet", "evalfleet_served"}  # forward passes on several observations


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "EVALFLEET_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    env["MPLBACKEND"] = "Agg"
    env["HF_HUB_OFFLINE"] = "1"
    return env


def build_checkpoint() -> Path:
    done = subprocess.run(["bash", str(ROOT / "scripts" / "pusht-checkpoint.sh")], check=True, text=True,
                          stdout=subprocess.PIPE, env=_env())
    return Path(done.stdout.strip().splitlines()[-1])


def condition_set(path: Path, seeds: list[int]) -> None:
    """A condition set replaying exactly `seeds`, in order (experiment/conditions.py's format)."""
    from evalfleet.experiment.condition_export import seeds_document

    path.write_text(json.dumps(seeds_document("pusht", "pusht", seeds, runs=[RUN], experiment="lerobot-eval seeds")))


def experiment(path: Path, policy: dict[str, Any], episodes: int, num_envs: int, seeds: list[int] | None) -> Path:
    run: dict[str, Any] = {"environment": {"type": "pusht", "obs_type": "environment_state_agent_pos"},
                           "policy": policy, "environment_builder": {"num_envs": num_envs},
                           "rollout_limit": {"num_episodes": episodes}}
    if seeds is not None:
        condition_set(path.parent / "seeds.json", seeds)
        run["conditions"] = "seeds.json"
    path.write_text(yaml.safe_dump({"name": "lerobot_side_by_side", "seed": 0, "runs": {RUN: run}}))
    return path


def run_evalfleet(python: str, exp: Path, out: Path, workers: int) -> dict[str, Any]:
    started = time.perf_counter()
    proc = subprocess.run([python, "-m", "evalfleet.cli", "run", str(exp), "--output", str(out),
                           "--workers", str(workers), "--no-progress"], env=_env(), capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"evalfleet run ({python}) failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    records = [json.loads(line) for line in (out / RUN / "episode_results.jsonl").read_text().splitlines()]
    errors = [r for r in records if r.get("status") == "error"]
    if errors:
        sys.exit(f"evalfleet recorded {len(errors)} error episode(s), e.g. {errors[0].get('error')}")
    shutil.rmtree(out, ignore_errors=True)
    return {"wall_s": wall, "success": {int(r["seed"]): bool(r["success"]) for r in records}}


def run_lerobot_eval(python: str, ckpt: Path, episodes: int, out: Path, seed: int | None,
                     extra: list[str]) -> dict[str, Any]:
    command = [str(Path(python).parent / "lerobot-eval"), f"--policy.path={ckpt}", "--policy.device=cpu",
               "--env.type=pusht", "--env.obs_type=environment_state_agent_pos", f"--eval.n_episodes={episodes}",
               f"--output_dir={out}", *extra] + ([f"--seed={seed}"] if seed is not None else [])
    started = time.perf_counter()
    proc = subprocess.run(command, env=_env(), capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"lerobot-eval failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    info = json.loads((out / "eval_info.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    successes = [bool(s) for s in info["per_task"][0]["metrics"]["successes"]]
    first = LEROBOT_DEFAULT_SEED if seed is None else seed
    return {"wall_s": wall, "eval_s": float(info["overall"]["eval_s"]),
            "success": {first + i: s for i, s in enumerate(successes)}}


def rate(success: dict[int, bool]) -> dict[str, Any]:
    from evalfleet.analysis.stats import wilson_interval

    wins, n = sum(success.values()), len(success)
    low, high = wilson_interval(wins, n)
    return {"successes": wins, "episodes": n, "rate": round(wins / n, 3), "wilson_95": [round(low, 3), round(high, 3)]}


def sides(mode: str, episodes: int, folder: Path, venv_python: str, ckpt: Path,
          args: argparse.Namespace) -> dict[str, Callable[[], dict[str, Any]]]:
    seeds = list(range(FIRST_SEED, FIRST_SEED + episodes)) if mode == "same_seeds" else None
    lerobot_seed = FIRST_SEED if seeds else None
    local = {"type": "lerobot_local", "path": str(ckpt)}
    in_venv = experiment(_folder(folder, "evalfleet") / "exp.yaml", local, episodes, args.num_envs, seeds)
    unbatched = experiment(_folder(folder, "evalfleet_unbatched") / "exp.yaml", local, episodes, 1, seeds)
    batching = {"max_batch": SERVER_BATCH, "max_wait_ms": 2}
    served = experiment(_folder(folder, "evalfleet_served") / "exp.yaml",
                        {"type": "lerobot", "path": str(ckpt), "batching": batching}, episodes, args.num_envs, seeds)
    rounds = {side: 0 for side in SIDES}

    def out(side: str) -> Path:
        rounds[side] += 1
        return folder / side / f"out_{rounds[side]}"

    measures = {
        "lerobot_eval": lambda: run_lerobot_eval(venv_python, ckpt, episodes, out("lerobot_eval"), lerobot_seed, []),
        "lerobot_eval_batched": lambda: run_lerobot_eval(
            venv_python, ckpt, episodes, out("lerobot_eval_batched"), lerobot_seed,
            ["--eval.batch_size=8", "--eval.use_async_envs=false"]),
        "evalfleet": lambda: run_evalfleet(venv_python, in_venv, out("evalfleet"), args.workers),
        "evalfleet_unbatched": lambda: run_evalfleet(venv_python, unbatched, out("evalfleet_unbatched"), args.workers),
        "evalfleet_served": lambda: run_evalfleet(sys.executable, served, out("evalfleet_served"), args.workers),
    }
    chosen = args.sides.split(",") if args.sides else [s for s in SIDES if seeds or s != "evalfleet_unbatched"]
    return {side: measures[side] for side in chosen}


def _folder(parent: Path, name: str) -> Path:
    path = parent / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def compare(mode: str, episodes: int, venv_python: str, ckpt: Path, tmp: Path,
            args: argparse.Namespace) -> dict[str, Any]:
    folder = _folder(tmp, f"{mode}_{episodes}")
    results = rotated(sides(mode, episodes, folder, venv_python, ckpt, args), args.repeats)
    per_s = {side: [episodes / r["wall_s"] for r in rounds] for side, rounds in results.items()}
    figures: dict[str, Any] = {}
    for side, rounds in results.items():
        first = rounds[0]["success"]
        figures[side] = {"episodes_per_s": spread(per_s[side]), "wall_s": spread([r["wall_s"] for r in rounds], 2),
                         **rate(first), "same_results_every_round": all(r["success"] == first for r in rounds)}
        if "eval_s" in rounds[0]:
            figures[side]["episodes_per_s_from_eval_s"] = spread([episodes / r["eval_s"] for r in rounds])
    figures["speedup_wall_to_wall"] = {
        f"{ours}_vs_{theirs}": spread(ratios(per_s[ours], per_s[theirs]), 2)
        for ours in ("evalfleet", "evalfleet_unbatched", "evalfleet_served") if ours in per_s
        for theirs in ("lerobot_eval", "lerobot_eval_batched") if theirs in per_s}
    if mode == "same_seeds" and "lerobot_eval" in results:
        reference = results["lerobot_eval"][0]["success"]
        hints = {side: results[side][0]["success"] for side in ("evalfleet_unbatched", "lerobot_eval_batched")
                 if side in results}
        figures["agreement_with_lerobot_eval"] = {}
        for side in results:
            if side == "lerobot_eval":
                continue
            theirs = results[side][0]["success"]
            differ = sorted(s for s in reference if theirs.get(s) != reference[s])
            figures["agreement_with_lerobot_eval"][side] = {
                "episodes": len(reference), "agree": len(reference) - len(differ),
                "fraction": round((len(reference) - len(differ)) / len(reference), 4), "batched": side in BATCHED,
                "disagreements": [{"seed": s, side: theirs.get(s), "lerobot_eval": reference[s],
                                   **{hint: got.get(s) for hint, got in hints.items() if hint != side}}
                                  for s in differ]}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", default="50,200", help="comma-separated episode counts (default 50,200)")
    parser.add_argument("--modes", default="same_seeds,best")
    parser.add_argument("--sides", default="", help=f"comma-separated, of {', '.join(SIDES)} (default: all; "
                        "evalfleet_unbatched in same_seeds only)")
    parser.add_argument("--checkpoint", type=Path,
                        help="a LeRobot checkpoint folder (default: scripts/pusht-checkpoint.sh's)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=8, help="lockstepped envs per runner (evalfleet, _served)")
    add_repeat_arg(parser)
    args = parser.parse_args()
    unknown = set(filter(None, args.sides.split(","))) - set(SIDES)
    if unknown:
        sys.exit(f"unknown side(s) {', '.join(sorted(unknown))}; sides: {', '.join(SIDES)}")
    from evalfleet.serving.bindings import interpreter
    from evalfleet.serving.lerobot import lerobot_venv

    venv_python = interpreter(str(lerobot_venv()))
    if not Path(venv_python).exists():
        sys.exit(f"LeRobot's venv is not built ({venv_python}): run `bash scripts/lerobot-env.sh`")
    ckpt = args.checkpoint or build_checkpoint()
    training = json.loads((ckpt / "training.json").read_text()) if (ckpt / "training.json").is_file() else {}
    before = machine()
    tmp = Path(tempfile.mkdtemp(prefix="lerobot-sbs-"))
    try:
        results = {mode: {str(n): compare(mode, int(n), venv_python, ckpt, tmp, args)
                          for n in args.episodes.split(",")} for mode in args.modes.split(",")}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    emit({"checkpoint": {"path": str(ckpt), **{k: training.get(k) for k in ("recipe", "frames", "final_l1")}},
          "evalfleet_settings": {"workers": args.workers, "num_envs_best": args.num_envs, "server_batch": SERVER_BATCH},
          "repeats": args.repeats, **results}, machine_before=before)


if __name__ == "__main__":
    main()
