"""Reading untrusted YAML with bounds: file size, nesting depth, aliases, values after alias expansion.

An Experiment file, an override value and a resumed `experiment.yaml` all come from outside, so none of
them may hang the loader (`/dev/zero`, a FIFO), exhaust memory ("billion laughs" aliases), overflow the
stack (20,000 nested `[`), or smuggle in values nothing downstream can handle (NaN, 10**30, bytes).
Everything here either returns plain JSON-shaped data or raises a UserError that names the file and key.
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent

from evalfleet.errors import UserError

MAX_FILE_BYTES = 8 * 1024 * 1024  # an Experiment of hundreds of Runs is well under 1 MiB
MAX_DEPTH = 64  # maps and lists inside each other; real files nest < 10
MAX_ALIASES = 1_000  # `*name` references in one document
MAX_VALUES = 100_000  # maps, lists and scalars once aliases are expanded (each alias is a copy)
MAX_STRING = 65_536  # characters in one string
# whole numbers fit 64 bits (int64 or uint64), as numpy and JSON readers hold them
MIN_INT, MAX_INT = -(2**63), 2**64 - 1


class BoundedSafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses documents nesting deeper than MAX_DEPTH, using more than MAX_ALIASES
    aliases, or repeating a key in one map (a silent "last one wins" hides a user's mistake). Timestamps
    stay strings: a `name: 2024-05-01` is a name, and dates are not JSON."""

    def __init__(self, stream: Any):
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise ComposerError(None, None, f"more than {MAX_ALIASES} aliases (*name) in one document",
                                    self.peek_event().start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise ComposerError(None, None, f"maps and lists nested more than {MAX_DEPTH} levels deep",
                                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # unhashable: the constructor reports it
                if duplicate:
                    raise ConstructorError("while reading a map", node.start_mark,
                                           f"duplicate key {key!r}; each key may appear once", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


# No implicit timestamps: copy the resolver table without them (the class attribute is shared otherwise).
BoundedSafeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def yaml_error_message(exc: yaml.YAMLError) -> str:
    """`not valid YAML at line L, column C: problem` (one line)."""
    mark = getattr(exc, "problem_mark", None)
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or (str(exc).strip().splitlines() or ["unknown problem"])[0]
    return f"not valid YAML{at}: {problem}"


def parse_yaml(text: str, where: str) -> Any:
    """One YAML document from `text` with the loader's bounds, as plain checked data (see `plain_tree`)."""
    try:
        doc = yaml.load(text, Loader=BoundedSafeLoader)  # noqa: S506 — a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise UserError(yaml_error_message(exc), where=where) from None
    except RecursionError:  # belt and braces: MAX_DEPTH keeps the composer far from the limit
        raise UserError(f"not valid YAML: nested too deeply (more than {MAX_DEPTH} levels)", where=where) from None
    except Exception as exc:  # noqa: BLE001 — a constructor's own error (`!!int x`, `!!timestamp 2020-99-99`)
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(f"not valid YAML: {detail}", where=where) from None
    return plain_tree(doc, where)


def read_text_bounded(path: str | Path, where: str | None = None, *, limit: int = MAX_FILE_BYTES,
                      what: str = "an Experiment YAML file") -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes; `what` the file should be, for the messages.
    Devices (`/dev/zero`), FIFOs and sockets are refused before they are read: opened without blocking (opening a
    FIFO blocks until someone writes) and checked on the open file, so nothing swapped in after a check is read."""
    where = where or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserError(f"file not found; give the path of {what}", where=where) from None
    except IsADirectoryError:
        raise UserError(f"is a folder; give the path of {what}", where=where) from None
    except OSError as exc:
        raise UserError(f"cannot read the file ({exc.strerror or exc})", where=where) from None
    info = os.fstat(fd)
    problem = ("is a folder" if stat.S_ISDIR(info.st_mode) else
               "is not a regular file (a device, FIFO or socket)" if not stat.S_ISREG(info.st_mode) else None)
    if problem or info.st_size > limit:
        os.close(fd)
        raise UserError(f"{problem}; give the path of {what}" if problem else
                        f"the file is {info.st_size:,} bytes; at most {limit:,} are read", where=where)
    with os.fdopen(fd, "rb") as f:
        try:
            os.set_blocking(fd, True)
            data = f.read(limit + 1)  # the file may have grown since fstat
        except OSError as exc:
            raise UserError(f"cannot read the file ({exc.strerror or exc})", where=where) from None
    if len(data) > limit:
        raise UserError(f"the file is larger than {limit:,} bytes", where=where)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x}); save the file as UTF-8",
                        where=where) from None


def plain_tree(node: Any, where: str, key: str = "") -> Any:
    """A copy of `node` made only of dict, list, str, int, float, bool and None, with every value bounded:
    finite numbers, whole numbers that fit 64 bits, strings without NUL and at most MAX_STRING long, at
    most MAX_VALUES values in all, MAX_DEPTH levels. YAML aliases become independent copies (so an
    override of one Run never reaches another Run sharing the anchor) and an alias cycle is an error.
    The UserError's key is the dotted path of the bad value (list items by index)."""
    count = 0

    def check_scalar(value: Any, path: str) -> Any:
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int):
            if not MIN_INT <= value <= MAX_INT:
                raise UserError(f"whole number too large ({value.bit_length()} bits; it must fit in 64 bits)",
                                where=where, key=path or None)
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise UserError(f"must be a finite number, got {value!r}", where=where, key=path or None)
            return value
        if isinstance(value, str):
            if len(value) > MAX_STRING:
                raise UserError(f"string of {len(value):,} characters; at most {MAX_STRING:,}", where=where,
                                key=path or None)
            if "\x00" in value:
                raise UserError("contains a NUL character", where=where, key=path or None)
            return value
        raise UserError(f"a value of YAML type {type(value).__name__} is not supported here; use a string, "
                        "number, true/false, list or map", where=where, key=path or None)

    def copy(value: Any, path: str, ancestors: tuple[int, ...]) -> Any:
        nonlocal count
        count += 1
        if count > MAX_VALUES:
            raise UserError(f"more than {MAX_VALUES:,} values once YAML aliases are expanded (an alias bomb?)",
                            where=where, key=path or None)
        if not isinstance(value, (dict, list)):
            return check_scalar(value, path)
        if id(value) in ancestors:
            raise UserError("a YAML alias refers to a map or list that contains it (a cycle)", where=where,
                            key=path or None)
        if len(ancestors) >= MAX_DEPTH:
            raise UserError(f"maps and lists nested more than {MAX_DEPTH} levels deep", where=where, key=path or None)
        inner = (*ancestors, id(value))
        if isinstance(value, list):
            return [copy(v, f"{path}.{i}" if path else str(i), inner) for i, v in enumerate(value)]
        out = {}
        for k, v in value.items():
            if isinstance(k, (dict, list)):
                raise UserError("a map key must be a plain value, not a map or list", where=where, key=path or None)
            k = check_scalar(k, path)
            out[k] = copy(v, f"{path}.{k}" if path else str(k), inner)
        return out

    return copy(node, key, ())
