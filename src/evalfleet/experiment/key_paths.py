"""The key path a pydantic validation error names, as the user wrote it (`runs.<run>.environment.task`).

Pydantic's error location also holds the member of a union it tried (`int`, `str`, `tuple[int, int]`,
a model's class name, `function-after[...]`): not keys of the document, so they are dropped, for
every union. A part is a key when the validated document has it there; where the document cannot be
followed (a validator reshaped it), parts that look like pydantic's member tags are dropped.
"""

from __future__ import annotations

import re
from typing import Any

# Pydantic's tags for union members and wrapped validators: a scalar type, `kind[...]`, `a-b`, a class name.
_TAG = re.compile(r"(int|str|float|bool|bytes|none|decimal|date|datetime)$|[a-z0-9-]+\[.*\]$|[a-z]+(-[a-z]+)+$"
                  r"|[A-Z][A-Za-z0-9]*$")
_UNKNOWN = object()  # the document can no longer be followed


def looks_like_tag(part: Any) -> bool:
    return isinstance(part, str) and bool(_TAG.match(part))


def key_parts(loc: tuple[Any, ...], document: Any = _UNKNOWN) -> list[str]:
    """The parts of `loc` that are keys (or list indexes) of `document`, the input validated."""
    parts: list[str] = []
    node = document
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if (isinstance(node, dict) and part in node) or (
                isinstance(node, (list, tuple)) and isinstance(part, int) and 0 <= part < len(node)):
            parts.append(str(part))  # a key of a mapping, or an index of a list
            node = node[part]
        elif node is not _UNKNOWN and not isinstance(node, (dict, list, tuple)):
            continue  # a scalar has no keys: the part names the union member tried on it
        elif isinstance(node, dict) and last and not looks_like_tag(part):
            parts.append(str(part))  # a missing key
        elif looks_like_tag(part):
            continue
        else:
            parts.append(str(part))
            node = _UNKNOWN
    return parts


def key_path(loc: tuple[Any, ...], document: Any = _UNKNOWN, prefix: str = "") -> str:
    """`prefix.a.b` of an error location (just `prefix` for an error of the whole document)."""
    return ".".join(([prefix] if prefix else []) + key_parts(loc, document))


def union_message(errors: list[dict[str, Any]], document: Any = _UNKNOWN) -> str:
    """The first error's message, and what the other members of the same union expected there
    ("Input should be a valid integer or a valid string")."""
    first = errors[0]
    where = key_parts(tuple(first["loc"]), document)
    messages = [first["msg"]]
    for err in errors[1:]:
        if key_parts(tuple(err["loc"]), document) == where and err["msg"] not in messages:
            messages.append(err["msg"].removeprefix("Input should be "))
    return " or ".join(messages)
