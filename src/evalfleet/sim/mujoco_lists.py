"""MuJoCo's struct lists (`data.contact`, the solver, timer and warning statistics) iterated without the exception
that ends them.

mujoco's bindings give these list types `__len__` and `__getitem__` but no `__iter__`, so `for c in data.contact`
falls back to Python's old sequence protocol: it indexes until `__getitem__` raises IndexError, which the bindings
raise as a C++ exception, and unwinding it (a search of every loaded library's unwind tables) costs ~80 µs, many
times the loop itself. Meta-World's `touching_object` iterates `data.contact` twice a step in 14 of its 50 tasks (a
quarter of a push-v3 or pick-place-v3 step), robosuite's `check_contact` once a call. An `__iter__` bounded by
`len()` yields the same items in the same order, so the benchmarks' own code runs unchanged, only without the
exception: outcomes are bit-identical (tests/sim/test_mujoco_lists.py).
"""

from __future__ import annotations

from typing import Any, Iterator


def _bounded_iter(self: Any) -> Iterator[Any]:
    for i in range(len(self)):
        yield self[i]


def bounded_iteration() -> list[str]:
    """Give each of mujoco's list types without an `__iter__` one bounded by `len()` (idempotent; process-wide, as the
    benchmarks' code reaches the lists through MjData itself). A type that iterates on its own (a later mujoco) or
    refuses the attribute is left as it is. Returns the names of the types that now iterate this way."""
    import mujoco._structs as structs

    done = []
    for name in dir(structs):
        kind = getattr(structs, name)
        if not (isinstance(kind, type) and name.endswith("List") and "__getitem__" in kind.__dict__
                and "__len__" in kind.__dict__):
            continue
        own = kind.__dict__.get("__iter__")
        if own is None:
            try:
                kind.__iter__ = _bounded_iter  # type: ignore[attr-defined]
            except (AttributeError, TypeError):  # an immutable type keeps the sequence protocol
                continue
        elif own is not _bounded_iter:
            continue
        done.append(name)
    return done
