"""The in-flight file is rewritten in place (rollout/inflight.py): what a relaunched runner reads is always the
last write, whatever the earlier texts' lengths, a stale file of an earlier process included."""

from __future__ import annotations

import json
from pathlib import Path

from evalfleet.rollout.inflight import PAGE, InFlight, write_in_place


def test_each_read_sees_the_last_write_whatever_the_lengths_before(tmp_path: Path) -> None:
    path = tmp_path / "w.heartbeat.inflight.json"
    path.write_text("{" + "x" * 3000)  # an earlier process's garbled, longer file
    in_flight = InFlight(path)
    in_flight.clear()
    assert in_flight.read() == [] and json.loads(path.read_text())["in_flight"] == []
    assert path.stat().st_size < 100  # the first write truncated the stale text
    for slot, run in enumerate(["a_much_longer_run_name_than_the_next" * 3, "b", "c"]):
        in_flight.started(slot, run, "000010", episode=slot + 3, attempt=1)
    assert [(e["run"], e["episode"]) for e in in_flight.read()] == [("a_much_longer_run_name_than_the_next" * 3, 3),
                                                                    ("b", 4), ("c", 5)]
    in_flight._slots.clear()
    in_flight.started(0, "b", "000010", episode=9, attempt=2)  # shorter than before: blanks pad the rest
    assert [(e["run"], e["episode"], e["attempt"]) for e in in_flight.read()] == [("b", 9, 2)]
    assert path.read_text().endswith(" ")


def test_a_text_over_a_page_is_replaced_whole_and_in_place_writes_resume_below_it(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    width = write_in_place(path, {"k": "v"}, None)
    width = write_in_place(path, {"k": "v" * (PAGE + 10)}, width)
    assert json.loads(path.read_text())["k"] == "v" * (PAGE + 10) and width == path.stat().st_size
    width = write_in_place(path, {"k": "w"}, width)  # the file is a page and more: replaced, to its new size
    assert json.loads(path.read_text()) == {"k": "w"} and path.stat().st_size == width <= PAGE
    width = write_in_place(path, {"k": "ww"}, width)
    assert json.loads(path.read_text()) == {"k": "ww"} and not list(tmp_path.glob(".*.tmp"))
