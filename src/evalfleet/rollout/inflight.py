"""The episodes a supervised runner has in flight, so that the runner the watchdog restarts accounts for them.

A runner under the watchdog (EVALFLEET_HEARTBEAT set) keeps `<heartbeat>.inflight.json` beside its heartbeat:

    {"pid": int, "in_flight": [{"run", "shard", "episode", "attempt", "started"}, ...]}   # one per env slot

rewritten when a slot starts an episode (once per episode: an entry whose record was written is recognised by
that record), emptied when a shard completes, left as it is when the runner is stopped or dies. Only a relaunched
runner reads it, once the runner that wrote it has ended, so it is rewritten in place (`write_in_place`: one
`pwrite` of at most a page, blank-padded over a longer old text) rather than replaced: a replace by rename costs
~0.3 ms on ext4, once per episode.
The watchdog says why it relaunched (`RESTART_ENV`: the ended attempt's outcome, `stalled`, `signal`,
`exit_code:<code>`, ...). The relaunched runner (`account_restart`, before its first shard) writes for every entry
that has no record at its attempt yet an `error` record with `stall` (the watchdog stopped a stalled runner),
`server_lost` (its step stopped it to rewire it to a moved policy server: EXIT_SERVER_MOVED) or `runner_crash`
(it died), at that attempt, into the shard's part: the episode is then played again as
attempt + 1, and one that kills its runner every time is decided after `max_attempts`. A first attempt (a
fresh run or `--resume`) discards the file: episodes interrupted by a stop are played again as they were.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from evalfleet.layout import part_path
from evalfleet.rollout.heartbeat import write_json_atomic
from evalfleet.process_exit import EXIT_SERVER_MOVED
from evalfleet.sim.protocol import RUNNER_CRASH, SERVER_LOST, STALL

RESTART_ENV = "EVALFLEET_RESTARTED_AFTER"  # set by the watchdog on a relaunch: the outcome of the attempt before
STALLED = "stalled"  # the watchdog's outcome of an attempt it stopped for making no progress


def restart_code(outcome: str | None) -> str | None:
    """The code of the episodes the ended attempt had in flight; None when this is no restart."""
    if not outcome:
        return None
    if outcome == f"exit_code:{EXIT_SERVER_MOVED}":  # stopped to be rewired to its policy server's new address
        return SERVER_LOST.code
    return STALL.code if outcome == STALLED else RUNNER_CRASH.code


class InFlight:
    """The in-flight file of one runner process; `path=None`: not supervised, nothing is kept."""

    def __init__(self, path: str | os.PathLike[str] | None):
        self.path = Path(path) if path else None
        self._slots: dict[int, dict[str, Any]] = {}
        self._made_folder = False
        self._width: int | None = None  # bytes the file may hold from this process's writes; None: not written yet

    @classmethod
    def beside(cls, heartbeat_path: str | os.PathLike[str] | None) -> "InFlight":
        if not heartbeat_path:
            return cls(None)
        hb = Path(heartbeat_path)
        return cls(hb.with_name(f"{hb.name}.inflight.json"))

    def started(self, slot: int, run: str, shard: str, episode: int, attempt: int) -> None:
        if self.path is None:
            return
        self._slots[slot] = {"run": run, "shard": shard, "episode": episode, "attempt": attempt,
                             "started": time.time()}
        self._write()

    def clear(self) -> None:
        if self.path is None or (not self._slots and not self.path.exists()):
            return
        self._slots.clear()
        self._write()

    def _write(self) -> None:
        assert self.path is not None
        if not self._made_folder:  # once: the folder is the heartbeat's
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._made_folder = True
        self._width = write_in_place(self.path, {"pid": os.getpid(), "in_flight": list(self._slots.values())},
                                     self._width)

    def read(self) -> list[dict[str, Any]]:
        """The entries the file holds (a missing or unreadable file: none)."""
        if self.path is None:
            return []
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        entries = data.get("in_flight") if isinstance(data, dict) else None
        return [e for e in entries or [] if isinstance(e, dict) and _shaped(e)]


PAGE = 4096  # a write of at most one page at offset 0 is not cut short by the writer's death


def write_in_place(path: Path, data: Any, width: int | None) -> int:
    """Write `data` as JSON over the start of `path`, padded with blanks (JSON allows trailing whitespace) over the
    rest of what this process wrote there before (`width`; None: the first write, which truncates whatever an
    earlier process left). Returns the file's new width. Over a page, the file is replaced atomically instead."""
    text = json.dumps(data).encode("utf-8")
    if max(len(text), width or 0) > PAGE:
        write_json_atomic(path, data)
        return len(text) + 1  # its newline
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if width is None else 0), 0o644)
    try:
        os.pwrite(fd, text.ljust(width or 0), 0)
    finally:
        os.close(fd)
    return max(width or 0, len(text))


