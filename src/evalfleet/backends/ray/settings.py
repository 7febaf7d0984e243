"""`ray.*`: the Ray backend's settings."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalfleet.backends.setting_checks import not_bool, one_line


class RaySettings(BaseModel):
    """`ray.*`: where the Ray cluster is, and the size of a local instance started when there is none."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(default=None, description="`run`: the cluster (HOST:6379, auto, ray://...); "
                                "`submit`: its Jobs API (http://HEAD:8265); null: a local instance (= --ray-address)")
    object_store_mb: int = Field(default=256, ge=64, le=1024 * 1024, description="object store of a local "
                                 "instance, in MB (records flow through actor calls: a small one is plenty)")

    @field_validator("address")
    @classmethod
    def address_line(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must not be empty (leave it out for a local instance)")
        return one_line(v, "an address")

    @field_validator("object_store_mb", mode="before")
    @classmethod
    def number(cls, v: Any) -> Any:
        return not_bool(v)
