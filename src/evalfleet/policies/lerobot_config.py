"""Reading a LeRobot checkpoint's `config.json` as plain JSON (no lerobot), bounded and checked.

`read_config` reads it only if it is a regular file (a FIFO or device is refused without blocking), at most
`MAX_CONFIG_BYTES`, nested at most `MAX_CONFIG_DEPTH` deep, and checks the shapes evalfleet reads:
`type` a name, `input_features` (and `output_features`, when present) a mapping of name → {type, shape}
with `shape` a list of non-negative integers. Every problem is a UserError naming the file, the key
(`policy.path`; validation prefixes the Run) and the fix.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from evalfleet.errors import UserError

CONFIG_FILE = "config.json"
MAX_CONFIG_BYTES = 10 * 2**20  # LeRobot's configs are a few KB
MAX_CONFIG_DEPTH = 32  # theirs nest 4 deep
FIX = "give the folder LeRobot's save_pretrained wrote"


def read_config(path: str | Path, *, key: str = "policy.path") -> dict[str, Any]:
    folder = Path(path).expanduser()
    file = folder / CONFIG_FILE

    def refuse(problem: str) -> UserError:
        return UserError(f"{file}: {problem}; {FIX}", key=key)

    try:
        # Non-blocking: opening a FIFO must not wait for a writer. What is opened is what is checked (fstat).
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserError(f"{folder} is not a LeRobot checkpoint folder (no {CONFIG_FILE}); {FIX}", key=key) from None
    except OSError as exc:
        raise refuse(f"cannot be read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise refuse("is not a regular file (a FIFO, device or folder)")
        try:
            data = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise refuse(f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise refuse(f"is larger than {MAX_CONFIG_BYTES // 2**20} MB, far more than a LeRobot policy config")
    try:
        config = json.loads(data)
    except RecursionError:
        raise refuse(f"is nested deeper than {MAX_CONFIG_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise refuse(f"is not JSON ({exc})") from None
    if _depth(config) > MAX_CONFIG_DEPTH:
        raise refuse(f"is nested deeper than {MAX_CONFIG_DEPTH} levels")
    problem = config_problem(config)
    if problem:
        raise refuse(f"is not a LeRobot policy config: {problem}")
    return config


def _depth(value: Any) -> int:
    """How deep lists and objects nest (iterative: no recursion on hostile input)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_CONFIG_DEPTH:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


def config_problem(config: Any) -> str | None:
    """What is wrong with the parts of a config evalfleet reads, or None."""
    if not isinstance(config, dict):
        return f"expected a JSON object, got {_kind(config)}"
    if not isinstance(config.get("type"), str) or not config["type"]:
        return "`type` (the policy's name, e.g. act) is missing or not a string"
    if "input_features" not in config:
        return "`input_features` is missing"
    for section in ("input_features", "output_features"):
        if section == "output_features" and config.get(section) is None:
            continue
        features = config[section]
        if not isinstance(features, dict):
            return f"`{section}` must map feature names to {{type, shape}}, got {_kind(features)}"
        for name, feature in features.items():
            problem = _feature_problem(feature)
            if problem:
                return f"`{section}.{name}` {problem}"
    return None


def _feature_problem(feature: Any) -> str | None:
    if not isinstance(feature, dict):
        return f"must be {{type, shape}}, got {_kind(feature)}"
    if not isinstance(feature.get("type"), str):
        return "has no `type` string (VISUAL, STATE, ACTION, ...)"
    shape = feature.get("shape")
    if not isinstance(shape, list) or not shape or not all(type(n) is int and 0 <= n < 2**31 for n in shape):
        return f"`shape` must be a list of non-negative integers, got {json.dumps(shape)[:60]}"
    if feature["type"] == "VISUAL" and len(shape) < 2:
        return f"is VISUAL but its `shape` {shape} has no height and width"
    return None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")
