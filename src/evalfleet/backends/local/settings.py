"""`local.*`: the local backend's settings."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool


class LocalSettings(BaseModel):
    """`local.*`: worker processes on this machine, each under the watchdog."""

    model_config = ConfigDict(extra="forbid")

    fresh_runners: StrictBool = Field(default=False, description="every runner a new process (as after a restart), "
                                      "never forked from `evalfleet run` (same as EVALFLEET_FRESH_RUNNERS=1)")
