"""How evalfleet starts a Python of its own: never with the current folder on `sys.path`.

`python -m evalfleet.cli ...` puts the folder it runs in first on `sys.path`, so a folder there named like
a module the process imports (the one an Experiment's `import:` names, or evalfleet itself) would be
run from that folder. Every command evalfleet builds for its own interpreter (runners, servers started
with this Python) begins with `python_command()`: `-P` on Python 3.11+ (what PYTHONSAFEPATH=1 does,
without passing the setting on to what that process starts). `drop_working_folder()` does the same
for a process that already runs: a runner forked from `python -m evalfleet.cli run`, or one on 3.10.
PYTHONPATH is the way to name a folder on purpose: its entries stay.
"""

from __future__ import annotations

import os
import sys

SAFE_PATH_FLAGS: tuple[str, ...] = ("-P",) if sys.version_info >= (3, 11) else ()


def python_command(python: str | None = None) -> list[str]:
    """The start of a command line running this interpreter without the current folder on its `sys.path`
    (another `python`, whose version is unknown here, gets no flag: its runner drops the folder itself)."""
    executable = python or sys.executable
    return [executable, *(SAFE_PATH_FLAGS if executable == sys.executable else ())]


def drop_working_folder() -> None:
    """Remove the entry Python put first on `sys.path` for the folder the process started in (`''` or
    that folder), unless it is there on purpose (in PYTHONPATH) or the process runs with `-P`."""
    if getattr(sys.flags, "safe_path", False) or not sys.path:
        return
    first = sys.path[0]
    if first not in ("", os.getcwd()):
        return  # a script's folder (the `evalfleet` console script's bin/), not the working folder
    explicit = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    if os.path.abspath(first or os.curdir) not in explicit:
        del sys.path[0]
