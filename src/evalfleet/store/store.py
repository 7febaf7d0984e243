"""A results store: Parquet files in a local folder or a bucket, queried with DuckDB (store/schema.py: the format).

    store = evalfleet.store.open("results/")       # or s3://bucket/prefix
    store.add("outputs/quickstart-...")            # the same output again replaces its rows
    store.query("SELECT policy, avg(success::int) FROM episodes JOIN runs USING (experiment_id, run) GROUP BY 1")

No server: a team shares a bucket. Every file is checked before a query reads it (its name, its Parquet footer,
its schema version), so a corrupt, foreign or newer file is one clear error naming it, never a wrong answer.
"""

from __future__ import annotations

import functools
import io
import json
from dataclasses import dataclass
from typing import Any, Callable

from evalfleet.errors import UserError
from evalfleet.outputs.storage import Location, open_location, storage_errors
from evalfleet.store.rows import OutputRows, output_rows
from evalfleet.store.schema import (FILE_NAME, MARKER, NAME, TABLE_KEY, TABLES, VERSION, VERSION_KEY, arrow_schemas,
                                    marker_document)

STORE_ENV = "EVALFLEET_STORE"


@dataclass
class Added:
    experiment_id: str
    name: str
    source: str
    runs: int
    episodes: int
    replaced: bool


def remote_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """A store method whose remote storage failures are one UserError naming the store (storage_errors)."""
    @functools.wraps(method)
    def guarded(self: "Store", *args: Any, **kwargs: Any) -> Any:
        with storage_errors(self.location.display()):
            return method(self, *args, **kwargs)

    return guarded


