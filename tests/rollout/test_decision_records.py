"""Issue #29: a runner asks which of its Run's episodes are decided once per shard; what that read keeps is the
few fields deciding needs, not every record's dict (a worker's peak RSS grew ~2.5 KB per record of the Run)."""

from __future__ import annotations

import json
import os

from evalfleet.rollout.records import DECISION_FIELDS, RunScope, read_run_records


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _record(episode, attempt=1, status="failure", timestamp=1.0):
    return {"run": "r", "episode": episode, "attempt": attempt, "status": status, "episode_length": 20,
            "timestamp": timestamp, "seed": episode, "variations": {"noise": 0.1}, "error": None,
            "progress": {"reward": 0.5}, "policy_provenance": {"model": "x" * 200}, "protocol": "p1"}


def test_a_decision_read_keeps_only_the_deciding_fields_of_every_episode(tmp_path):
    first, second = tmp_path / "000000.jsonl", tmp_path / "000500.jsonl"
    _write(first, [_record(i, status="error") for i in range(1000)])
    # a later attempt wins, and so does a newer timestamp at the same attempt; an older one read later is stale
    _write(second, [_record(i, attempt=2, status="success") for i in range(0, 1000, 2)]
           + [_record(1, attempt=1, status="failure", timestamp=0.5)])
    paths = [first, second]
    full = read_run_records(RunScope("r", 1000), paths)
    kept = read_run_records(RunScope("r", 1000), paths, keep=DECISION_FIELDS)
    assert len(kept.by_episode) == 1000
    assert all(set(rec) == set(DECISION_FIELDS) for rec in kept.records)  # 3 keys each, nothing nested
    assert kept.by_episode == {ep: {k: rec[k] for k in DECISION_FIELDS} for ep, rec in full.by_episode.items()}
    assert kept.by_episode[0]["status"] == "success" and kept.by_episode[1]["status"] == "error"
    assert kept.set_aside.total == full.set_aside.total == 1  # the stale duplicate, counted alike


def test_a_tail_read_parses_each_record_once_and_decides_as_a_whole_read(tmp_path, monkeypatch):
    """RunRecordsTail (what a worker reads before each shard) reads only what was added since its last read — whole
    lines, files that appear later, a replaced file again from its start — and decides every episode as reading
    every log whole does."""
    from evalfleet.rollout import records
    from evalfleet.rollout.records import RunRecordsTail

    parsed = []
    real = records.record_dicts
    monkeypatch.setattr(records, "record_dicts", lambda data: parsed.append(len(data)) or real(data))
    first, second = tmp_path / "000000.jsonl", tmp_path / "000500.jsonl"
    _write(first, [_record(i) for i in range(300)])
    tail = RunRecordsTail(RunScope("r", 1000), lambda: sorted(tmp_path.glob("*.jsonl")), keep=DECISION_FIELDS)
    assert len(tail.refresh()) == 300
    size = first.stat().st_size
    assert tail.refresh() is tail.records and parsed == [size]  # nothing new: nothing parsed again

    line = json.dumps(_record(300)) + "\n"
    with first.open("a") as f:  # a record torn in the middle of its line waits for its end
        f.write(line[:40])
    assert len(tail.refresh()) == 300
    with first.open("a") as f:
        f.write(line[40:])
    _write(second, [_record(i, attempt=2, status="success") for i in range(0, 300, 3)])
    assert len(tail.refresh()) == 301
    assert sum(parsed) == first.stat().st_size + second.stat().st_size  # every byte parsed once

    fresh = tmp_path / "new.tmp"  # the file replaced by another (a new inode), as collect replaces a merged file
    _write(fresh, [_record(i, attempt=3, status="success") for i in range(1, 300, 3)])
    os.replace(fresh, second)
    now = tail.refresh()
    whole = read_run_records(RunScope("r", 1000), [first, second], keep=DECISION_FIELDS)
    expected = dict(whole.by_episode)
    expected.update({ep: {k: _record(ep, attempt=2, status="success")[k] for k in DECISION_FIELDS}
                     for ep in range(0, 300, 3)})  # what the replaced file held before still counts
    assert now.by_episode == expected
