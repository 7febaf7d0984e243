"""Evaluation during training: call `evalfleet.evaluate` on the policy you are training, every N steps.

The "training" here is a stand-in that anneals exploration noise on top of Meta-World's scripted experts,
so the success rate visibly climbs from one evaluation to the next. The policy lives in this process:
evalfleet serves it over its own openpi server on loopback (batched across the runner processes), runs the
Experiment's Runs against it, and stops everything it started before `evaluate` returns.

    python examples/evaluate_during_training.py [--steps 3] [--episodes 10] [--output-root outputs/training]
        [--track tensorboard|mlflow|wandb|trackio]

`--track SINK` logs each step's per-Run success rate and interval to that tracker (`step=` of `evaluate`),
so the curve forms in one tracker run: TensorBoard event files and MLflow's sqlite store under the output
root, W&B offline unless WANDB_MODE says otherwise, trackio in its own store (TRACKIO_DIR).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

import evalfleet

EXPERIMENT = Path(__file__).with_name("quickstart.yaml")
RUNS = ["push_expert", "pick_place_expert"]  # the Runs evaluated at every step


class NoisyExpert:
    """A policy with the evalfleet policy protocol: `reset(episode_seed, env_id)` and
    `act_batch(observations, env_ids)`. It picks Meta-World's expert from the task's instruction and adds
    noise seeded per episode, so two evaluations of the same weights give identical results."""

    name = "noisy_expert"

    def __init__(self, noise: float):
        import metaworld.policies as mw_policies

        from evalfleet.policies.builtin import expert_class_name
        from evalfleet.sim.metaworld_spec import TASK_INSTRUCTIONS

        self.noise = noise
        self.experts = {text: getattr(mw_policies, expert_class_name(task))()
                        for task, text in TASK_INSTRUCTIONS.items()
                        if hasattr(mw_policies, expert_class_name(task))}
        self.rngs: dict[int, np.random.Generator] = {}

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        self.rngs[env_id] = np.random.default_rng([episode_seed, 20261201])

    def act_batch(self, observations: list[dict], env_ids: list[int]) -> list[np.ndarray]:
        actions = []
        for obs, env_id in zip(observations, env_ids):
            action = self.experts[str(obs["prompt"])].get_action(obs["observation/state"])
            action = action + self.noise * self.rngs[env_id].normal(size=action.shape)
            actions.append(np.clip(action, -1.0, 1.0).astype(np.float32))
        return actions


def tracking_overrides(sink: str | None, output_root: Path) -> list[str]:
    """The Experiment's `tracking:` for one sink, its store under the output root (shared by every step)."""
    root = output_root.resolve()
    stores = {"tensorboard": [f"tracking.tensorboard.logdir={root / 'tensorboard'}"],
              "mlflow": [f"tracking.mlflow.tracking_uri=sqlite:///{root / 'mlflow.db'}",
                         f"tracking.mlflow.artifact_location={(root / 'mlflow-artifacts').as_uri()}"],
              "wandb": [f"tracking.wandb.dir={root}"] + ([] if os.environ.get("WANDB_MODE") else
                                                           ["tracking.wandb.mode=offline"]),
              "trackio": ["tracking.trackio.project=evaluate_during_training"]}
    return stores[sink] if sink else []


def train(steps: int, episodes: int, output_root: Path, workers: int | None = None,
          track: str | None = None) -> list[evalfleet.ExperimentResult]:
    results = []
    for step in range(steps):
        noise = 1.5 * (1 - step / max(steps - 1, 1))  # "training" lowers the noise
        policy = NoisyExpert(noise)
        result = evalfleet.evaluate(policy, EXPERIMENT, runs=RUNS, workers=workers,
                                    overrides=[f"shared.rollout_limit.num_episodes={episodes}",
                                               *tracking_overrides(track, output_root)],
                                    output=output_root / f"step-{step}", step=step)
        rates = ", ".join(f"{r.name} {r.rate_text()}" for r in result.runs.values())
        print(f"step {step} (noise {noise:.2f}): " + rates)
        results.append(result)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--output-root", type=Path, default=Path("outputs") / "training")
    parser.add_argument("--track", choices=["tensorboard", "mlflow", "wandb", "trackio"], default=None,
                        help="log the curve to this tracker (pip install 'evalfleet[tracking]')")
    args = parser.parse_args()
    train(args.steps, args.episodes, args.output_root, track=args.track)


if __name__ == "__main__":
    main()
