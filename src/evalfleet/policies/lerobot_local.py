"""`lerobot_local`: a LeRobot checkpoint folder (`save_pretrained` output) run in this process.

    policy: {type: lerobot_local, path: ckpt/, device: cpu}      # only where `import lerobot` works

Usually reached through `type: lerobot` (serving/lerobot.py), which serves this policy from LeRobot's own
Python 3.12 environment (scripts/lerobot-env.sh). The type is registered only where lerobot imports; the
spec and observation mapping below read the checkpoint's `config.json` as plain JSON and need no lerobot.

How evalfleet's observation maps in, decided by the checkpoint's `input_features`:
* `observation.images.<camera>` ← `observation/images/<camera>`; `observation.image` ← the environment's
  first camera (`observation/image`); `cameras: {<lerobot key>: <camera>}` overrides either;
* `observation.state` ← `observation/state`; `observation.environment_state` ← `observation/environment_state`
  where the environment gives one (Push-T's keypoints), else `observation/state`;
* `task` ← `prompt`, the instruction.
Images become float CHW in [0, 1] and the checkpoint's own processor pipeline (normalisation) runs, as in
`lerobot-eval`. Actions leave through its postprocessor (unnormalised, in the environment's units).

Policy state never crosses episodes: a policy that predicts from the current observation alone
(`n_obs_steps` 1, no temporal ensembling, e.g. ACT) returns its whole `n_action_steps` chunk from one
batched `predict_action_chunk` over every env that asks — there is no state to carry. Any other policy
(Diffusion's observation history) gets one instance per env_id, reset at every episode start, stepped with
`select_action`, with torch's RNG seeded from (episode seed, call) so sampling replays on rerun.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalfleet.errors import UserError
from evalfleet.policies.base import POLICIES, BasePolicy, PolicyContext, PolicySpec, cpu_threads
from evalfleet.policies.lerobot_config import CONFIG_FILE, read_config
WEIGHTS_FILE = "model.safetensors"
IMAGE_KEY, IMAGES_PREFIX = "observation.image", "observation.images."
STATE_KEYS = ("observation.state", "observation.environment_state")
STATE, ENVIRONMENT_STATE = "observation/state", "observation/environment_state"  # evalfleet's keys


class LerobotLocalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="a LeRobot save_pretrained folder (config.json, model.safetensors, processors)")
    device: str = Field("cpu", pattern=r"^(cpu|cuda(:\d+)?|mps|auto)$")
    cameras: dict[str, str] = Field(default_factory=dict, description="LeRobot image key -> evalfleet camera")
    threads: int | Literal["auto"] = Field(
        "auto", description="torch's CPU threads; auto: this host's cores divided among its runners (with more "
                            "threads than cores, small models run several times slower)")

    @field_validator("threads")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if value != "auto" and not 1 <= int(value) <= 1024:
            raise ValueError("threads must be auto or a whole number from 1 to 1024")
        return value


def _first_camera(context: PolicyContext | None) -> str | None:
    if context is None:
        return None
    from evalfleet.sim.base import environment_spec

    cameras = environment_spec(context.env_type, context.env_options).cameras
    return cameras[0] if cameras else None


def camera_map(config: dict[str, Any], overrides: dict[str, str], context: PolicyContext | None) -> dict[str, str]:
    """LeRobot image key -> evalfleet camera name ("" when it is the environment's unnamed first camera)."""
    out = {}
    for key, feature in config["input_features"].items():
        if feature.get("type") != "VISUAL":
            continue
        if key in overrides:
            out[key] = overrides[key]
        elif key.startswith(IMAGES_PREFIX):
            out[key] = key[len(IMAGES_PREFIX):]
        else:
            out[key] = _first_camera(context) or ""
    return out


def spec_from_config(config: dict[str, Any], cameras: dict[str, str], source: str) -> PolicySpec:
    """What the checkpoint needs: its action size, cameras and their (H, W), its state size."""
    features = config["input_features"]
    unknown = [k for k, f in features.items()
               if f.get("type") != "VISUAL" and k not in STATE_KEYS]
    if unknown:
        raise UserError(f"{source}: LeRobot input feature(s) {', '.join(unknown)} have no evalfleet counterpart"
                        f" (known: images, {', '.join(STATE_KEYS)}); give a checkpoint trained on those",
                        key="policy.path")
    action = (config.get("output_features") or {}).get("action") or {}
    state = features.get("observation.state") or {}
    named = {cam: tuple(features[key]["shape"][-2:]) for key, cam in cameras.items() if cam}
    unnamed = [key for key, cam in cameras.items() if not cam]
    return PolicySpec(
        source=source,
        action_dim=int(action["shape"][0]) if action.get("shape") else None,
        cameras=tuple(named), image_sizes={c: (int(h), int(w)) for c, (h, w) in named.items()},
        state_dim=int(state["shape"][0]) if state.get("shape") else None,
        keys=("observation/image",) if unnamed else (),
    )


def file_hash(path: Path) -> str | None:
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def provenance(path: str | Path, config: dict[str, Any]) -> dict[str, Any]:
    folder = Path(path).expanduser()
    return {"framework": "lerobot", "policy_type": config.get("type"), "path": str(folder.resolve()),
            "config_sha256": file_hash(folder / CONFIG_FILE), "weights_sha256": file_hash(folder / WEIGHTS_FILE),
            "lerobot_version": _lerobot_version()}


def _lerobot_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lerobot")
    except PackageNotFoundError:
        return None


class LerobotLocalPolicy(BasePolicy):
    def __init__(self, options: LerobotLocalOptions, context: PolicyContext | None):
        import torch
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        self.torch = torch
        self.path = str(Path(options.path).expanduser())
        self.config_json = read_config(self.path)
        self.cameras = camera_map(self.config_json, options.cameras, context)
        self.spec = spec_from_config(self.config_json, self.cameras, f"LeRobot {self.config_json['type']} checkpoint"
                                     f" {self.path} (config.json)")
        device = options.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu":
            torch.set_num_threads(cpu_threads() if options.threads == "auto" else int(options.threads))
        config = PreTrainedConfig.from_pretrained(self.path)
        config.device = device
        self.policy = get_policy_class(config.type).from_pretrained(self.path, config=config)
        self.policy.eval()
        self.config = self.policy.config
        self.preprocessor, self.postprocessor = make_pre_post_processors(
            config, pretrained_path=self.path, preprocessor_overrides={"device_processor": {"device": device}})
        self.n_action_steps = int(getattr(self.config, "n_action_steps", 1) or 1)
        self.chunked = (int(getattr(self.config, "n_obs_steps", 1) or 1) == 1
                        and getattr(self.config, "temporal_ensemble_coeff", None) is None
                        and hasattr(self.policy, "predict_action_chunk"))
        self._instances: dict[int, Any] = {}  # env_id -> its own policy (stepwise policies only)
        self._seeds: dict[int, int] = {}
        self._calls: dict[int, int] = {}
        self.provenance = provenance(self.path, self.config_json)
        self.metadata = {"provenance": self.provenance, "action_horizon": self.n_action_steps if self.chunked else 1}

    def declared_spec(self) -> PolicySpec:
        return self.spec

    # ---- episodes

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        self._seeds[env_id] = int(episode_seed)
        self._calls[env_id] = 0
        if not self.chunked:
            instance = self._instances.get(env_id)
            if instance is None:  # shares the weights; its queues are its own
                instance = self._instances[env_id] = copy.copy(self.policy)
            instance.reset()

    # ---- observations in, actions out

    def _frame(self, observation: dict[str, Any]) -> dict[str, Any]:
        torch = self.torch
        frame: dict[str, Any] = {}
        for key, camera in self.cameras.items():
            name = f"observation/images/{camera}" if camera else "observation/image"
            image = observation.get(name)
            if image is None and not camera:
                image = observation.get("observation/image")
            if image is None:
                raise ValueError(f"observation has no {name} for LeRobot input {key}")
            tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).to(torch.float32) / 255
            frame[key] = tensor.unsqueeze(0)
        for key in STATE_KEYS:
            if key in self.config_json["input_features"]:
                source = ENVIRONMENT_STATE if key == STATE_KEYS[1] and ENVIRONMENT_STATE in observation else STATE
                state = np.asarray(observation[source], dtype=np.float32).reshape(-1)
                frame[key] = torch.from_numpy(state).unsqueeze(0)
        frame["task"] = [str(observation.get("prompt", ""))]
        return frame

    def _batched(self, frames: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in frames[0]:
            values = [f[key] for f in frames]
            out[key] = sum(values, []) if key == "task" else self.torch.cat(values, dim=0)
        return out

    def _actions(self, action: Any) -> np.ndarray:
        return self.postprocessor(action).detach().to("cpu").numpy().astype(np.float32)

    def act(self, observation: dict[str, Any], env_id: int = 0) -> np.ndarray:
        return self.act_batch([observation], [env_id])[0]

    def act_batch(self, observations: list[dict[str, Any]], env_ids: list[int]) -> list[np.ndarray]:
        torch = self.torch
        with torch.inference_mode():
            if self.chunked:  # one forward pass for every env that asks; no state carried between calls
                batch = self.preprocessor(self._batched([self._frame(o) for o in observations]))
                chunk = self.policy.predict_action_chunk(batch)[:, : self.n_action_steps]
                return list(self._actions(chunk))
            out = []
            for observation, env_id in zip(observations, env_ids):
                if env_id not in self._instances:
                    self.reset(0, env_id)
                call = self._calls[env_id] = self._calls.get(env_id, 0) + 1
                torch.manual_seed((self._seeds.get(env_id, 0) * 1_000_003 + call) % 2**63)
                batch = self.preprocessor(self._frame(observation))
                out.append(self._actions(self._instances[env_id].select_action(batch))[0])
            return out


def _spec_of(options: Any, context: PolicyContext | None) -> PolicySpec | None:
    opts = options if isinstance(options, LerobotLocalOptions) else LerobotLocalOptions.model_validate(options or {})
    config = read_config(opts.path)
    return spec_from_config(config, camera_map(config, opts.cameras, context),
                            f"LeRobot {config['type']} checkpoint {opts.path} (config.json)")


if importlib.util.find_spec("lerobot") is not None:  # registered only where lerobot can be imported
    POLICIES.register(
        "lerobot_local", options=LerobotLocalOptions, info={"spec": _spec_of},
        summary="a LeRobot checkpoint folder run in this process (needs lerobot; see `lerobot` to serve it)",
    )(lambda options, context: LerobotLocalPolicy(
        options if isinstance(options, LerobotLocalOptions) else LerobotLocalOptions.model_validate(options or {}),
        context))
