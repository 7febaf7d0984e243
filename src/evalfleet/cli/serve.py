"""`evalfleet serve POLICY [KEY=VALUE ...] --protocol PROTOCOL`: serve any registered policy over any registered wire
protocol (openpi, gr00t, vla-eval, a plug-in's)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any

from evalfleet.errors import UserError

API_KEY_ENV = "EVALFLEET_SERVE_API_KEY"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve a policy over a registered wire protocol (openpi, GR00T, vla-eval or a plug-in's)",
        description="Serve any registered policy. KEY=VALUE pairs are the policy's options (values are "
        "YAML: 3, true, [1, 2], {a: 1}) and come right after POLICY; dotted keys nest. "
        "Prints 'serving PROTOCOL on HOST:PORT' once "
        "it listens; SIGTERM or Ctrl-C stops it.",
    )
    p.add_argument("policy", help="registered policy type, e.g. zero, metaworld_expert")
    p.add_argument("options", nargs="*", metavar="KEY=VALUE", help="policy options")
    p.add_argument("--options-json", default=None, metavar="JSON",
                   help="policy options as one JSON map (KEY=VALUE pairs are applied on top)")
    # Checked against serving.protocols.PROTOCOLS once the registries are loaded (a plug-in's protocol too), so
    # that building the parser imports no protocol.
    p.add_argument("--protocol", required=True, help="a registered wire protocol (built in: openpi, gr00t, "
                   "vla-eval; a plug-in may add its own)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1, loopback only; any other needs a key or"
                   " --allow-unauthenticated)")
    p.add_argument("--port", type=int, default=0, help="port (default 0: a free one, printed)")
    p.add_argument("--api-key", default=None, help=f"require this key (or set ${API_KEY_ENV})")
    p.add_argument("--api-key-env", default=None, metavar="NAME",
                   help="require the key held by environment variable NAME (keeps it off the command line)")
    p.add_argument("--allow-unauthenticated", action="store_true",
                   help="serve on a non-loopback --host without a key: anyone who reaches the port may use the"
                   " policy (a warning is printed)")
    p.add_argument("--max-batch", type=int, default=1, help="largest act_batch (default 1: no batching)")
    p.add_argument("--max-wait-ms", type=float, default=0.0, help="longest a request waits for a batch to fill")
    p.add_argument("--max-message-mb", type=float, default=64.0, help="largest accepted message (default 64)")
    p.add_argument("--task", default="", help="the task the policy is for, e.g. pick-place-v3")
    p.add_argument("--run", default="serve", help="run name given to the policy's context")
    p.add_argument("--env-type", default="metaworld", help="environment type given to the policy's context")
    p.add_argument("--env-options", default="{}", help="environment options (JSON/YAML map)")
    p.add_argument("--action-dim", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--import", dest="imports", action="append", default=[], metavar="MODULE",
        help="import MODULE first (it may register more policies); repeatable",
    )
    p.set_defaults(handler=serve_command)


def parse_key_values(pairs: list[str], *, where: str = "command line") -> dict[str, Any]:
    import yaml

    options: dict[str, Any] = {}
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UserError(f"expected KEY=VALUE, got {pair!r}", where=where)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise UserError(f"value of {key} is not valid YAML: {exc}", where=where, key=key) from None
        node = options
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UserError(f"{part} is both a value and a mapping", where=where, key=key)
            node = child
        node[parts[-1]] = value
    return options


def serve_command(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import signal

    import yaml

    import evalfleet.serving  # noqa: F401 - registers the remote-client policies
    from evalfleet.plugins import load_registries
    from evalfleet.policies.base import PolicyContext, policy_spec
    from evalfleet.serving.common import build_policy
    from evalfleet.serving.protocols import PROTOCOLS
    from evalfleet.serving.process import server_for

    api_key = serve_api_key(args)  # before any import or model load: a bad key is refused at once
    check_bind(args.host, api_key, allow_unauthenticated=args.allow_unauthenticated)
    for module in args.imports:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UserError(f"cannot import {module}: {exc}", where="command line", key="--import") from None
    load_registries()
    if PROTOCOLS.get(args.protocol) is None:
        raise UserError(f"unknown protocol {args.protocol!r}{PROTOCOLS.suggest(args.protocol)}", where="command line",
                        key="--protocol")
    if not 0 <= args.port <= 65535:
        raise UserError("--port must be between 0 and 65535", where="command line", key="--port")
    if args.max_batch < 1 or args.max_wait_ms < 0 or args.max_message_mb <= 0:
        raise UserError("--max-batch must be >= 1, --max-wait-ms >= 0, --max-message-mb > 0", where="command line")
    try:
        env_options = yaml.safe_load(args.env_options) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"--env-options is not YAML: {exc}", where="command line") from None
    if not isinstance(env_options, dict):
        raise UserError("--env-options must be a mapping", where="command line", key="--env-options")
    options: dict[str, Any] = {}
    if args.options_json:
        try:
            options = json.loads(args.options_json)
        except json.JSONDecodeError as exc:
            raise UserError(f"--options-json is not JSON: {exc}", where="command line") from None
        if not isinstance(options, dict):
            raise UserError("--options-json must be a JSON object", where="command line")
    _merge(options, parse_key_values(args.options))
    context = PolicyContext(
        run=args.run, task=args.task, env_type=args.env_type, env_options=env_options,
        action_dim=args.action_dim, seed=args.seed,
    )
    policy = build_policy(args.policy, options, context)
    spec = policy_spec(policy, args.policy, options, context)  # each protocol announces it its own way

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = server_for(
        args.protocol, policy, host=args.host, port=args.port, api_key=api_key,
        max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
        max_message_bytes=int(args.max_message_mb * 2**20), spec=spec,
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        def ready(host: str, port: int) -> None:
            print(f"serving {args.protocol} on {host}:{port}", flush=True)
            print(json.dumps({"policy": args.policy, "options": masked(options), "task": args.task,
                              "max_batch": args.max_batch, "max_wait_ms": args.max_wait_ms,
                              "api_key": bool(api_key)}, default=str), flush=True)

        await server.serve(stop, ready)

    try:
        asyncio.run(main())
    except OSError as exc:
        print(f"evalfleet serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    finally:
        close = getattr(policy, "close", None)
        if close is not None:
            close()
    print(f"stopped serving on {args.host}:{server.bound_port}", flush=True)
    return 0


def serve_api_key(args: argparse.Namespace) -> str | None:
    """The key clients must send: `--api-key`, else $EVALFLEET_SERVE_API_KEY, else the variable `--api-key-env`
    names. A key given but empty is refused: it would silently serve without authentication."""
    from evalfleet.secrets import resolve

    if args.api_key is not None:
        if not args.api_key:
            raise UserError("--api-key is empty: give the key, or leave the flag out", where="command line",
                            key="--api-key")
        return args.api_key
    if API_KEY_ENV in os.environ:
        if not os.environ[API_KEY_ENV]:
            raise UserError("is set but empty: put the key in it, or unset it", where="environment",
                            key=API_KEY_ENV)
        return os.environ[API_KEY_ENV]
    return resolve(None, args.api_key_env, key="--api-key")


def check_bind(host: str, api_key: str | None, *, allow_unauthenticated: bool) -> None:
    """A server reachable from other machines needs a key, or the explicit flag (and then says so loudly)."""
    from evalfleet.serving.common import is_loopback

    if api_key or is_loopback(host):
        return
    if not allow_unauthenticated:
        raise UserError(f"--host {host} is reachable from other machines and no key is set: give --api-key-env NAME"
                        f" (or ${API_KEY_ENV}), bind 127.0.0.1, or pass --allow-unauthenticated",
                        where="command line", key="--host")
    print(f"WARNING: evalfleet serve: serving on {host} WITHOUT AUTHENTICATION (--allow-unauthenticated): anyone"
          " who can reach this port can use the policy", file=sys.stderr, flush=True)


def masked(node: Any, key: str = "") -> Any:
    """Options as a printed line may show them: secret-looking keys as ***, URLs without credentials."""
    from evalfleet.secrets import mask_value

    if isinstance(node, dict):
        return {k: masked(v, str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [masked(v, key) for v in node]
    return mask_value(key, node) if key else node


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
