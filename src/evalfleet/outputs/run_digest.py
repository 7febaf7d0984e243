"""What collect keeps of a Run once it has written it: a digest, not its records.

Collect reads one Run at a time (`collect.read_run`: every record that counts, by the one rule of
`records.RunRecords`), writes its merged episode_results.jsonl and, for the report, its episode table, then keeps
only a `RunDigest`: its summary (experiment_result.json's entry), its failure codes and protocol identities, one
byte per episode for the outcomes (ranking, sequential stopping) and what the success plot counts. So the memory
collect needs grows with the largest Run, never with the Experiment. `RunDigest.records` reads the Run's merged
file again, for a caller that wants one Run's records after the fact.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from evalfleet.layout import RECORDS_FILE
from evalfleet.outputs.failures import run_failure_facts
from evalfleet.outputs.storage import Location
from evalfleet.outputs.summary import summarise_run
from evalfleet.rollout.records import SetAside, record_dicts, record_episode
from evalfleet.rollout.run_folder import join

_STATUS_BYTE = {"success": ord("s"), "failure": ord("f")}  # anything else is an error ("e"); 0: no record
_BYTE_STATUS = {ord("s"): "success", ord("f"): "failure", ord("e"): "error"}


@dataclass
class RunDigest:
    """One collected Run without its records (see the module's docstring)."""

    name: str
    sources: list[Any]  # run_sources.RunSource: where its files were
    status: dict[str, Any] | None
    set_aside: SetAside
    planned: int | None
    protocol: dict[str, Any] | None
    summary: dict[str, Any]
    failure_facts: tuple[dict[str, int], set[str]]  # {code: count}, the protocol identities its records carry
    outcomes: bytearray = field(default_factory=bytearray)  # by episode index: s / f / e, 0 where none
    attempts: array = field(default_factory=lambda: array("H"))  # by episode index, capped at 65535
    plot_counts: Any = None  # analysis.arm_counts.ArmCounts by (run, task, policy): what the success plot counts
    episodes: int = 0  # records that count
    dest: Location | None = None  # where its merged file was written

    @property
    def records(self) -> list[dict[str, Any]]:
        """The Run's records that count, read again from the merged file collect wrote."""
        if self.dest is None or not self.episodes:
            return []
        return record_dicts(self.dest.read_bytes(join(self.name, RECORDS_FILE)))

    def outcome_records(self) -> Iterator[dict[str, Any]]:
        """{episode, status, attempt} of every recorded episode, made from the digest (ranking, stopping)."""
        for ep, byte in enumerate(self.outcomes):
            if byte:
                yield {"episode": ep, "status": _BYTE_STATUS[byte], "attempt": self.attempts[ep]}


def digest_run(run: Any, dest: Location | None = None) -> RunDigest:
    """The digest of a `collect.RunData` whose records are in memory (they are not kept)."""
    records = run.records
    summary = summarise_run(run.name, records, run.summary_status(), set_aside=run.set_aside)
    episodes = [record_episode(r) for r in records]  # looked up once per record
    top = max((ep or 0 for ep in episodes), default=-1) + 1
    outcomes, attempts = bytearray(top), array("H", bytes(2 * top))
    for ep, rec in zip(episodes, records):
        outcomes[ep] = _STATUS_BYTE.get(rec.get("status"), ord("e"))
        attempt = rec.get("attempt", 1)
        attempts[ep] = min(max(attempt if isinstance(attempt, int) else 1, 0), 65535)
    return RunDigest(name=run.name, sources=run.sources, status=run.status, set_aside=run.set_aside,
                     planned=run.planned, protocol=run.protocol, summary=summary,
                     failure_facts=run_failure_facts(records), outcomes=outcomes, attempts=attempts,
                     plot_counts=plot_counts(run.name, records), episodes=len(records), dest=dest)


def plot_counts(name: str, records: list[dict[str, Any]]) -> Any:
    """What the success plot counts of a Run (`analysis.arm_counts.ArmCounts`), keyed by each record's (run,
    task, policy) as `analysis.loading` normalises them: the plot labels the keys with their Arm."""
    from evalfleet.analysis.arm_counts import ArmCounts
    from evalfleet.analysis.loading import normalised_outcome, progress_score

    counts = ArmCounts()
    for rec in records:
        key = (str(rec.get("run") or rec.get("job_name") or name), rec.get("task"), rec.get("policy"))
        counts.add(key, normalised_outcome(rec), progress_score(rec.get("progress")))
    return counts


class OutcomeRecords(Mapping):
    """Run name -> its `outcome_records()`, made afresh at every look-up (what `summary.build_result`'s ranking
    and `stopping_result.add_stopping` read, without every Run's records in memory at once)."""

    def __init__(self, digests: list[RunDigest]):
        self._by_name = {d.name: d for d in digests}

    def __getitem__(self, name: str) -> Iterator[dict[str, Any]]:
        return self._by_name[name].outcome_records()

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)
