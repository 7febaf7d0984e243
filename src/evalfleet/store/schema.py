"""The results store's format, versioned: three tables of Parquet files, one file per Experiment in each.

```
STORE/
  evalfleet-store.json                 MARKER: {"schema": "evalfleet.store", "version": VERSION}
  episodes/<experiment_id>.parquet     one row per episode: every field its record has
  runs/<experiment_id>.parquet         one row per Run: counts, the policy's identity, the environment's fingerprint
  experiments/<experiment_id>.parquet  one row: provenance, step, tags, when it was added
```

An Experiment is visible once its `experiments/` file exists: `add` writes it last and `remove` deletes it
first, so a reader never sees half of one. Adding writes whole files under the Experiment's id, so the same output
added twice, or collected again after `--resume`, replaces its own files, and processes adding different outputs
never write the same file. Every file carries the schema version in its Parquet metadata; a store or file of a
newer version is refused, never misread (`check_version`).
"""

from __future__ import annotations

import re
from typing import Any

NAME = "evalfleet.store"
VERSION = 1
MARKER = "evalfleet-store.json"
VERSION_KEY = b"evalfleet.store.version"
TABLE_KEY = b"evalfleet.store.table"
TABLES = ("experiments", "runs", "episodes")  # the order a reader joins them; add writes them in reverse
FILE_NAME = re.compile(r"(?P<id>[0-9a-f]{32})\.parquet")


def arrow_schemas() -> dict[str, Any]:
    """Each table's columns (pyarrow imported only by the store's users)."""
    import pyarrow as pa

    text, whole, real = pa.string(), pa.int64(), pa.float64()
    return {
        "episodes": pa.schema([
            ("experiment_id", text), ("run", text), ("episode", whole), ("seed", whole), ("status", text),
            ("success", pa.bool_()), ("failure_code", text), ("episode_length", whole), ("duration_s", real),
            ("progress", real), ("variations", text), ("attempt", whole), ("timestamp", real),
            ("policy_latency_ms", real), ("protocol", text), ("record", text)]),
        "runs": pa.schema([
            ("experiment_id", text), ("run", text), ("task", text), ("policy", text), ("policy_type", text),
            ("policy_revision", text), ("policy_identity", text), ("environment_type", text),
            ("environment_fingerprint", text), ("environment_identity", text), ("protocol", text),
            ("step", whole), ("status", text), ("planned_episodes", whole), ("episodes", whole),
            ("successes", whole), ("failures", whole), ("errors", whole)]),
        "experiments": pa.schema([
            ("experiment_id", text), ("name", text), ("source", text), ("added_at", text), ("started_at", text),
            ("finished_at", text), ("status", text), ("step", whole), ("tags", text), ("config_sha256", text),
            ("evalfleet_version", text), ("metadata", text), ("provenance", text)]),
    }


def marker_document() -> dict[str, Any]:
    return {"schema": NAME, "version": VERSION}
