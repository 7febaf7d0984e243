"""`lerobot`: a LeRobot checkpoint folder, served from LeRobot's own environment.

    policy: {type: lerobot, path: ckpt/, device: cpu}    # + python: <venv or interpreter> | self, image: ...

The runner talks openpi to `evalfleet serve lerobot_local --protocol openpi`, which the `lerobot` server
binding starts with the interpreter of LeRobot's Python 3.12 venv (scripts/lerobot-env.sh; `python:`
names another, `python: self` uses evalfleet's own). The server keeps one policy state per connection (one
per env) and resets it at each episode start; what it serves (policies/lerobot_local.py) declares the
checkpoint's features as its spec, and its provenance (config and weights hashes) goes into every record.
`plan` reads the same spec from the checkpoint's config.json, without lerobot.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from evalfleet.errors import UserError
from evalfleet.policies.base import POLICIES, PolicyContext, PolicySpec
from evalfleet.policies.lerobot_local import LerobotLocalOptions
from evalfleet.serving.bindings import (
    ServerBinding,
    evalfleet_resources,
    evalfleet_serve_command,
    evalfleet_server_options,
    register_binding,
)
from evalfleet.serving.common import validate_options
from evalfleet.serving.openpi import OpenpiRemoteOptions, OpenpiRemotePolicy


class LerobotOptions(OpenpiRemoteOptions):
    path: str = Field(description="a LeRobot save_pretrained folder")
    device: str = Field("cpu", pattern=r"^(cpu|cuda(:\d+)?|mps|auto)$")
    cameras: dict[str, str] = Field(default_factory=dict, description="LeRobot image key -> evalfleet camera")
    threads: int | Literal["auto"] = Field("auto", description="the server's torch CPU threads (auto: every core it "
                                                               "may use)")

    _positive_threads = field_validator("threads")(LerobotLocalOptions._positive.__func__)


class LerobotRemotePolicy(OpenpiRemotePolicy):
    @property
    def provenance(self) -> dict[str, Any] | None:
        return self.server_metadata.get("provenance")


def _spec(options: Any, context: PolicyContext | None) -> PolicySpec | None:
    from evalfleet.policies.lerobot_local import _spec_of

    opts = validate_options(LerobotOptions, options)
    return _spec_of(LerobotLocalOptions(path=opts.path, device=opts.device, cameras=opts.cameras), context)


@POLICIES.register(
    "lerobot",
    options=LerobotOptions,
    info={"spec": _spec, "declares_at_connect": "the checkpoint's config features, via the server's metadata"},
    summary="a LeRobot checkpoint folder, served from LeRobot's own Python 3.12 venv (scripts/lerobot-env.sh)",
)
def make_lerobot(options: Any, context: Any = None) -> LerobotRemotePolicy:
    return LerobotRemotePolicy(validate_options(LerobotOptions, options))


# The server binding of `lerobot`: LeRobot's venv serving the checkpoint over openpi.

LEROBOT_VERSION = "0.6.1"
IN_THIS_PYTHON = "self"  # `python: self` serves a LeRobot checkpoint with evalfleet's own interpreter


def lerobot_venv() -> Path:
    """Where scripts/lerobot-env.sh builds LeRobot's Python 3.12 environment (outside any clone)."""
    override = os.environ.get("EVALFLEET_LEROBOT_VENV")
    if override:
        return Path(override).expanduser()
    cache = Path(os.environ.get("EVALFLEET_CACHE", Path.home() / ".cache" / "evalfleet")).expanduser()
    return cache / "venvs" / f"lerobot-{LEROBOT_VERSION}"


def _lerobot_serve(options: dict[str, Any]) -> dict[str, Any]:
    """The `evalfleet serve` options of a `lerobot` Run: the checkpoint run by `lerobot_local`, in LeRobot's venv."""
    if not options.get("path"):
        raise UserError("needs `path`: a LeRobot checkpoint folder (what save_pretrained wrote)", key="policy.path")
    serve = {"type": "lerobot_local", "path": str(Path(str(options["path"])).expanduser().absolute()),
             "device": options.get("device", "cpu")}
    if options.get("cameras"):
        serve["cameras"] = dict(options["cameras"])
    if options.get("threads") not in (None, "auto"):
        serve["threads"] = options["threads"]
    python = options.get("python") or str(lerobot_venv())
    return {**options, "serve": serve, "python": None if python == IN_THIS_PYTHON else python}


register_binding(ServerBinding(
    policy_type="lerobot",
    protocol="openpi",
    api_key_field="api_key",
    command_builder=lambda options, host, port, context: evalfleet_serve_command("openpi")(
        _lerobot_serve(options), host, port, context),
    server_options=lambda options: evalfleet_server_options(_lerobot_serve(options)),
    resources=evalfleet_resources,
    context_keys=("env_type", "action_dim"),
    summary="`evalfleet serve lerobot_local --protocol openpi` in LeRobot's venv (scripts/lerobot-env.sh)",
))
