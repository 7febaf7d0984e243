"""Adding an output to the store named by its Experiment (`store: LOC`) or by $EVALFLEET_STORE, at the end of
`run`, `collect` and `evaluate()`. The results are already safe in the output folder, so a store that cannot be
written is one warning line with the command that adds the output later, never a failed run."""

from __future__ import annotations

import os
from typing import Any, Callable

from evalfleet.errors import UserError
from evalfleet.store.store import STORE_ENV, open_store


def named_store(declared: Any) -> str | None:
    """The Experiment's `store:`, else $EVALFLEET_STORE, else None."""
    if isinstance(declared, str) and declared:
        return declared
    return os.environ.get(STORE_ENV) or None


def add_if_named(output: str, declared: Any, *, log: Callable[[str], None],
                 endpoint_url: str | None = None) -> bool:
    """Add `output` to the named store, if one is named; True when added."""
    target = named_store(declared)
    if target is None:
        return False
    try:
        store = open_store(target, endpoint_url=endpoint_url)
        added = store.add(output, endpoint_url=endpoint_url)
    except (UserError, OSError) as exc:
        log(f"warning: not added to the results store ({exc}); add it later with: "
            f"evalfleet store add {output} --store {target}")
        return False
    log(f"{'replaced in' if added.replaced else 'added to'} the results store {store.location.display()}: "
        f"{added.name} ({added.experiment_id}), {added.runs} Runs, {added.episodes} episodes")
    return True


def declared_in_output(output: str, *, endpoint_url: str | None = None) -> Any:
    """The `store:` of a collected output's experiment.yaml (None when it names none or cannot be read: the
    collect itself already said what was wrong with the file)."""
    from evalfleet.experiment.safe_yaml import parse_yaml
    from evalfleet.layout import EXPERIMENT_FILE
    from evalfleet.outputs.storage import open_location

    try:
        loc = open_location(output, endpoint_url=endpoint_url, role="output")
        doc = parse_yaml(loc.read_bytes(EXPERIMENT_FILE).decode("utf-8"), loc.display(EXPERIMENT_FILE))
    except (UserError, OSError, UnicodeDecodeError, ValueError):
        return None
    return doc.get("store") if isinstance(doc, dict) else None
