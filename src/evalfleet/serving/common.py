"""Pieces shared by both protocols: client errors, retry timing, building the policy a server serves."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from evalfleet.errors import InfrastructureError, UserError

DEFAULT_MAX_MESSAGE_MB = 64  # bounded: camera observations fit, a runaway peer does not


class RemotePolicyError(InfrastructureError):
    """The server answered, but with an error (its policy raised). The episode is `status: error`."""


class AuthenticationError(UserError):
    """The server refused our API key/token: a configuration problem, not a flaky server."""


@dataclass
class Backoff:
    """Exponential backoff between reconnect attempts, never sleeping past `deadline`."""

    initial_s: float = 0.05
    factor: float = 2.0
    max_s: float = 2.0

    def __post_init__(self) -> None:
        self._next = self.initial_s

    def sleep(self, deadline: float) -> bool:
        """Sleep before the next attempt. False when the deadline leaves no time for one."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(self._next, remaining))
        self._next = min(self._next * self.factor, self.max_s)
        return time.monotonic() < deadline


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps a server on this machine: 127.0.0.0/8, ::1 or localhost. Anything else (0.0.0.0,
    a hostname, an interface address) is treated as reachable from other machines."""
    import ipaddress

    if host.strip().lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def validate_options(model: type[BaseModel], options: Any, *, key: str = "policy") -> BaseModel:
    if isinstance(options, model):
        return options
    if isinstance(options, BaseModel):
        options = options.model_dump()
    try:
        return model.model_validate(dict(options or {}))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ()))
        raise UserError(err.get("msg", str(exc)), key=f"{key}.{where}" if where else key) from None


def build_policy(type_name: str, options: dict[str, Any], context: Any) -> Any:
    """Instantiate a registered policy: look it up, validate its options, call its factory."""
    from evalfleet.policies.base import POLICIES

    entry = POLICIES.get(type_name)
    if entry is None:
        raise UserError(f"unknown policy type {type_name!r}{POLICIES.suggest(type_name)}", key="policy.type")
    opts: Any = dict(options)
    if entry.options is not None:
        opts = validate_options(entry.options, opts)
    return entry.factory(opts, context)
