"""The same tiny random LeRobot ACT checkpoint on the same Push-T episodes, through `lerobot-eval` and
through evalfleet (`type: lerobot`, served from LeRobot's venv, 2 workers, one batched server). Prints JSON:
episodes/s of each and whether the per-episode results (success) agree, seed by seed.

    python3 bench/lerobot_side_by_side.py [--episodes 4] [--max-steps 300] [--repeats 3]

Needs LeRobot's venv (`bash scripts/lerobot-env.sh`). Both sides play evalfleet's planned seeds: lerobot-eval
runs once per seed (`--seed=S --eval.n_episodes=1`) and its own `eval_s` (no process start) is what its rate is
computed from; evalfleet's rate is the whole `evalfleet run` (server start included) and, beside it, the span
from its first episode's start to its last episode's end. Both sides run `--repeats` times, interleaved
(evalfleet, lerobot-eval; lerobot-eval, evalfleet; ...): median and spread of each figure and of the ratio.
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

import yaml
from _common import add_repeat_arg, emit, interleaved, machine, ratios, spread

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "EVALFLEET_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    env["MPLBACKEND"] = "Agg"
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=300)
    add_repeat_arg(parser)
    args = parser.parse_args()
    from evalfleet.serving.bindings import interpreter, lerobot_venv

    venv = lerobot_venv()
    python = interpreter(str(venv))
    if not Path(python).exists():
        sys.exit(f"LeRobot's venv is not built ({python}): run `bash scripts/lerobot-env.sh`")
    before = machine()
    tmp = Path(tempfile.mkdtemp(prefix="lerobot-sbs-"))
    ckpt = tmp / "act_pusht"
    subprocess.run([python, str(ROOT / "tests" / "lerobot_policies" / "tiny_checkpoint.py"), "act", str(ckpt),
                    "--state-dim", "2", "--action-dim", "2", "--image", "top=96", "--action-mean", "256",
                    "--action-std", "100"], check=True, env=_env(), capture_output=True)

    experiment = tmp / "sbs.yaml"
    experiment.write_text(yaml.safe_dump({"name": "lerobot_sbs", "seed": 0, "runs": {"pusht_act": {
        "environment": {"type": "pusht", "obs_type": "pixels_agent_pos", "image_size": 96,
                        "max_steps": args.max_steps},
        "policy": {"type": "lerobot", "path": str(ckpt), "batching": {"max_batch": 8, "max_wait_ms": 5}},
        "rollout_limit": {"num_episodes": args.episodes}}}}))
    from evalfleet.experiment.loading import load_experiment
    from evalfleet.experiment.plan import make_plan

    plan = make_plan(load_experiment(experiment), workers=2)
    seeds = [plan.runs["pusht_act"].episode(i).seed for i in range(args.episodes)]

    lerobot_eval = str(Path(python).parent / "lerobot-eval")
    rounds = 0

    def evalfleet_side() -> dict:
        nonlocal rounds
        rounds += 1
        out = tmp / f"evalfleet_{rounds}"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "evalfleet.cli", "run", str(experiment), "--output", str(out),
                               "--workers", "2", "--no-progress"], env=_env(), capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(proc.stderr[-3000:])
        records = [json.loads(line) for line in (out / "pusht_act" / "episode_results.jsonl").read_text().splitlines()]
        span = max(r["timestamp"] for r in records) - min(r["timestamp"] - r["duration_s"] for r in records)
        return {"wall_s": wall, "span_s": span, "records": {r["seed"]: r for r in records}}

    lerobot_rounds = 0

    def lerobot_side() -> dict:
        nonlocal lerobot_rounds
        lerobot_rounds += 1
        success, eval_s, wall = {}, 0.0, 0.0
        for seed in seeds:
            dest = tmp / f"lerobot_eval_{lerobot_rounds}_{seed}"
            t0 = time.perf_counter()
            subprocess.run([lerobot_eval, f"--policy.path={ckpt}", "--policy.device=cpu", "--env.type=pusht",
                            f"--env.episode_length={args.max_steps}", "--eval.n_episodes=1", "--eval.batch_size=1",
                            f"--seed={seed}", f"--output_dir={dest}"], check=True, env=_env(), capture_output=True)
            wall += time.perf_counter() - t0
            info = json.loads((dest / "eval_info.json").read_text())
            per_episode = (info.get("per_episode") or info.get("overall", {}).get("per_episode") or [{}])[0]
            aggregated = info.get("aggregated") or info.get("overall", {})
            eval_s += float(aggregated.get("eval_s", 0.0))
            success[seed] = bool(per_episode.get("success"))
        return {"eval_s": eval_s, "wall_s": wall, "success": success}

    ours_rounds, theirs_rounds = interleaved(evalfleet_side, lerobot_side, args.repeats)
    n = len(seeds)
    ours, theirs = ours_rounds[0]["records"], theirs_rounds[0]["success"]
    # Every round must give the same per-seed results on both sides, and the two sides must agree.
    same_every_round = (all({s: r["records"][s]["success"] for s in seeds} == {s: ours[s]["success"] for s in seeds}
                            for r in ours_rounds) and all(r["success"] == theirs for r in theirs_rounds))
    agree = {str(s): ours[s]["success"] == theirs[s] for s in seeds}
    ours_rate = [n / r["wall_s"] for r in ours_rounds]
    theirs_rate = [n / r["eval_s"] for r in theirs_rounds if r["eval_s"]]
    figures = {
        "episodes": n, "max_steps": args.max_steps, "checkpoint": "tiny random ACT, 96 px, chunk 10",
        "repeats": args.repeats,
        "lerobot_eval": {"episodes_per_s": spread(theirs_rate, 3),
                         "eval_s": spread([r["eval_s"] for r in theirs_rounds], 2),
                         "wall_s_with_process_starts": spread([r["wall_s"] for r in theirs_rounds], 2)},
        "evalfleet": {"episodes_per_s": spread(ours_rate, 3), "wall_s": spread([r["wall_s"] for r in ours_rounds], 2),
                      "episodes_per_s_first_start_to_last_end": spread([n / r["span_s"] for r in ours_rounds
                                                                         if r["span_s"] > 0], 3),
                      "workers": 2},
        # evalfleet's whole run (server start included) against lerobot-eval's own eval_s, round by round
        "speedup_vs_lerobot_eval_s": spread(ratios(ours_rate, theirs_rate), 2),
        "per_episode_success": {str(s): {"evalfleet": ours[s]["success"], "lerobot_eval": theirs[s]} for s in seeds},
        "all_agree": all(agree.values()),  # success only: records carry no reward to compare
        "same_results_every_round": same_every_round,
        "evalfleet_episode_lengths": [ours[s]["episode_length"] for s in seeds],
    }
    emit(figures, machine_before=before)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
