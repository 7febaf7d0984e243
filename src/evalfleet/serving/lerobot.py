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

from typing import Any, Literal

from pydantic import Field, field_validator

from evalfleet.policies.base import POLICIES, PolicyContext, PolicySpec
from evalfleet.policies.lerobot_local import LerobotLocalOptions
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
