"""Hashes and generators that must be identical on every machine and Python run (unlike `hash`).

A neutral module at the bottom of the dependency graph: the episode plan derives seeds from it, and
simulator adapters derive their own noise streams from it without importing the plan."""

from __future__ import annotations

import hashlib
from typing import Any


def stable_hash(*parts: Any) -> int:
    """A 63-bit hash that is the same on every machine and Python run."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1
