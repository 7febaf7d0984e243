"""The hand-off between a Ray worker task and its runner (backends/ray/worker_task.py `Relay`), played step by
step with the runner's side written by hand (a claim file, record lines): a shard's last record lines, written just
before the runner claims the next shard, reach the sink before the task stops following that shard's file.
Ray's `get` and the actors stand in as plain calls: the relay's logic, not Ray, is what is tested here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

from evalfleet.backends.ray.worker_task import Relay
from evalfleet.execution.claims import claim_name
from evalfleet.experiment.plan import Shard
from evalfleet.layout import part_path


class Call:
    def __init__(self, fn):
        self.remote = fn


class Sink:
    """The record sink's two calls the relay makes, answered at once."""

    def __init__(self) -> None:
        self.pushed: list[tuple[str, str, list[str]]] = []
        self.known = Call(lambda run, start, stop: [])
        self.push = Call(lambda run, shard_id, lines, files: self.pushed.append((run, shard_id, list(lines))))


class NoRay:
    @staticmethod
    def get(value: Any) -> Any:
        return value


def relay_for(tmp_path: Path, sink: Sink) -> Relay:
    relay = Relay(tmp_path, 0, sink)
    relay.ray = NoRay()
    return relay


def runner_claims(relay: Relay, shard: Shard) -> None:
    (relay.claims / claim_name(shard)).write_text("0")


def runner_records(relay: Relay, shard: Shard, episode: int) -> None:
    path = part_path(relay.folder, shard.run, shard.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(f'{{"run": "{shard.run}", "episode": {episode}, "status": "success"}}\n')


def test_the_last_lines_of_a_shard_reach_the_sink_when_the_runner_moves_on(tmp_path):
    sink = Sink()
    relay = relay_for(tmp_path, sink)
    a, b, c = Shard("r", 0, 2), Shard("r", 2, 4), Shard("r", 4, 6)
    queue = [("shard", (b.run, b.start, b.stop)), ("shard", (c.run, c.start, c.stop))]
    relay.hand(a)
    runner_claims(relay, a)
    relay.hand_next(lambda: queue.pop(0))  # the runner began a: b is handed before it is needed
    assert relay.handed == [a, b]
    runner_records(relay, a, 0)
    relay.push()  # the loop's push of this round: episode 0
    runner_records(relay, a, 1)  # a's last episode, written right after that push
    runner_claims(relay, b)  # ... and the runner moves on to b
    relay.hand_next(lambda: queue.pop(0))  # c handed; a is no longer followed
    runner_records(relay, b, 2)
    relay.push()
    assert [(shard_id, len(lines)) for _, shard_id, lines in sink.pushed] == [(a.id, 1), (a.id, 1), (b.id, 1)]
    assert relay.handed == [a, b, c] and a not in relay.tails


def test_nothing_is_taken_while_the_runner_has_not_begun_the_last_shard_and_done_closes_the_feed(tmp_path):
    relay = relay_for(tmp_path, Sink())
    a = Shard("r", 0, 2)
    relay.hand(a)
    taken: list[int] = []
    relay.hand_next(lambda: taken.append(1) or ("wait", None))
    assert taken == []  # a is not claimed yet: the runner has a shard it has not begun
    runner_claims(relay, a)
    relay.hand_next(lambda: ("wait", None))
    assert not relay.feed.closed and relay.handed == [a]
    relay.hand_next(lambda: ("done", None))
    assert relay.feed.closed