def _shaped(entry: dict[str, Any]) -> bool:
    return (isinstance(entry.get("run"), str) and isinstance(entry.get("shard"), str)
            and all(isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool)
                    for k in ("episode", "attempt")))


def runner_in_flight(heartbeat: Any, plans: dict[str, Any], out_dir: Path) -> InFlight:
    """A runner's in-flight file, beside its heartbeat (none when it has no heartbeat file). Relaunched by the
    watchdog (attempt > 1): what the ended attempt lost is recorded first; else the file is emptied."""
    in_flight = InFlight.beside(heartbeat.path if heartbeat is not None else None)
    if heartbeat is not None and heartbeat.attempt > 1:
        account_restart(in_flight, plans, out_dir, os.environ.get(RESTART_ENV))
    else:
        in_flight.clear()  # a fresh run or --resume: interrupted episodes are played again as they were
    return in_flight


def account_restart(in_flight: InFlight, plans: dict[str, Any], out_dir: Path,
                    outcome: str | None) -> list[dict[str, Any]]:
    """Before a relaunched runner's first shard: an `error` record (`stall` / `runner_crash`) for each episode
    the ended attempt had in flight and did not record; the records written. Then the file is emptied."""
    code = restart_code(outcome)
    written: list[dict[str, Any]] = []
    if code is not None and in_flight.read():
        from evalfleet.plugins import load_registries

        load_registries()  # the Runs' protocols come from their environments' registrations
        for entry in in_flight.read():
            record = _crash_record(entry, plans, out_dir, code, outcome or "")
            if record is not None:
                written.append(record)
    in_flight.clear()
    return written


def _crash_record(entry: dict[str, Any], plans: dict[str, Any], out_dir: Path, code: str,
                  outcome: str) -> dict[str, Any] | None:
    from evalfleet.rollout.failures import run_protocol
    from evalfleet.rollout.records import (DECISION_FIELDS, EpisodeRecord, RecordWriter, RunScope, read_run_records,
                                          run_logs)

    plan = plans.get(entry["run"])
    episode, attempt = entry["episode"], entry["attempt"]
    if plan is None or not 0 <= episode < (plan.num_episodes or episode + 1):
        return None
    counted = read_run_records(RunScope(plan.name, plan.num_episodes), run_logs(out_dir, plan.name),
                               keep=DECISION_FIELDS).by_episode
    if int(counted.get(episode, {}).get("attempt", 0)) >= attempt:
        return None  # recorded before the runner went: nothing was lost
    spec = plan.episode(episode)
    why = {STALL.code: "the watchdog stopped the runner, which made no progress",
           SERVER_LOST.code: "the runner was stopped to be rewired to its policy server's new address"}.get(
        code, f"the runner died ({outcome.replace('_', ' ')})")
    started = entry.get("started")
    record = EpisodeRecord(
        run=plan.name, task=plan.task, policy=plan.policy, episode=episode, seed=spec.seed, status="error",
        success=None, episode_length=0,
        duration_s=round(max(0.0, time.time() - started), 4) if isinstance(started, (int, float)) else 0.0,
        variations=spec.variations, attempt=attempt, failure_code=code, protocol=run_protocol(plan.run).identity,
        error=f"{why} while this episode was in flight; " + (
            f"played again as attempt {attempt + 1}" if attempt < plan.run.max_attempts else "no attempts left"),
    )
    with RecordWriter(part_path(out_dir, plan.name, entry["shard"])) as writer:
        writer.append(record)
    return record.to_json()
