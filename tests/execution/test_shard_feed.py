"""The shard feed between a driver and runners that keep running (execution/shard_feed.py, issue #57), with real
threads and files: a runner waits for what the driver has not released yet, takes each shard once, resumes its own
claims when it starts again, says it is waiting in its heartbeat, and ends when the feed is closed."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from evalfleet.execution.shard_feed import ShardFeed, fed_shards
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import Shard, make_plan
from evalfleet.rollout.heartbeat import HeartbeatWriter
from evalfleet_testkit import wait_for


@pytest.fixture
def plan(tmp_path: Path):
    path = tmp_path / "experiment.yaml"
    path.write_text("name: feed\nshared:\n  environment: {type: metaworld, task: reach-v3}\n"
                    "  policy: {type: metaworld_expert}\n  rollout_limit: {num_episodes: 8}\n"
                    "runs:\n  a: {}\n  b: {}\n")
    return make_plan(load_experiment(str(path), []), workers=1)


class Runner:
    """One runner's side of the feed on a thread of its own: the shards it took, in order."""

    def __init__(self, feed: ShardFeed, plan, claims: Path, worker: str, heartbeat: HeartbeatWriter | None = None):
        self.took: list[Shard] = []
        self.stop = threading.Event()
        self.shards = fed_shards(feed.folder, plan, claims, worker, self.stop, heartbeat)
        self.thread = threading.Thread(target=self._take)
        self.thread.start()

    def _take(self) -> None:
        for shard in self.shards:
            self.took.append(shard)

    def ended(self) -> bool:
        self.thread.join(timeout=20)
        return not self.thread.is_alive()


def feed_and_claims(tmp_path: Path) -> tuple[ShardFeed, Path]:
    claims = tmp_path / "claims"
    claims.mkdir()
    return ShardFeed(tmp_path / "feed").start(), claims


def test_a_runner_waits_for_what_is_released_and_ends_when_the_feed_closes(tmp_path, plan):
    feed, claims = feed_and_claims(tmp_path)
    runner = Runner(feed, plan, claims, "0")
    feed.release([Shard("a", 0, 2)])
    wait_for(lambda: runner.took == [Shard("a", 0, 2)], what="the first shard taken")
    assert runner.thread.is_alive()  # waiting: the feed is open
    feed.release([Shard("b", 0, 2), Shard("a", 2, 4)])
    wait_for(lambda: len(runner.took) == 3, what="the later shards taken")
    feed.close()
    assert runner.ended()
    assert runner.took == [Shard("a", 0, 2), Shard("b", 0, 2), Shard("a", 2, 4)]  # in the order released


def test_what_is_released_before_the_close_is_taken(tmp_path, plan):
    feed, claims = feed_and_claims(tmp_path)
    feed.release([Shard("a", 0, 4), Shard("b", 0, 4)])
    feed.close()
    runner = Runner(feed, plan, claims, "0")
    assert runner.ended() and runner.took == [Shard("a", 0, 4), Shard("b", 0, 4)]
    assert not feed.release([Shard("a", 4, 8)]) and feed.shards == [Shard("a", 0, 4), Shard("b", 0, 4)]


def test_two_runners_take_every_shard_once(tmp_path, plan):
    feed, claims = feed_and_claims(tmp_path)
    runners = [Runner(feed, plan, claims, str(w)) for w in range(2)]
    shards = [Shard(run, i, i + 1) for i in range(8) for run in ("a", "b")]
    for k in range(0, len(shards), 4):
        feed.release(shards[k:k + 4])
    feed.close()
    assert all(r.ended() for r in runners)
    taken = runners[0].took + runners[1].took
    assert sorted(taken, key=lambda s: (s.run, s.start)) == sorted(shards, key=lambda s: (s.run, s.start))


def test_a_runner_started_again_resumes_its_own_claims(tmp_path, plan):
    """A runner killed inside a shard left its claim: started again under the same worker name, it is offered that
    shard first (it skips what it had recorded); another worker never takes it."""
    feed, claims = feed_and_claims(tmp_path)
    feed.release([Shard("a", 0, 4)])
    first = fed_shards(feed.folder, plan, claims, "0", threading.Event())
    assert next(first) == Shard("a", 0, 4)
    first.close()  # the runner dies inside its shard
    feed.release([Shard("b", 0, 4)])
    feed.close()
    other = Runner(feed, plan, claims, "1")
    assert other.ended() and other.took == [Shard("b", 0, 4)]
    again = Runner(feed, plan, claims, "0")
    assert again.ended() and again.took == [Shard("a", 0, 4)]


def test_a_waiting_runner_says_so_in_its_heartbeat_and_stops_when_asked(tmp_path, plan):
    feed, claims = feed_and_claims(tmp_path)
    beat = tmp_path / "heartbeat.json"
    runner = Runner(feed, plan, claims, "0", HeartbeatWriter(beat, "", min_interval=0.0))

    def waiting_since() -> float | None:
        try:
            doc = json.loads(beat.read_text())
        except (OSError, ValueError):
            return None
        return doc["time"] if doc["state"] == "waiting" else None

    first = wait_for(waiting_since, what="a waiting heartbeat")
    wait_for(lambda: (waiting_since() or 0) > first, what="the waiting heartbeat rewritten")
    runner.stop.set()
    assert runner.ended() and runner.took == []
    assert not feed.closed
