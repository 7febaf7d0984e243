"""LIBERO's task lists, read without robosuite: suites, task names, instructions, BDDL paths, initial states.

Importing `libero` reads a path configuration from `$LIBERO_CONFIG_PATH/config.yaml` (the original
LIBERO asks on stdin when that file is missing; a user-wide file may point at other assets). Unless the
user set the variable, it is pointed at an empty temporary folder before the first import, so the
installed package's own assets and initial states are used and nothing prompts, downloads or writes.
LIBERO's benchmark module prints a line per suite it builds; that goes to a discarded buffer.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

CONFIG_ENV = "LIBERO_CONFIG_PATH"
# evalfleet camera name → the MuJoCo camera in every LIBERO scene.
CAMERAS = {"agentview": "agentview", "eye_in_hand": "robot0_eye_in_hand"}


def configure_libero() -> None:
    """Point LIBERO at a private, empty config folder (once per process, unless the user chose one)."""
    if os.environ.get(CONFIG_ENV):
        return
    folder = tempfile.mkdtemp(prefix="evalfleet-libero-config-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ[CONFIG_ENV] = folder


def libero_installed() -> bool:
    from importlib.util import find_spec

    try:
        return find_spec("libero") is not None and find_spec("libero.libero") is not None
    except ModuleNotFoundError:
        return False


@functools.lru_cache(maxsize=None)
def load_suite(suite: str) -> Any:
    configure_libero()
    with contextlib.redirect_stdout(io.StringIO()):
        from libero.libero import benchmark

        return benchmark.get_benchmark_dict()[suite]()


@dataclass(frozen=True)
class LiberoTask:
    suite: str
    index: int
    name: str
    instruction: str
    bddl_file: str


def task_names(suite: str) -> list[str]:
    return list(load_suite(suite).get_task_names())


def task_index(suite: str, task: int | str) -> int:
    """The task's index in its suite; a name that is not there is a ValueError listing the names."""
    names = task_names(suite)
    if isinstance(task, int):
        if not 0 <= task < len(names):
            raise ValueError(f"task index {task} is out of range: {suite} has tasks 0..{len(names) - 1}")
        return task
    if task in names:
        return names.index(task)
    import difflib

    close = difflib.get_close_matches(task, names, n=2, cutoff=0.5)
    raise ValueError(f"{suite} has no task {task!r}; "
                     + (f"did you mean {' or '.join(close)}?" if close else f"tasks: {', '.join(names)}"))


def get_task(suite: str, task: int | str) -> LiberoTask:
    index = task_index(suite, task)
    bench = load_suite(suite)
    entry = bench.get_task(index)
    return LiberoTask(suite, index, entry.name, entry.language, bench.get_task_bddl_file_path(index))


def init_states(suite: str, index: int) -> np.ndarray:
    """The task's fixed initial states (50 flattened MuJoCo states: time, qpos, qvel)."""
    return np.asarray(load_suite(suite).get_task_init_states(index), dtype=np.float64)
