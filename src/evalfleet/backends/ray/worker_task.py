"""The body of a Ray worker task (issue #57): one runner, started once under the watchdog in a private temp
folder, that runs every shard the task takes from the driver's shard queue (`shard_queue.ShardQueue`), keeping its
environments and policy between them as a local worker does; every new record line is pushed to the sink with the
files the runner wrote for its episode (its trajectory and the trajectory's camera videos). The folder is removed
when the task ends.

The task relays the queue into a shard feed in its folder (execution/shard_feed.py), which the runner reads with
`--feed`: it hands the runner a shard, with the Run's records of its range the sink already holds (a resumed or
retried shard skips what was recorded), and takes the next one as soon as the runner has claimed the last (it is
running it), so the runner never waits on the queue: a worker holds at most one shard it has not begun. It
closes the feed when the queue says its pool is done; the runner then ends. A task Ray runs again (its worker
process or node died) first resumes the shards it took."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml

from evalfleet.backends.ray.common import append_text
from evalfleet.execution.claims import claimed_by
from evalfleet.execution.invocation import runner_command
from evalfleet.execution.shard_feed import ShardFeed
from evalfleet.execution.watchdog import WatchdogConfig, WatchdogResult
from evalfleet.experiment.plan import Shard
from evalfleet.layout import EXPERIMENT_FILE, RUN_TIMINGS_DIR, part_path, records_path

POLL_S = 0.25  # how often the task pushes new record lines and looks whether its runner began its last shard
TASK_DIR_PREFIX = "evalfleet-ray-task-"  # + the worker's pid: a dead worker's folder is removed by the next task


class Relay:
    """The task's side of its runner's feed: shards handed over with their known records, lines pushed."""

    def __init__(self, folder: Path, worker: int, sink: Any):
        import ray

        self.ray, self.folder, self.worker, self.sink = ray, folder, worker, sink
        self.feed = ShardFeed(folder / "feed").start()
        self.claims = folder / "claims"
        self.claims.mkdir()
        self.handed: list[Shard] = []
        self.tails: dict[Shard, Any] = {}  # the shards whose lines may still grow: the last two handed

    def hand(self, shard: Shard) -> None:
        """The Run's records of the shard's range (what the sink holds) into the runner's records, then the shard
        into its feed."""
        from evalfleet.execution.progress import LogTail

        known = self.ray.get(self.sink.known.remote(shard.run, shard.start, shard.stop))
        records_path(self.folder, shard.run).parent.mkdir(parents=True, exist_ok=True)
        append_text(records_path(self.folder, shard.run), "".join(line + "\n" for line in known))
        self.handed.append(shard)
        self.tails[shard] = LogTail(part_path(self.folder, shard.run, shard.id))
        self.feed.release([shard])

    def runner_began_last(self) -> bool:
        """The runner claimed the last shard handed to it, so it is running it (it claims in the feed's order,
        each shard right before it runs it, and only once the one before is finished)."""
        return not self.handed or bool(claimed_by(self.claims, self.handed[-1:], self.worker))

    def push(self) -> None:
        for shard, tail in self.tails.items():
            lines = tail.new_lines()
            if lines:
                self.ray.get(self.sink.push.remote(shard.run, shard.id, lines,
                                                   episode_files(self.folder / shard.run, lines)))

    def hand_next(self, take: Any) -> None:
        """Once the runner began the last shard handed to it: `take()` the next from the queue and hand it over, or,
        when the queue says "done", close the feed (the runner finishes and ends)."""
        if self.feed.closed or not self.runner_began_last():
            return
        self.push()  # the runner wrote the shards before the last whole before it claimed the last
        self.forget_finished()
        kind, shard = take()
        if shard is not None:
            self.hand(Shard(*shard))
        elif kind == "done":
            self.feed.close()

    def forget_finished(self) -> None:
        """After a push made once the last shard was seen claimed: the shards before it are finished and their
        lines all pushed (a push made before that could miss their last lines)."""
        for shard in self.handed[:-1]:
            self.tails.pop(shard, None)


def run_worker(document: str, pool: str, worker: int, queue: Any, sink: Any, config: dict[str, Any],
               server: tuple[str, int] | None = None) -> dict[str, Any]:
    """Body of a worker task of `pool`: its shards from the queue, one runner under the watchdog for all of
    them, new records to the sink. `server`: (host, port) of the pool's policy server, wired into the client
    options of each of its Runs. Returns without starting a runner when the queue has nothing for it."""
    import ray

    from evalfleet.execution.watchdog import supervise

    _remove_stale_folders()
    first = [Shard(*s) for s in ray.get(queue.resume.remote(worker))]
    if not first:
        kind, shard = ray.get(queue.take.remote(pool, worker))
        if kind != "shard":
            return {"watchdog": None, "shards": []}  # the other workers took everything: no runner started
        first = [Shard(*shard)]
    tmp = Path(tempfile.mkdtemp(prefix=f"{TASK_DIR_PREFIX}{os.getpid()}-"))
    try:
        doc = yaml.safe_load(document)
        if server is not None:
            from evalfleet.serving.bindings import binding_for

            for run in doc["runs"].values():
                run["policy"] = binding_for(run["policy"]["type"]).wire_client(run["policy"], server[0],
                                                                               int(server[1]))
        (tmp / EXPERIMENT_FILE).write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        relay = Relay(tmp, worker, sink)
        for shard in first:
            relay.hand(shard)
        cmd = runner_command(tmp / EXPERIMENT_FILE, tmp, claim_dir=relay.claims, worker_id=worker,
                             feed=relay.feed.folder)
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        log_path = tmp / "runner.log"
        box: dict[str, Any] = {}
        stop_runner = threading.Event()

        def watch() -> None:
            try:
                with open(log_path, "ab") as log:
                    box["result"] = supervise(cmd, tmp / "heartbeat.json", WatchdogConfig(**config), env=env,
                                              stdout=log, stderr=log, status_file=tmp / "status.json",
                                              stop_event=stop_runner,
                                              log=lambda line: append_text(log_path, f"evalfleet watchdog: {line}\n"))
            except BaseException as exc:  # noqa: BLE001 - reported in the task's answer
                box["error"] = exc

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        try:
            while True:
                alive = thread.is_alive()
                relay.push()
                if not alive:
                    break
                relay.hand_next(lambda: ray.get(queue.take.remote(pool, worker)))
                thread.join(POLL_S)
        except BaseException:  # cancelled (KeyboardInterrupt from ray.cancel): stop the runner, keep its records
            stop_runner.set()
            thread.join(float(config.get("term_grace", 10.0)) + 5.0)
            relay.push()
            raise
        if "error" in box:
            raise box["error"]
        result: WatchdogResult = box["result"]
        log_tail = ""
        if result.state != "completed":
            try:
                log_tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:]) + "\n"
            except OSError:
                pass
        context = ray.get_runtime_context()
        return {"watchdog": dataclasses.asdict(result), "log_tail": log_tail, "node": context.get_node_id(),
                "placement_group": context.get_placement_group_id(), "server": list(server) if server else None,
                "shards": [(s.run, s.start, s.stop) for s in relay.handed],
                "timings": {run: _timings_files(tmp, run) for run in doc["runs"]}}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def episode_files(run_dir: Path, lines: list[str]) -> list[tuple[str, bytes]]:
    """The files the runner wrote for the episodes of these record lines, as (path in the Run folder, content):
    each one's trajectory and its camera videos (rollout/trajectory.py), and its recorded videos
    (`recording.video`, rollout/video.py). The runner closes them (and renames a trajectory's into place) before it
    writes the record line, so they are complete here; an episode recorded again later sends its files again, and
    the driver keeps the last."""
    from evalfleet.rollout.trajectory import camera_relpath, trajectory_relpath
    from evalfleet.rollout.video import video_relpath

    found: dict[str, bytes] = {}
    for line in lines:
        try:
            episode = json.loads(line).get("episode")
        except (ValueError, AttributeError):
            continue
        if not isinstance(episode, int) or isinstance(episode, bool) or episode < 0:
            continue
        for path in [*sorted(run_dir.glob(camera_relpath("*", episode))), run_dir / trajectory_relpath(episode),
                     *sorted(run_dir.glob(video_relpath("*", episode)))]:
            try:
                found[path.relative_to(run_dir).as_posix()] = path.read_bytes()
            except FileNotFoundError:
                continue  # an episode that keeps no trajectory
    return list(found.items())


def _timings_files(tmp: Path, run: str) -> dict[str, str]:
    """The runner's phase-timings files (`<run>/timings/<shard>-<worker>.json`) by name: the task folder is
    removed, so the driver writes them into the output folder where collect merges them."""
    found: dict[str, str] = {}
    for path in sorted((tmp / run / RUN_TIMINGS_DIR).glob("*.json")):
        try:
            found[path.name] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # timings are a report's detail: a file the runner did not finish is left out
    return found


def _remove_stale_folders() -> None:
    """Folders of shard tasks whose worker process was killed (Ray then retries the task elsewhere)."""
    for path in Path(tempfile.gettempdir()).glob(f"{TASK_DIR_PREFIX}*-*"):
        pid = path.name[len(TASK_DIR_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and os.path.exists("/proc/self"):
            shutil.rmtree(path, ignore_errors=True)
