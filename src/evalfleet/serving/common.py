"""Pieces every protocol shares: client errors, the loopback rule, building the policy a server serves (retry
timing: `reconnect`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from evalfleet.errors import InfrastructureError, UserError

DEFAULT_MAX_MESSAGE_MB = 64  # bounded: camera observations fit, a runaway peer does not


class RemotePolicyError(InfrastructureError):
    """The server answered, but with an error (its policy raised). The episode is `status: error`."""


class AuthenticationError(UserError):
    """The server refused our API key/token: a configuration problem, not a flaky server."""


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