class Store:
    """One store location. `add` writes; `experiments`, `query` and `connect` read what is complete."""

    def __init__(self, location: Location):
        self.location = location

    # --- the version ------------------------------------------------------------------------------
    def check_version(self) -> bool:
        """True when the store exists (its marker read and of this version or older); False when it is new."""
        if not self.location.exists(MARKER):
            if any(self.location.isdir(t) for t in TABLES):
                raise UserError(f"not an evalfleet store: tables without {MARKER}; name an empty folder or an "
                                "existing store", where=self.location.display())
            return False
        try:
            doc = json.loads(self.location.read_bytes(MARKER).decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise UserError(f"unreadable store marker ({exc}); restore it or name another store",
                            where=self.location.display(MARKER)) from None
        if not isinstance(doc, dict) or doc.get("schema") != NAME or not isinstance(doc.get("version"), int):
            raise UserError(f"not an evalfleet store marker (expected schema {NAME!r})",
                            where=self.location.display(MARKER))
        if doc["version"] > VERSION:
            raise UserError(f"written by a newer evalfleet (store schema {doc['version']}, this one reads up to "
                            f"{VERSION}); upgrade evalfleet to read it", where=self.location.display(MARKER))
        return True

    # --- writing ----------------------------------------------------------------------------------
    @remote_errors
    def add(self, output: str, *, tags: list[str] | None = None, step: int | None = None,
            endpoint_url: str | None = None) -> Added:
        """Add one collected output (a folder or URL); its earlier rows, if any, are replaced."""
        import pyarrow as pa

        exists = self.check_version()
        self.files()  # a store holding a corrupt, foreign or newer file is refused before anything is written
        rows = output_rows(open_location(output, endpoint_url=endpoint_url, role="source"), tags=tags, step=step)
        schemas = arrow_schemas()
        tables = {t: pa.Table.from_pydict(rows.columns[t], schema=schemas[t]) for t in TABLES}
        replaced = exists and self.location.exists(self._rel("experiments", rows.experiment_id))
        if not exists:
            self.location.write_bytes(MARKER, (json.dumps(marker_document()) + "\n").encode())
        for table in reversed(TABLES):  # experiments last: the Experiment is visible once all of it is there
            self.location.write_bytes(self._rel(table, rows.experiment_id), parquet_bytes(tables[table], table))
        return Added(rows.experiment_id, rows.name, rows.source, len(rows.columns["runs"]["run"]), rows.episodes,
                     replaced)

    @remote_errors
    def remove(self, experiment_id: str) -> bool:
        """Remove one Experiment's rows (its experiments file first: it is invisible from then on)."""
        self.check_version()
        if not FILE_NAME.fullmatch(experiment_id + ".parquet"):
            raise UserError(f"expected an Experiment id (32 hex digits, see `evalfleet store ls`), got "
                            f"{experiment_id[:80]!r}", where="command line", key="EXPERIMENT_ID")
        found = self.location.exists(self._rel("experiments", experiment_id))
        for table in TABLES:
            self.location.remove(self._rel(table, experiment_id))
        return found

    # --- reading ----------------------------------------------------------------------------------
    @remote_errors
    def files(self) -> dict[str, list[str]]:
        """Each table's files of the complete Experiments (those with an experiments file), every file checked."""
        if not self.check_version():
            return {t: [] for t in TABLES}
        listed: dict[str, dict[str, str]] = {}
        for table in TABLES:
            listed[table] = {}
            for name, is_dir in self.location.listdir(table):
                if name.startswith("."):  # another add's file being written (.tmp-...), or a system's own file
                    continue
                match = FILE_NAME.fullmatch(name)
                if is_dir or match is None:
                    raise UserError(f"a file the store did not write ({table}/{name}); move it out of the store",
                                    where=self.location.display(f"{table}/{name}"))
                listed[table][match["id"]] = f"{table}/{name}"
        complete = set(listed["experiments"]) & set(listed["runs"]) & set(listed["episodes"])
        files = {t: [listed[t][i] for i in sorted(complete)] for t in TABLES}
        for table in TABLES:
            for rel in files[table]:
                self._check_file(table, rel)
        return files

    def _check_file(self, table: str, rel: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        where = self.location.display(rel)
        try:
            with self._open(rel) as f:
                meta = pq.ParquetFile(f).schema_arrow.metadata or {}
        except (pa.ArrowException, OSError, ValueError, UserError) as exc:
            raise UserError(f"not a readable Parquet file ({type(exc).__name__}: {str(exc)[:200]}); move it out of "
                            "the store or add its output again", where=where) from None
        version = meta.get(VERSION_KEY)
        if meta.get(TABLE_KEY) != table.encode() or version is None or not version.isdigit():
            raise UserError(f"a Parquet file the store did not write (no {table} table of {NAME}); move it out of "
                            "the store", where=where)
        if int(version) > VERSION:
            raise UserError(f"written by a newer evalfleet (store schema {int(version)}, this one reads up to "
                            f"{VERSION}); upgrade evalfleet to read it", where=where)

    def _open(self, rel: str) -> Any:
        if self.location.is_local:
            return self.location.open_local(rel)
        return self.location.fs.open(self.location.join(rel), "rb")

    def connect(self) -> Any:
        """A DuckDB connection with the views `episodes`, `runs` and `experiments` over the checked files."""
        import duckdb
        import pyarrow as pa

        files = self.files()
        con = duckdb.connect()
        if not self.location.is_local:
            con.register_filesystem(self.location.fs)
        for table, schema in arrow_schemas().items():
            paths = [self._path(rel) for rel in files[table]]
            if paths:
                listed = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)
                con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet([{listed}])")
            else:
                con.register(f"{table}_empty", pa.Table.from_pylist([], schema=schema))
                con.execute(f"CREATE VIEW {table} AS SELECT * FROM {table}_empty")
        return con

    def _path(self, rel: str) -> str:
        if self.location.is_local:
            return self.location.join(rel)
        protocol = self.location.fs.protocol
        return f"{protocol[0] if isinstance(protocol, (tuple, list)) else protocol}://{self.location.join(rel)}"

    @remote_errors
    def query(self, sql: str) -> Any:
        """The answer of one SQL query over the views, as an Arrow table; UserError for a query DuckDB refuses."""
        import duckdb

        con = self.connect()
        try:
            answer = con.sql(sql)
            if answer is None:
                raise UserError("the statement returns no rows; give a query (SELECT ...)", where="store query")
            return answer.to_arrow_table()
        except duckdb.Error as exc:
            raise UserError(f"the query failed: {str(exc).splitlines()[0][:300]}", where="store query") from None
        finally:
            con.close()

    @remote_errors
    def experiments(self) -> list[dict[str, Any]]:
        """One entry per Experiment: id, name, step, tags, when added, its Runs and episodes."""
        table = self.query(
            "SELECT e.experiment_id, e.name, e.step, e.tags, e.added_at, e.source, "
            "(SELECT count(*) FROM runs r WHERE r.experiment_id = e.experiment_id) AS runs, "
            "(SELECT count(*) FROM episodes p WHERE p.experiment_id = e.experiment_id) AS episodes "
            "FROM experiments e ORDER BY e.added_at, e.experiment_id")
        return table.to_pylist()

    @staticmethod
    def _rel(table: str, experiment_id: str) -> str:
        return f"{table}/{experiment_id}.parquet"


def parquet_bytes(table: Any, name: str) -> bytes:
    """The table as Parquet bytes, its schema version and table name in the file's metadata."""
    import pyarrow.parquet as pq

    table = table.replace_schema_metadata({VERSION_KEY: str(VERSION).encode(), TABLE_KEY: name.encode()})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def open_store(target: str | None = None, *, endpoint_url: str | None = None) -> Store:
    """The store at `target` (a folder or URL), or at $EVALFLEET_STORE; UserError when neither is given."""
    import os

    target = target or os.environ.get(STORE_ENV) or None
    if not target:
        raise UserError(f"no store named: give --store LOC or set {STORE_ENV}", where="command line", key="--store")
    return Store(open_location(str(target), endpoint_url=endpoint_url, role="store"))


def add_outputs(store: Store, outputs: list[str], *, tags: list[str] | None = None,
                endpoint_url: str | None = None, log: Callable[[str], None] = print) -> list[Added]:
    """Add each output in turn, one line each (progress for a long add of many outputs)."""
    added = []
    for i, output in enumerate(outputs, 1):
        done = store.add(output, tags=tags, endpoint_url=endpoint_url)
        added.append(done)
        log(f"[{i}/{len(outputs)}] {'replaced' if done.replaced else 'added'} {done.name} ({done.experiment_id}): "
            f"{done.runs} Runs, {done.episodes} episodes from {done.source}")
    return added


__all__ = ["Added", "OutputRows", "Store", "STORE_ENV", "add_outputs", "open_store"]
