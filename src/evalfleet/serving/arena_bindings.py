"""Arena's remote policy types, bound to the server commands Arena's own cluster tasks run: pi0/pi0.5 via
openpi's ``scripts/serve_policy.py``, Cosmos (openpi protocol) via
``cosmos_framework.scripts.action_policy_server_robolab`` and GR00T (ZMQ) via ``gr00t/eval/run_gr00t_server.py``.
They render in dry-runs; they cannot run here."""

from __future__ import annotations

from typing import Any, Callable

from evalfleet.errors import UserError
from evalfleet.serving.bindings import ServerBinding, ServerCommand, ServerResources, register_binding

OPENPI_SERVER_IMAGE = "nvcr.io/nvstaging/isaac-amr/isaaclab_arena:openpi_server"
COSMOS_SERVER_IMAGE = "nvcr.io/nvstaging/isaac-amr/isaaclab_arena:cosmos_server"
GR00T_SERVER_IMAGE = "nvcr.io/nvstaging/isaac-amr/gr00t_1_6_droid"

# Arena's pi0 `policy_variant` → openpi training config and checkpoint it serves.
PI0_VARIANTS = {
    "pi05": ("pi05_droid_jointpos_polaris", "gs://openpi-assets-simeval/pi05_droid_jointpos"),
    "pi0": ("pi0_droid_jointpos_polaris", "gs://openpi-assets-simeval/pi0_droid_jointpos"),
}
GPU_SERVER = ServerResources(gpus=1, cpus=8, memory_gb=64)


def _server_section(options: dict[str, Any]) -> dict[str, Any]:
    """evalfleet's optional `server:` mapping in an Arena policy's options overrides server defaults."""
    section = options.get("server") or {}
    if not isinstance(section, dict):
        raise UserError("must be a mapping of server settings", key="policy.server")
    return section


def _pi0_server_options(options: dict[str, Any]) -> dict[str, Any]:
    variant = options.get("policy_variant", "pi05")
    server = _server_section(options)
    if variant not in PI0_VARIANTS and not ("config" in server and "dir" in server):
        raise UserError(f"unknown policy_variant {variant!r} (known: {', '.join(PI0_VARIANTS)}), or give"
                        " server.config and server.dir", key="policy.policy_variant")
    config, directory = PI0_VARIANTS.get(variant, (None, None))
    return {"policy_variant": variant, "config": server.get("config", config), "dir": server.get("dir", directory),
            "image": server.get("image", OPENPI_SERVER_IMAGE)}


def _pi0_command(options: dict[str, Any], host: str, port: int, context: Any) -> ServerCommand:
    s = _pi0_server_options(options)
    return ServerCommand(
        argv=["uv", "run", "scripts/serve_policy.py", f"--port={port}", "policy:checkpoint",
              f"--policy.config={s['config']}", f"--policy.dir={s['dir']}"],
        env={"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"},
        cwd="/app",
        image=s["image"],
    )


def _cosmos_server_options(options: dict[str, Any]) -> dict[str, Any]:
    server = _server_section(options)
    return {"checkpoint": server.get("checkpoint", "/workspace/baked_checkpoint"),
            "image": server.get("image", COSMOS_SERVER_IMAGE)}


def _cosmos_command(options: dict[str, Any], host: str, port: int, context: Any) -> ServerCommand:
    s = _cosmos_server_options(options)
    return ServerCommand(
        argv=["python", "-m", "cosmos_framework.scripts.action_policy_server_robolab", "--checkpoint_path",
              s["checkpoint"], "--port", str(port), "--format-prompt-as-json", "True"],
        image=s["image"],
    )


def _gr00t_server_options(options: dict[str, Any]) -> dict[str, Any]:
    server = _server_section(options)
    return {"model_path": server.get("model_path", "/workspace/pretrained_ckpts/GR00T-N1.6-DROID"),
            "embodiment_tag": server.get("embodiment_tag", "OXE_DROID"),
            "image": server.get("image", GR00T_SERVER_IMAGE)}


def _gr00t_command(options: dict[str, Any], host: str, port: int, context: Any) -> ServerCommand:
    s = _gr00t_server_options(options)
    return ServerCommand(
        argv=["uv", "run", "python", "gr00t/eval/run_gr00t_server.py", f"--model_path={s['model_path']}",
              f"--embodiment_tag={s['embodiment_tag']}", f"--host={host}", f"--port={port}"],
        cwd="/workspace",
        image=s["image"],
    )


def _arena_binding(policy_type: str, short_name: str, protocol: str, summary: str,
                   command: Callable[[dict[str, Any], str, int, Any], ServerCommand],
                   server_options: Callable[[dict[str, Any]], dict[str, Any]], **more: Any) -> ServerBinding:
    """An Arena remote policy's binding: its client options `remote_host`/`remote_port`, a GPU server."""
    return register_binding(ServerBinding(
        policy_type=policy_type, protocol=protocol, host_field="remote_host", port_field="remote_port",
        command_builder=command, server_options=server_options, resources=lambda o: GPU_SERVER, summary=summary,
        **more), short_name)


_arena_binding("isaaclab_arena_openpi.policy.pi0_remote_policy.Pi0RemotePolicy", "pi0_remote", "openpi",
               "Arena pi0/pi0.5: openpi scripts/serve_policy.py policy:checkpoint", _pi0_command, _pi0_server_options)
_arena_binding("isaaclab_arena_cosmos.policy.cosmos_remote_policy.CosmosRemotePolicy", "cosmos_remote", "openpi",
               "Arena Cosmos: cosmos_framework action_policy_server_robolab (openpi protocol)", _cosmos_command,
               _cosmos_server_options)
_arena_binding("isaaclab_arena_gr00t.policy.gr00t_remote_closedloop_policy.Gr00tRemoteClosedloopPolicy",
               "gr00t_remote_closedloop", "gr00t", "Arena GR00T: gr00t/eval/run_gr00t_server.py (ZMQ)", _gr00t_command,
               _gr00t_server_options, api_key_field="remote_api_token")  # Arena's option name for the key
