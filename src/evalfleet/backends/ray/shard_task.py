"""The body of a shard task on a Ray worker: the runner under the watchdog in a private temp folder, the Run's
known records in, every new record line pushed to the sink with the files the runner wrote for its episode
(its trajectory and the trajectory's camera videos: the folder is removed when the task ends)."""

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

from evalfleet.execution.invocation import runner_command
from evalfleet.backends.ray.common import append_text
from evalfleet.execution.watchdog import WatchdogConfig, WatchdogResult
from evalfleet.experiment.plan import Shard
from evalfleet.layout import EXPERIMENT_FILE, RUN_TIMINGS_DIR, part_path, records_path

PUSH_INTERVAL_S = 0.5  # how often a shard task sends its new record lines to the driver
TASK_DIR_PREFIX = "evalfleet-ray-task-"  # + the worker's pid: a dead worker's folder is removed by the next task


def run_shard_on_worker(document: str, run: str, start: int, stop: int | None, sink: Any,
                        config: dict[str, Any], server: tuple[str, int] | None = None) -> dict[str, Any]:
    """Body of a shard task: the runner under the watchdog in a private folder, new records to the sink.
    `server`: (host, port) of the Run's policy server, wired into the client's options."""
    import ray

    from evalfleet.execution.progress import LogTail
    from evalfleet.execution.watchdog import supervise

    shard = Shard(run, start, stop)
    _remove_stale_folders()
    tmp = Path(tempfile.mkdtemp(prefix=f"{TASK_DIR_PREFIX}{os.getpid()}-"))
    try:
        if server is not None:
            from evalfleet.serving.bindings import binding_for

            doc = yaml.safe_load(document)
            policy = doc["runs"][run]["policy"]
            doc["runs"][run]["policy"] = binding_for(policy["type"]).wire_client(policy, server[0], int(server[1]))
            document = yaml.safe_dump(doc, sort_keys=False)
        (tmp / EXPERIMENT_FILE).write_text(document, encoding="utf-8")
        known = ray.get(sink.known.remote(run, start, stop))
        (tmp / run).mkdir(parents=True)
        records_path(tmp, run).write_text("".join(line + "\n" for line in known), encoding="utf-8")
        cmd = runner_command(tmp / EXPERIMENT_FILE, tmp, [shard])
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
        tail = LogTail(part_path(tmp, run, shard.id))
        try:
            while True:
                alive = thread.is_alive()
                lines = tail.new_lines()
                if lines:
                    ray.get(sink.push.remote(run, shard.id, lines, episode_files(tmp / run, lines)))
                if not alive:
                    break
                thread.join(PUSH_INTERVAL_S)
        except BaseException:  # cancelled (KeyboardInterrupt from ray.cancel): stop the runner, keep its records
            stop_runner.set()
            thread.join(float(config.get("term_grace", 10.0)) + 5.0)
            lines = tail.new_lines()
            if lines:
                ray.get(sink.push.remote(run, shard.id, lines, episode_files(tmp / run, lines)))
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
                "timings": _timings_files(tmp, run)}
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
