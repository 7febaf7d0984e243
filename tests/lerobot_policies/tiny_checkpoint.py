"""Make a tiny, randomly initialised LeRobot checkpoint folder (no downloads). Runs in the LeRobot venv
(`<venv>/bin/python tests/lerobot_policies/tiny_checkpoint.py ARGS`), e.g. with ARGS:

    act OUT --state-dim 2 --action-dim 2 --image top=96
    diffusion OUT --state-dim 39 --action-dim 4 --image corner=32

`--image CAMERA=SIZE` adds `observation.image` (first camera) or `observation.images.<camera>` (others);
`--action-mean/--action-std` set the normalisation stats of the action (Push-T: pixels around 256).
The weights depend only on `--seed`, so two calls make byte-identical weights.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=("act", "diffusion"))
    p.add_argument("out")
    p.add_argument("--state-dim", type=int, required=True)
    p.add_argument("--action-dim", type=int, required=True)
    p.add_argument("--image", action="append", default=[], metavar="CAMERA=SIZE")
    p.add_argument("--action-mean", type=float, default=0.0)
    p.add_argument("--action-std", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(args.seed)
    inputs = {"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(args.state_dim,))}
    stats: dict[str, dict[str, torch.Tensor]] = {
        "observation.state": {"mean": torch.full((args.state_dim,), args.action_mean),
                              "std": torch.full((args.state_dim,), max(args.action_std, 1e-3)),
                              "min": torch.full((args.state_dim,), args.action_mean - 2 * args.action_std),
                              "max": torch.full((args.state_dim,), args.action_mean + 2 * args.action_std)},
        "action": {"mean": torch.full((args.action_dim,), args.action_mean),
                   "std": torch.full((args.action_dim,), args.action_std),
                   "min": torch.full((args.action_dim,), args.action_mean - 2 * args.action_std),
                   "max": torch.full((args.action_dim,), args.action_mean + 2 * args.action_std)},
    }
    for i, spec in enumerate(args.image):
        camera, _, size = spec.partition("=")
        key = "observation.image" if i == 0 else f"observation.images.{camera}"
        inputs[key] = PolicyFeature(type=FeatureType.VISUAL, shape=(3, int(size), int(size)))
        stats[key] = {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25),
                      "min": torch.zeros((3, 1, 1)), "max": torch.ones((3, 1, 1))}
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(args.action_dim,))}

    if args.kind == "act":
        from lerobot.policies.act.configuration_act import ACTConfig
        from lerobot.policies.act.modeling_act import ACTPolicy

        config = ACTConfig(input_features=inputs, output_features=outputs, device="cpu", chunk_size=10,
                           n_action_steps=10, dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1,
                           n_decoder_layers=1, use_vae=False, pretrained_backbone_weights=None)
        policy = ACTPolicy(config)
    else:
        from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
        from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy

        size = int(args.image[0].partition("=")[2]) if args.image else 32
        config = DiffusionConfig(input_features=inputs, output_features=outputs, device="cpu", n_obs_steps=2,
                                 horizon=8, n_action_steps=4, down_dims=(16, 32), kernel_size=3, n_groups=4,
                                 diffusion_step_embed_dim=16, spatial_softmax_num_keypoints=4,
                                 crop_shape=(size - 4, size - 4), num_inference_steps=3,
                                 pretrained_backbone_weights=None, use_group_norm=True)
        policy = DiffusionPolicy(config)
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=stats)
    out = Path(args.out)
    policy.save_pretrained(out)
    preprocessor.save_pretrained(out)
    postprocessor.save_pretrained(out)
    print(out)


if __name__ == "__main__":
    main()
