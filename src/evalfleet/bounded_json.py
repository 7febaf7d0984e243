"""The one JSON reader for files a run did not write itself: a Run folder's record lines and run_status.json, an
output's metadata, manifest, timings and result, a recorded-latency file, a condition set.

Such a file may hold anything. 100,000 nested `[` overflow the parser's recursion (a RecursionError, which no
reader expected: tracebacks in report and collect, a dead refresh thread in watch), and a few hundred levels
parse but break whatever recurses over the value next; a file of gigabytes exhausts memory. So a document is
refused, with a `JsonBoundsError` (a ValueError, which every reader already handles as "not valid JSON"), when it
is larger than its byte limit or nests maps and lists more than MAX_DEPTH levels deep, before it is parsed.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

MAX_DEPTH = 64  # maps and lists inside each other, as safe_yaml allows; evalfleet's and Arena's files nest < 10
# A document (not a record file, which is read line by line): experiment_result.json holds ~10 KB per Run, so
# 1,000 Runs fit many times over, and parsing the largest accepted document stays well under a GiB.
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string: brackets inside it do not nest
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class JsonBoundsError(ValueError):
    """A JSON text larger or more deeply nested than its reader accepts (a ValueError: readers that skip or refuse
    a file that is not valid JSON treat it the same way)."""


def too_deep(text: str) -> bool:
    """Whether maps and lists nest more than MAX_DEPTH levels deep in JSON text (brackets inside strings do not
    count). Two counts for text that holds fewer brackets than that, as a record line does."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > MAX_DEPTH


def loads(data: bytes | str, *, max_bytes: int | None = MAX_DOCUMENT_BYTES, **options: Any) -> Any:
    """json.loads with the bounds: JsonBoundsError when `data` is longer than `max_bytes` (None: a caller that
    bounded it already) or nests deeper than MAX_DEPTH; other ValueErrors as json.loads raises them. `options`
    go to json.loads (object_pairs_hook, parse_constant)."""
    if max_bytes is not None and len(data) > max_bytes:
        raise JsonBoundsError(f"larger than {max_bytes:,} bytes")
    text = data.decode(json.detect_encoding(data), "surrogatepass") if isinstance(data, bytes) else data
    if too_deep(text):
        raise JsonBoundsError(f"maps and lists nested more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(text, **options)
    except RecursionError:  # belt and braces: MAX_DEPTH keeps the parser far from the limit
        raise JsonBoundsError(f"maps and lists nested more than {MAX_DEPTH} levels deep") from None
