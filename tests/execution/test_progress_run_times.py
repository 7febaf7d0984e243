"""Per-Run times in the progress display count from that Run's first episode, not from the experiment start."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from evalfleet.execution.progress import ProgressTracker, format_elapsed, watch_progress


def append(out: Path, run: str, episode: int, end: float, duration: float, status: str = "success") -> None:
    path = out / run / "parts" / "shard_0000.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"run": run, "episode": episode, "status": status, "timestamp": end,
                            "duration_s": duration, "attempt": 1}) + "\n")


def test_each_run_counts_from_its_own_first_episode(tmp_path: Path) -> None:
    tracker = ProgressTracker(tmp_path, {"first": (2, 3), "second": (2, 3)})
    t0 = tracker.session_start
    # `first` runs 0..40 s; `second` starts only at 60 s (it waited for a free worker).
    append(tmp_path, "first", 0, t0 + 20, 20)
    append(tmp_path, "first", 1, t0 + 40, 20)
    append(tmp_path, "second", 0, t0 + 70, 10)
    tracker.poll()
    assert tracker.run_elapsed("first", now=t0 + 82) == 40  # finished: its span, frozen
    assert tracker.run_elapsed("second", now=t0 + 82) == 22  # running: since its first episode started (60 s)
    append(tmp_path, "second", 1, t0 + 80, 10)
    tracker.poll()
    assert tracker.run_elapsed("second", now=t0 + 500) == 20
    assert format_elapsed(tracker.run_elapsed("second", now=t0 + 500)) == "0:20"


def test_a_run_without_records_has_no_time_and_earlier_sessions_do_not_count(tmp_path: Path) -> None:
    # A resumed folder: episode 0 was recorded an hour ago, by an earlier session.
    append(tmp_path, "resumed", 0, time.time() - 3600, 30)
    tracker = ProgressTracker(tmp_path, {"resumed": (3, 3), "waiting": (3, 3)})
    tracker.poll()
    assert tracker.done("resumed") == 1
    assert tracker.run_elapsed("resumed") is None and tracker.run_elapsed("waiting") is None
    t0 = tracker.session_start
    append(tmp_path, "resumed", 1, t0 + 12, 5)
    tracker.poll()
    assert tracker.run_elapsed("resumed", now=t0 + 20) == 13
    assert format_elapsed(None) == "-" and format_elapsed(3725) == "1:02:05"


def test_errors_retried_keep_the_first_start(tmp_path: Path) -> None:
    tracker = ProgressTracker(tmp_path, {"r": (1, 3)})
    t0 = tracker.session_start
    append(tmp_path, "r", 0, t0 + 5, 5, status="error")
    append(tmp_path, "r", 0, t0 + 30, 10)
    tracker.poll()
    assert tracker.done("r") == 1 and tracker.run_elapsed("r", now=t0 + 99) == 30


def test_display_shows_per_run_times(tmp_path: Path, capsys) -> None:
    tracker = ProgressTracker(tmp_path, {"early_run": (1, 3), "late_run": (1, 3)})
    t0 = tracker.session_start
    append(tmp_path, "early_run", 0, t0 + 0.5, 0.5)
    append(tmp_path, "late_run", 0, t0 + 600, 65)  # a 65 s episode that started at 535 s
    done = threading.Thread(target=lambda: None)
    done.start()
    done.join()
    watch_progress([done], tracker, show=True)
    text = capsys.readouterr().out
    line = {row.split()[0]: row for row in text.splitlines() if row.strip().startswith(("early_run", "late_run"))}
    assert line["early_run"].rstrip().endswith("0:00"), text
    assert line["late_run"].rstrip().endswith("1:05"), text  # its own 65 s, not the 10 min since the start
