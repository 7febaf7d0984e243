"""Train a small LeRobot ACT policy on Push-T from scripted demonstrations, on the CPU, and save it as a LeRobot
checkpoint folder that both `lerobot-eval` and evalfleet load. Runs in LeRobot's venv, with this checkout's
evalfleet importable; usually called through scripts/pusht-checkpoint.sh, which caches the result.

    <lerobot venv>/bin/python scripts/pusht_act_checkpoint.py OUT [--demos 600] [--steps 6000] [--workers N]

1. Demonstrations, made by evalfleet itself: `evalfleet run scripts/pusht_demonstrations.yaml` plays Push-T
   (`obs_type=environment_state_agent_pos`: the T's 16 keypoint values and the agent's position) with the
   scripted planner (`pusht_expert`, evalfleet/policies/pusht_planner.py), 5 px of Gaussian noise added by the
   environment to every executed action but not to the recorded one (DART: the data shows how the planner
   recovers from small errors), every step recorded as a LeRobotDataset v3.0. `evalfleet trajectories --status
   success --export` keeps the successful episodes (OUT/demonstrations, kept with the checkpoint) and the first
   `--demos` of them in plan order are the training data, read from the dataset's Parquet files. The episode
   seeds (the Experiment's `seed:`) are all 1,000,000 and up, far from the seeds evaluations use (checked here).
2. Policy: LeRobot's ACT without images or VAE, one action per call (`chunk_size` 1: the planner is a function of
   the current observation, so there is nothing to chunk). It predicts the target relative to the agent's
   position through LeRobot's own RelativeActionsProcessorStep / AbsoluteActionsProcessorStep, saved in the
   checkpoint's processor files, so any LeRobot loader turns it back into an absolute target; the keypoints
   are normalised like the state (ACT's default leaves an ENV feature unnormalised).
3. Training: AdamW, cosine schedule, L1 on the normalised relative action, batches drawn from tensors in memory.

What it reaches is written to OUT/training.json (episodes played, successes, demonstrations, frames, loss,
seconds); its success rate is measured by bench/lerobot_side_by_side.py through both tools.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TASK = "push the T-shaped block onto the T-shaped target"
HERE = Path(__file__).resolve().parent
EXPERIMENT = HERE / "pusht_demonstrations.yaml"
RUN = "planner"  # the Experiment's one Run
FIRST_DEMO_SEED = 1_000_000  # every demonstration seed is at least this: evaluations play 0.. and 1000..


def _evalfleet(*args: str) -> None:
    """`evalfleet ARGS` in this interpreter (the venv's) with this checkout's evalfleet (src/ first on the path,
    whatever copy the venv has installed); its output goes to our stderr."""
    path = os.pathsep.join(filter(None, [str(HERE.parent / "src"), os.environ.get("PYTHONPATH")]))
    subprocess.run([sys.executable, "-P", "-m", "evalfleet.cli", *args], check=True, stdout=sys.stderr,
                   stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": path, "MPLBACKEND": "Agg"})


def record_demonstrations(out: Path, workers: int) -> dict[str, object]:
    """Play the Experiment with evalfleet and export its successful episodes to `out` (a LeRobotDataset)."""
    played = out.parent / f"{out.name}.run"
    shutil.rmtree(played, ignore_errors=True)
    _evalfleet("run", str(EXPERIMENT), "--output", str(played), "--workers", str(workers), "--no-progress")
    _evalfleet("trajectories", str(played), "--run", RUN, "--status", "success", "--export", str(out))
    records = [json.loads(line) for line in (played / RUN / "episode_results.jsonl").read_text().splitlines()]
    shutil.rmtree(played)
    failures: dict[str, int] = {}
    for record in records:
        if record["status"] != "success":
            key = str(record.get("failure_code") or record["status"])
            failures[key] = failures.get(key, 0) + 1
    return {"episodes_played": len(records), "successes": sum(r["status"] == "success" for r in records),
            "failures": failures}


def _column(table, name: str) -> np.ndarray:
    """A fixed-size list column as a (rows, size) float32 array."""
    column = table.column(name).combine_chunks()
    return column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), -1).astype(np.float32)


def demonstrations(dataset: Path, count: int) -> dict[str, np.ndarray]:
    """The first `count` successful episodes of the dataset, in plan order: agent positions, keypoints and the
    planner's actions, frame by frame."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    episodes = pq.read_table(dataset / "meta" / "episodes").to_pandas()
    episodes = episodes[episodes["evalfleet/success"].astype(bool)].sort_values("evalfleet/episode")
    if len(episodes) < count:
        raise SystemExit(f"{dataset}: {len(episodes)} successful episodes, fewer than the {count} demonstrations "
                         f"asked for: play more (rollout_limit in {EXPERIMENT.name})")
    chosen = episodes.head(count)
    low_seeds = chosen[chosen["evalfleet/seed"] < FIRST_DEMO_SEED]
    if len(low_seeds):
        raise SystemExit(f"demonstration seeds below {FIRST_DEMO_SEED:,} (evaluations play those): "
                         f"{low_seeds['evalfleet/seed'].tolist()[:5]}; change the Experiment's `seed:`")
    table = pq.read_table(dataset / "data", columns=["observation.state", "observation.environment_state",
                                                      "action", "episode_index", "index"])
    wanted = pa.array(chosen["episode_index"].to_numpy(np.int64))
    table = table.filter(pc.is_in(table.column("episode_index"), value_set=wanted))
    table = table.sort_by([("episode_index", "ascending"), ("index", "ascending")])
    assert table.num_rows == int(chosen["length"].sum()), (table.num_rows, int(chosen["length"].sum()))
    return {"state": _column(table, "observation.state"), "keypoints": _column(table, "observation.environment_state"),
            "action": _column(table, "action"), "plan_episodes": chosen["evalfleet/episode"].to_numpy()}


def _stats(values):

    flat = values.reshape(-1, values.shape[-1]).double()
    return {"mean": flat.mean(0).float(), "std": flat.std(0).float(), "min": flat.min(0).values.float(),
            "max": flat.max(0).values.float()}


def train(data: dict[str, np.ndarray], out: Path, args: argparse.Namespace) -> dict[str, float]:
    import torch
    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.processor.factory import make_default_policy_processor_steps, make_policy_processor_pipelines
    from lerobot.processor.relative_action_processor import (AbsoluteActionsProcessorStep,
                                                             RelativeActionsProcessorStep)

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    state = torch.from_numpy(data["state"])
    keypoints = torch.from_numpy(data["keypoints"])
    relative = torch.from_numpy(data["action"]) - state  # what the policy learns: target minus agent position
    stats = {"observation.state": _stats(state), "observation.environment_state": _stats(keypoints),
             "action": _stats(relative)}
    config = ACTConfig(
        input_features={"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(2,)),
                        "observation.environment_state": PolicyFeature(type=FeatureType.ENV, shape=(16,))},
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(2,))},
        device="cpu", chunk_size=1, n_action_steps=1, dim_model=args.dim, n_heads=4,
        dim_feedforward=4 * args.dim, n_encoder_layers=args.layers, n_decoder_layers=1, use_vae=False,
        dropout=0.0, pretrained_backbone_weights=None,
        normalization_mapping={"VISUAL": NormalizationMode.MEAN_STD, "STATE": NormalizationMode.MEAN_STD,
                               "ENV": NormalizationMode.MEAN_STD, "ACTION": NormalizationMode.MEAN_STD})
    policy = ACTPolicy(config)
    steps = make_default_policy_processor_steps(config, stats, normalizer_device=config.device)
    to_relative = RelativeActionsProcessorStep(enabled=True)
    preprocessor, postprocessor = make_policy_processor_pipelines(
        input_steps=[steps.rename_observations, steps.add_batch_dim, to_relative, steps.to_device, steps.normalize],
        output_steps=[steps.unnormalize, AbsoluteActionsProcessorStep(enabled=True, relative_step=to_relative),
                      steps.to_cpu])

    def normalised(key, values):
        return (values - stats[key]["mean"]) / (stats[key]["std"] + 1e-8)

    inputs_state = normalised("observation.state", state)
    inputs_keypoints = normalised("observation.environment_state", keypoints)
    targets = normalised("action", relative)[:, None, :]
    # The training batches are normalised here once; check it is what the saved preprocessor does.
    check = preprocessor({"observation.state": state[:4], "observation.environment_state": keypoints[:4],
                          "task": [TASK] * 4})
    assert torch.allclose(check["observation.environment_state"], inputs_keypoints[:4], atol=1e-4)
    assert torch.allclose(check["observation.state"], inputs_state[:4], atol=1e-4)

    policy.train()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.steps)
    padding = torch.zeros(args.batch, 1, dtype=torch.bool)
    generator = torch.Generator().manual_seed(args.seed)
    started, losses = time.perf_counter(), []
    for step in range(args.steps):
        index = torch.randint(0, len(state), (args.batch,), generator=generator)
        loss, _ = policy.forward({"observation.state": inputs_state[index],
                                  "observation.environment_state": inputs_keypoints[index],
                                  "action": targets[index], "action_is_pad": padding})
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 10.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if (step + 1) % 500 == 0:
            print(f"training: step {step + 1}/{args.steps}, L1 {np.mean(losses[-500:]):.4f}", file=sys.stderr,
                  flush=True)
    policy.eval()
    out.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(out)
    preprocessor.save_pretrained(out)
    postprocessor.save_pretrained(out)
    return {"final_l1": round(float(np.mean(losses[-200:])), 4), "train_s": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--demos", type=int, default=600)
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="evalfleet's runners for the demonstrations (the episodes do not depend on it)")
    args = parser.parse_args()
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    played = record_demonstrations(args.out / "demonstrations", args.workers)
    data = demonstrations(args.out / "demonstrations", args.demos)
    demo_s = time.perf_counter() - started
    print(f"demonstrations: {args.demos} of {played['successes']} successes in {played['episodes_played']} "
          f"episodes, {len(data['state'])} frames ({demo_s:.0f} s)", file=sys.stderr, flush=True)
    figures = train(data, args.out, args)
    (args.out / "training.json").write_text(json.dumps({
        "recipe": {k: v for k, v in vars(args).items() if k not in ("out", "workers")},
        "experiment": EXPERIMENT.name, **played, "demonstrations": args.demos,
        "last_plan_episode": int(data["plan_episodes"][-1]), "frames": len(data["state"]),
        "demo_s": round(demo_s, 1), **figures, "task": TASK}, indent=1) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
