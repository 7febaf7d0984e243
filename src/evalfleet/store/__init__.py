"""Results that outlive one Experiment (issue #53): a store of Parquet files queried with DuckDB.

`evalfleet.store.open(LOC)` gives a `Store` (store/store.py); its format is store/schema.py, what makes two
results comparable store/identity.py, and how an output folder becomes rows store/rows.py.
"""

from __future__ import annotations

from evalfleet.store.store import STORE_ENV, Added, Store, add_outputs, open_store


def open(target: str | None = None, *, endpoint_url: str | None = None) -> Store:
    """The store at `target` (a local folder or an fsspec URL such as s3://bucket/prefix), else $EVALFLEET_STORE."""
    return open_store(target, endpoint_url=endpoint_url)


__all__ = ["Added", "STORE_ENV", "Store", "add_outputs", "open", "open_store"]
