"""Backends: one package each (`local`, `ray`, `slurm`, `osmo`), registering its spec in its `__init__`
(evalfleet/backend_registry.py): its factory, its settings under its own override root, what it supports. The
pipeline (execution/) drives them through the protocol in execution/backends.py and never names one."""
