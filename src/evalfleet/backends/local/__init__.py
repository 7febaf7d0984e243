"""The local backend: every shard on N worker processes of this machine, each under the watchdog (`backend`)."""

from evalfleet.backend_registry import register_backend
from evalfleet.backends.local.settings import LocalSettings

register_backend("local", "evalfleet.backends.local.backend:LocalBackend", settings=LocalSettings,
                 summary="worker processes on this machine, each under the watchdog",
                 executes=True, submits=False, sequential_waves=True, served_policies=True,
                 gpus=True)  # this machine's own: its servers see the GPUs it has
