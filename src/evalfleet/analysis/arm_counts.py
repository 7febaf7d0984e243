"""What the success plot reads of the records, counted as they stream by: per key (an `Arm`, or collect's
raw (run, task, policy) of a Run's records) the successes, the rated episodes and the progress scores, plus
the infrastructure errors. Nothing per episode but one float per progress score (`stats.mean_interval` sums
with fsum, so the order they arrive in never changes a digit), so finalize's memory stays flat at a million
episodes and `evalfleet plot` (which counts its RecordSet the same way) draws the same numbers."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable

from evalfleet.analysis.grouping import Arm


@dataclass
class Tally:
    successes: int = 0
    n: int = 0  # rated episodes (success or failure)
    progress: array = field(default_factory=lambda: array("d"))  # the numeric progress scores

    def merge(self, other: Tally) -> None:
        self.successes += other.successes
        self.n += other.n
        self.progress.extend(other.progress)


@dataclass
class ArmCounts:
    tallies: dict[Hashable, Tally] = field(default_factory=dict)
    errors: int = 0  # records with status `error`: excluded from every rate

    @property
    def rated(self) -> int:
        return sum(t.n for t in self.tallies.values())

    def add(self, key: Hashable, status: str, progress: float | None) -> None:
        """One normalised record: `status` success / failure / error, `progress` a score or None."""
        if status == "error":
            self.errors += 1
            return
        tally = self.tallies.get(key)
        if tally is None:
            tally = self.tallies[key] = Tally()
        tally.successes += status == "success"
        tally.n += 1
        if progress is not None:
            tally.progress.append(progress)

    def merge(self, other: ArmCounts, relabel: Callable[[Any], Hashable | None] = lambda key: key) -> None:
        """Add `other`'s counts, each under `relabel(key)` (None: not counted, as an unmatched record)."""
        self.errors += other.errors
        for key, tally in other.tallies.items():
            new = relabel(key)
            if new is not None:
                self.tallies.setdefault(new, Tally()).merge(tally)


def count_labelled(labelled: Iterable[tuple[Arm, dict[str, Any]]]) -> ArmCounts:
    """The counts of (arm, normalised record) pairs (`success.labelled_records`)."""
    from evalfleet.analysis.loading import progress_score

    counts = ArmCounts()
    for arm, rec in labelled:
        counts.add(arm, rec["status"], progress_score(rec.get("progress")))
    return counts
