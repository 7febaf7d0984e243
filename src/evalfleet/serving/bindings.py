"""Server bindings: for each policy type that lives behind a server, how that server starts.

A `ServerBinding` says, for one client policy type:

* `protocol` (a name in `serving.protocols.PROTOCOLS`: ``openpi`` | ``gr00t`` | ``vla-eval``) and
  `default_port` (the protocol's unless given);
* `command(options, host, port, context)` → a `ServerCommand` (argv, env, cwd, container image) that
  starts the server; placeholders are already filled in, so a backend runs it as-is (local subprocess via
  `ServerProcess`) or renders it into a cluster task (OSMO/Ray dry-runs);
* `resources(options)` → `ServerResources` (gpus, cpus, memory) the server needs;
* client wiring: `host_field`/`port_field` (and `api_key_field`) name the client options the backend sets
  so the client finds its server — `wire_client(options, host, port)` returns the wired copy;
* `server_options(options)`: the part of a Run's policy options that determines the server. Runs whose
  server options are identical can share one server (`server_sharing: per_policy`); `check(uses)`
  raises a UserError naming the Runs and the key when Runs meant to share a server disagree.
  `server_identity(options, context)` is the key a backend groups Runs by.

evalfleet's own remote types, `openpi_remote`, `gr00t_remote` and `vlaeval_remote`, serve any registered
policy with ``evalfleet serve``; `vlaeval_remote` with `vla_eval_config` starts one of vla-eval's model
servers with ``vla-eval serve --config``. The served policy is given inside the client's options under `serve`::

    policy:
      type: openpi_remote          # the client the runner uses
      serve:                       # what the server runs: a registered policy and its options
        type: metaworld_vision
        checkpoint: weights.npz
      batching: {max_batch: 8, max_wait_ms: 5}   # server side
      request_timeout_s: 30                      # client side; host/port are filled in by the backend

Without `serve` the client talks to a server someone else started (`host`, `port`) and no binding
applies (`needs_server` is false). The server gets the Run's context (task, env type, action dim) on
its command line; Runs sharing one server must agree on env type and action dim, and a policy served to
several tasks reads the task from the observation's `prompt`.

Arena's remote policy types are bound too (by their dotted class names and short names), with the
server commands Arena's own cluster tasks run: pi0/pi0.5 via openpi's ``scripts/serve_policy.py``,
Cosmos (openpi protocol) via ``cosmos_framework.scripts.action_policy_server_robolab`` and GR00T (ZMQ)
via ``gr00t/eval/run_gr00t_server.py``. These render in dry-runs; they cannot run here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from evalfleet import shell as sh
from evalfleet.errors import UserError
from evalfleet.registry import Registry
from evalfleet.serving.common import is_loopback
from evalfleet.serving.protocols import wire_protocol


@dataclass(frozen=True)
class ServerResources:
    gpus: int = 0
    cpus: float = 1
    memory_gb: float = 2


@dataclass(frozen=True)
class ServerCommand:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    image: str | None = None  # container image for cluster backends; None: evalfleet's own image

    def shell(self, *, hide: tuple[str, ...] = ()) -> str:
        """One shell line (evalfleet.shell's quoting: no value is ever expanded). Env values named in `hide`
        are masked."""
        parts = []
        if self.cwd:
            parts.append(f"{sh.command('cd', '--', self.cwd)} &&")
        for key, value in self.env.items():
            parts.append(sh.assign(key, sh.Raw("***")) if key in hide else sh.assign(key, value))
        parts.append(sh.command(*self.argv))
        return " ".join(parts)


@dataclass(frozen=True)
class ServerUse:
    """One Run that uses a server: its name, its policy options and (optionally) its PolicyContext."""

    run: str
    options: dict[str, Any]
    context: Any = None


def _always(options: dict[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class ServerBinding:
    policy_type: str
    protocol: str  # a name in serving.protocols.PROTOCOLS
    command_builder: Callable[[dict[str, Any], str, int, Any], ServerCommand]
    server_options: Callable[[dict[str, Any]], dict[str, Any]]
    resources: Callable[[dict[str, Any]], ServerResources]
    host_field: str = "host"
    port_field: str = "port"
    api_key_field: str | None = None
    needs_server: Callable[[dict[str, Any]], bool] = _always
    summary: str = ""
    context_keys: tuple[str, ...] = ()  # PolicyContext fields the server depends on
    default_port: int = 0  # 0: the protocol's default port

    def __post_init__(self) -> None:
        if not self.default_port:
            object.__setattr__(self, "default_port", wire_protocol(self.protocol).default_port)

    def command(self, options: dict[str, Any], host: str = "127.0.0.1", port: int | None = None,
                context: Any = None) -> ServerCommand:
        return self.command_builder(dict(options), host, self.default_port if port is None else port, context)

    def wire_client(self, options: dict[str, Any], host: str, port: int) -> dict[str, Any]:
        wired = dict(options)
        wired[self.host_field] = host
        wired[self.port_field] = port
        return wired

    def api_key(self, options: dict[str, Any]) -> str | None:
        """The key a health check sends: given, or read from the variable `<field>_env` names."""
        if not self.api_key_field:
            return None
        from evalfleet.secrets import resolve

        return resolve(options.get(self.api_key_field), options.get(f"{self.api_key_field}_env"),
                       key=f"policy.{self.api_key_field}")

    def _identity(self, options: dict[str, Any], context: Any) -> dict[str, Any]:
        ident: dict[str, Any] = {"policy_type": self.policy_type, "server": self.server_options(options)}
        for key in self.context_keys:
            ident[key] = getattr(context, key, None) if context is not None else None
        return ident

    def server_identity(self, options: dict[str, Any], context: Any = None) -> str:
        """Canonical JSON: Runs with equal identities can share one server."""
        return json.dumps(self._identity(options, context), sort_keys=True, default=str)

    def check(self, uses: list[ServerUse]) -> None:
        """All `uses` are to share one server: their server-side settings must agree."""
        if len(uses) < 2:
            return
        first = uses[0]
        reference = self._identity(first.options, first.context)
        for use in uses[1:]:
            other = self._identity(use.options, use.context)
            if other != reference:
                key = _first_difference(reference, other)
                raise UserError(
                    f"Runs {first.run!r} and {use.run!r} share one {self.policy_type} server but differ in {key}"
                    f" ({_lookup(reference, key)!r} vs {_lookup(other, key)!r}); make them equal or use"
                    " server_sharing: per_run",
                    key=f"runs.{use.run}.policy",
                )


def _first_difference(a: Any, b: Any, prefix: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else str(key))
    return prefix or "(value)"


def _lookup(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(tree, dict):
            return None
        tree = tree.get(part)
    return tree


SERVER_BINDINGS: Registry[ServerBinding] = Registry("server binding")


def register_binding(binding: ServerBinding, *aliases: str) -> ServerBinding:
    for name in (binding.policy_type, *aliases):
        SERVER_BINDINGS.register(name, summary=binding.summary)(lambda b=binding: b)
    return binding


def binding_for(policy_type: str) -> ServerBinding | None:
    """The binding of a policy type, or None when that policy runs in the runner itself."""
    entry = SERVER_BINDINGS.get(policy_type)
    return entry.factory() if entry is not None else None


def needs_server(policy_type: str, options: dict[str, Any]) -> bool:
    binding = binding_for(policy_type)
    return binding is not None and binding.needs_server(options)


# ===================================================================== evalfleet's own


def interpreter(python: str) -> str:
    """`python:` names an interpreter, or a venv folder whose bin/python runs the server."""
    path = Path(python).expanduser()
    if path.is_dir() or not path.name.startswith("python"):
        path = path / "bin" / "python"
    return str(path)


def evalfleet_argv(python: str | None) -> list[str]:
    """How a server's `evalfleet` starts: this Python's (`evalfleet`, see ServerProcess) or another one's."""
    return ["evalfleet"] if not python else [interpreter(python), "-m", "evalfleet.cli"]


def evalfleet_serve_command(protocol: str) -> Callable[[dict[str, Any], str, int, Any], ServerCommand]:
    def build(options: dict[str, Any], host: str, port: int, context: Any) -> ServerCommand:
        spec = dict(options.get("serve") or {})
        served_type = spec.pop("type", None)
        if not served_type:
            raise UserError("`serve` needs a `type`: the registered policy the server runs", key="policy.serve.type")
        batching = dict(options.get("batching") or {})
        argv = [*evalfleet_argv(options.get("python")), "serve", str(served_type), "--protocol", protocol,
                "--host", host, "--port", str(port)]
        if spec:
            argv += ["--options-json", json.dumps(spec, sort_keys=True)]
        argv += ["--max-batch", str(batching.get("max_batch", 8)),
                 "--max-wait-ms", str(batching.get("max_wait_ms", 5.0))]
        if options.get("max_message_mb") is not None:
            argv += ["--max-message-mb", str(options["max_message_mb"])]
        if context is not None:
            argv += ["--run", str(context.run), "--task", str(context.task), "--env-type", str(context.env_type),
                     "--env-options", json.dumps(context.env_options or {}, sort_keys=True, default=str),
                     "--action-dim", str(context.action_dim), "--seed", str(context.seed)]
        env = {}
        if options.get("api_key"):
            env["EVALFLEET_SERVE_API_KEY"] = str(options["api_key"])  # not on the command line (ps)
        elif options.get("api_key_env"):  # the server reads the key where it runs; no value in any command
            argv += ["--api-key-env", str(options["api_key_env"])]
        elif not is_loopback(host):  # reachable from other machines (a cluster backend's server task)
            if options.get("allow_unauthenticated") is not True:
                raise UserError(f"this policy's server binds {host} (reachable from other machines) and no key is"
                                " set: give api_key_env: VARIABLE (the environment variable holding the key), or"
                                " allow_unauthenticated: true", key="policy.api_key_env")
            argv.append("--allow-unauthenticated")
        return ServerCommand(argv=argv, env=env, image=options.get("image"))

    return build


def evalfleet_server_options(options: dict[str, Any]) -> dict[str, Any]:
    return {
        "serve": options.get("serve"),
        "batching": options.get("batching") or {},
        "api_key": options.get("api_key"),
        "api_key_env": options.get("api_key_env"),
        "max_message_mb": options.get("max_message_mb"),
        "python": options.get("python"),
        "image": options.get("image"),
        "allow_unauthenticated": options.get("allow_unauthenticated"),
    }


def evalfleet_resources(options: dict[str, Any]) -> ServerResources:
    res = dict(options.get("server_resources") or {})
    return ServerResources(gpus=int(res.get("gpus", 0)), cpus=float(res.get("cpus", 1)),
                           memory_gb=float(res.get("memory_gb", 2)))


def register_served_protocol(protocol: str) -> ServerBinding:
    """The binding of a protocol's remote-client policy type with `serve:` (openpi_remote, gr00t_remote, a
    plug-in's): `evalfleet serve <serve.type> --protocol PROTOCOL`, started by the backend, the client wired to
    it. A protocol module (or a plug-in's) calls it right after `register_protocol`."""
    return register_binding(ServerBinding(
        policy_type=wire_protocol(protocol).client,
        protocol=protocol,
        api_key_field="api_key",
        command_builder=evalfleet_serve_command(protocol),
        server_options=evalfleet_server_options,
        resources=evalfleet_resources,
        needs_server=lambda options: bool(options.get("serve")),
        context_keys=("env_type", "action_dim"),
        summary=f"`evalfleet serve <serve.type> --protocol {protocol}`",
    ))


def server_process(binding: ServerBinding, options: dict[str, Any], context: Any, log_path: Any, *,
                   host: str = "127.0.0.1", port: int | None = None) -> Any:
    """A `ServerProcess` (not started) for this binding; the port is picked on `start()` when None."""
    from evalfleet.serving.process import ServerProcess, free_port

    port = free_port(host) if port is None else port
    command = binding.command(options, host, port, context)
    env = dict(command.env)
    if command.argv[1:3] == ["-m", "evalfleet.cli"] and command.argv[0] != "evalfleet":
        # A server in another interpreter (its own venv) runs this evalfleet's code, not its venv's snapshot.
        if not Path(command.argv[0]).exists():
            raise UserError(f"the server's interpreter {command.argv[0]} does not exist; build it (LeRobot's:"
                            " `bash scripts/lerobot-env.sh`) or set `python` to an interpreter or venv",
                            key="policy.python")
        env.setdefault("PYTHONPATH", os.pathsep.join(filter(None, [_source_root(), os.environ.get("PYTHONPATH")])))
    return ServerProcess(command.argv, protocol=binding.protocol, log_path=log_path, host=host, port=port,
                         env=env, cwd=command.cwd, api_key=binding.api_key(options),
                         name=f"{binding.policy_type} server")


def _source_root() -> str | None:
    """The folder evalfleet is imported from when that is a source checkout (not site-packages): put first
    on a foreign interpreter's path so its server speaks exactly this evalfleet's protocol."""
    import evalfleet

    root = Path(evalfleet.__file__).resolve().parent.parent
    return None if root.name in ("site-packages", "dist-packages") else str(root)
