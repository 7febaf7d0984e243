"""evalfleet: evaluate robot-manipulation policies in simulation at scale.

    import evalfleet
    result = evalfleet.run("examples/quickstart.yaml", overrides=["shared.rollout_limit.num_episodes=5"])
    result = evalfleet.evaluate(my_policy, "examples/quickstart.yaml")   # an in-process policy

Both return an `ExperimentResult` (per-Run counts, success rates with 95% intervals, statuses, paths).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# The API is imported on first use, so `import evalfleet.<module>` (every runner process) stays light.
_API = {
    "run": "evalfleet.execution.api",  # execution.pipeline.run, every argument checked first
    "evaluate": "evalfleet.execution.in_process",
    "ExperimentResult": "evalfleet.outputs.result",
    "RunResult": "evalfleet.outputs.result",
    "UserError": "evalfleet.errors",
}
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'evalfleet' has no attribute {name!r}")
