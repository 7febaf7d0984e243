"""The heartbeat file: HeartbeatWriter (rate limit, atomic writes) and read_heartbeat (tolerant reader)."""

from __future__ import annotations

import json
import os

import pytest

from evalfleet.rollout.heartbeat import (
    ATTEMPT_ENV,
    HEARTBEAT_ENV,
    HeartbeatWriter,
    read_heartbeat,
    write_json_atomic,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_writes_the_contract_fields(tmp_path):
    path = tmp_path / "hb.json"
    w = HeartbeatWriter(path, "run-a/shard-3", attempt=2)
    assert w.beat(steps=7, episodes=1, state="running")
    beat = read_heartbeat(path)
    assert beat is not None
    assert beat["pid"] == os.getpid() and beat["steps"] == 7 and beat["episodes"] == 1
    assert beat["state"] == "running" and beat["shard"] == "run-a/shard-3" and beat["attempt"] == 2
    assert isinstance(beat["time"], float)
    raw = json.loads(path.read_text())
    assert set(raw) == {"pid", "steps", "episodes", "time", "state", "shard", "attempt"}


def test_rate_limit_and_state_changes(tmp_path):
    clock = FakeClock()
    path = tmp_path / "hb.json"
    w = HeartbeatWriter(path, "s", min_interval=0.5, clock=clock)
    assert w.beat(state="starting")  # first beat always written
    clock.now = 0.1
    assert w.beat(steps=1, state="running")  # state changed: written at once
    clock.now = 0.2
    assert not w.beat(steps=2)  # too soon
    assert read_heartbeat(path)["steps"] == 1
    clock.now = 0.6
    assert w.beat(steps=3)  # 0.5 s since the last write
    assert read_heartbeat(path)["steps"] == 3
    clock.now = 0.7
    assert not w.beat(steps=4)
    assert w.flush()  # pending counters written
    assert read_heartbeat(path)["steps"] == 4
    assert not w.flush()  # nothing new
    assert w.beat(force=True)
    w.done()
    assert read_heartbeat(path)["state"] == "done" and read_heartbeat(path)["steps"] == 4
    assert w.writes == 6


def test_counters_not_given_keep_their_value(tmp_path):
    path = tmp_path / "hb.json"
    w = HeartbeatWriter(path, "s", min_interval=0)
    w.beat(steps=10, episodes=2)
    w.beat(episodes=3)
    assert (read_heartbeat(path)["steps"], read_heartbeat(path)["episodes"]) == (10, 3)


def test_bad_state_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="starting, running, waiting, done"):
        HeartbeatWriter(tmp_path / "hb.json", "s").beat(state="busy")


def test_no_path_means_no_writes(tmp_path):
    w = HeartbeatWriter(None, "s")
    assert not w.enabled and not w.beat(steps=1) and not w.flush()
    w.done()
    assert list(tmp_path.iterdir()) == []


def test_from_env(tmp_path, monkeypatch):
    path = tmp_path / "hb.json"
    monkeypatch.setenv(HEARTBEAT_ENV, str(path))
    monkeypatch.setenv(ATTEMPT_ENV, "4")
    w = HeartbeatWriter.from_env("s")
    w.beat(steps=1)
    assert read_heartbeat(path)["attempt"] == 4
    monkeypatch.delenv(HEARTBEAT_ENV)
    monkeypatch.setenv(ATTEMPT_ENV, "garbage")
    w = HeartbeatWriter.from_env("s")
    assert not w.enabled and w.attempt == 0


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "hb.json"
    w = HeartbeatWriter(path, "s", min_interval=0)
    for i in range(20):
        w.beat(steps=i)
    assert [p.name for p in tmp_path.iterdir()] == ["hb.json"]
    write_json_atomic(tmp_path / "status.json", {"a": 1})
    assert json.loads((tmp_path / "status.json").read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hb.json", "status.json"]


def test_failed_atomic_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "status.json"
    write_json_atomic(path, {"ok": True})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"ok": True}
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


GOOD = {"pid": 5, "steps": 1, "episodes": 0, "time": 1.5, "state": "running", "shard": "s"}


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{",
        '{"pid": 5, "steps": 1',  # torn
        "[1, 2]",
        "null",
        json.dumps({**GOOD, "state": "busy"}),
        json.dumps({**GOOD, "steps": "many"}),
        json.dumps({**GOOD, "steps": -1}),
        json.dumps({**GOOD, "episodes": True}),
        json.dumps({**GOOD, "time": "now"}),
        json.dumps({**GOOD, "attempt": "x"}),
        json.dumps({k: v for k, v in GOOD.items() if k != "pid"}),
    ],
)
def test_garbled_heartbeats_read_as_none(tmp_path, content):
    path = tmp_path / "hb.json"
    path.write_text(content)
    assert read_heartbeat(path) is None


def test_missing_heartbeat_reads_as_none(tmp_path):
    assert read_heartbeat(tmp_path / "nope.json") is None
    assert read_heartbeat(tmp_path) is None  # a folder


def test_good_heartbeat_without_optional_fields(tmp_path):
    path = tmp_path / "hb.json"
    path.write_text(json.dumps({k: v for k, v in GOOD.items() if k != "shard"}))
    assert read_heartbeat(path) == {**GOOD, "shard": ""}
    path.write_text(json.dumps({**GOOD, "time": 2, "attempt": 3}))
    assert read_heartbeat(path) == {**GOOD, "time": 2.0, "attempt": 3}
