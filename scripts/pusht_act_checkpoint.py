"""Train a small LeRobot ACT policy on Push-T from scripted demonstrations, on the CPU, and save it as a LeRobot
checkpoint folder that both `lerobot-eval` and evalfleet load. Runs in LeRobot's venv; usually called through
scripts/pusht-checkpoint.sh, which caches the result.

    <lerobot venv>/bin/python scripts/pusht_act_checkpoint.py OUT [--demos 600] [--steps 6000]

1. Demonstrations: evalfleet's Push-T planner (evalfleet/policies/pusht_planner.py) plays gym-pusht with
   `obs_type=environment_state_agent_pos` (the T's 16 keypoint values and the agent's position) from seeds
   1,000,000 and up — far from the seeds evaluations use. Gaussian noise is added to the executed action but
   never to the recorded one, so the data shows how the planner recovers from small errors (DART); only
   successful episodes are kept.
2. Policy: LeRobot's ACT without images or VAE, one action per call (`chunk_size` 1: the planner is a function of
   the current observation, so there is nothing to chunk). It predicts the target relative to the agent's
   position through LeRobot's own RelativeActionsProcessorStep / AbsoluteActionsProcessorStep, saved in the
   checkpoint's processor files, so any LeRobot loader turns it back into an absolute target; the keypoints
   are normalised like the state (ACT's default leaves an ENV feature unnormalised).
3. Training: AdamW, cosine schedule, L1 on the normalised relative action, batches drawn from tensors in memory.

What it reaches is written to OUT/training.json (demonstrations, frames, loss, seconds); its success rate is
measured by bench/lerobot_side_by_side.py through both tools.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

TASK = "push the T-shaped block onto the T-shaped target"
FIRST_DEMO_SEED = 1_000_000


def demonstrations(count: int, noise: float, seed: int) -> dict[str, np.ndarray]:
    import gym_pusht  # noqa: F401 - registers the id
    import gymnasium

    from evalfleet.policies.pusht_planner import PushTPlanner, pose_from_keypoints

    env = gymnasium.make("gym_pusht/PushT-v0", obs_type="environment_state_agent_pos", max_episode_steps=300)
    planner = PushTPlanner()
    rng = np.random.default_rng(seed)
    states, keypoints, actions = [], [], []
    kept = tried = 0
    while kept < count:
        obs, info = env.reset(seed=FIRST_DEMO_SEED + tried)
        tried += 1
        episode = []
        for _ in range(300):
            xy, angle = pose_from_keypoints(obs["environment_state"])
            action = planner.target(obs["agent_pos"], xy, angle)
            episode.append((obs["agent_pos"], obs["environment_state"], action))
            executed = np.clip(action + rng.normal(0.0, noise, 2), 0.0, 512.0)
            obs, _, terminated, truncated, info = env.step(executed)
            if terminated or truncated:
                break
        if not info["is_success"]:
            continue
        kept += 1
        for state, keys, action in episode:
            states.append(state)
            keypoints.append(keys)
            actions.append(action)
        if kept % 50 == 0:
            print(f"demonstrations: {kept}/{count} ({tried} played)", file=sys.stderr, flush=True)
    env.close()
    return {"state": np.asarray(states, np.float32), "keypoints": np.asarray(keypoints, np.float32),
            "action": np.asarray(actions, np.float32), "played": np.asarray(tried)}


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
    parser.add_argument("--noise", type=float, default=5.0, help="px of noise on the executed action (DART)")
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    started = time.perf_counter()
    data = demonstrations(args.demos, args.noise, args.seed)
    demo_s = time.perf_counter() - started
    figures = train(data, args.out, args)
    (args.out / "training.json").write_text(json.dumps({
        "recipe": {k: v for k, v in vars(args).items() if k != "out"},
        "demonstrations": args.demos, "episodes_played": int(data["played"]), "frames": len(data["state"]),
        "demo_s": round(demo_s, 1), **figures, "task": TASK}, indent=1) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
