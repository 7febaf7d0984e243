"""The live report's follower and server (issue #27): records read incrementally (a torn line read once whole, a
rewritten file read again, counts equal to collect's), the token checked on every request including /events,
and nothing served from outside the folder (`..`, encoded `..`, hidden folders, a link leading out)."""

from __future__ import annotations

import http.client
import json
import os
from pathlib import Path

import pytest
from outputs_helpers import record, write_status

from evalfleet.errors import UserError
from evalfleet.outputs.collect import collect
from evalfleet.outputs.live_follow import FolderFollower
from evalfleet.outputs.live_page import live_view
from evalfleet.outputs.live_server import LiveReport, LiveServer, check_token, parse_bind
from evalfleet.outputs.storage import open_location


def append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def line(rec: dict) -> str:
    return json.dumps(rec) + "\n"


def test_follower_reads_only_what_is_new_and_agrees_with_collect(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_status(out / "a", planned=6, state="running")
    part = out / "a" / "parts" / "0-6-a1.jsonl"
    follower = FolderFollower(open_location(str(out)))
    follower.refresh()
    assert follower.runs["a"].done == 0 and follower.runs["a"].planned == 6

    append(part, line(record("a", 0, "success")) + line(record("a", 1, "failure")) + '{"run": "a", "epi')
    assert follower.refresh()
    run = follower.runs["a"]
    tail = run.tails["a/parts/0-6-a1.jsonl"]
    assert run.counts == {"success": 1, "failure": 1, "error": 0} and tail.offset == len(
        line(record("a", 0, "success")) + line(record("a", 1, "failure")))  # the torn line is not consumed
    assert not follower.refresh()  # nothing new: nothing changed

    # The torn line completed, a retry of episode 1 that succeeds, another Run's record, a second shard.
    append(part, 'sode": 9}\n' + line(record("a", 1, "success", attempt=2)) + line(record("b", 2, "success")))
    append(out / "a" / "parts" / "1-6-a1.jsonl", line(record("a", 2, "error")) + line(record("a", 3, "success")))
    follower.refresh()
    view = live_view(follower)["runs"][0]
    assert view["counts"] == {"success": 3, "failure": 0, "error": 1} and view["done"] == 4
    assert view["set_aside"] == 2  # the out-of-plan episode 9 and Run b's record, as collect sets them aside

    collected = collect([str(out)], str(tmp_path / "collected"))["runs"]["a"]
    assert view["rate_text"].startswith("100.0% [") and view["ci95"] == collected["ci95"]
    assert view["set_aside"] == collected["set_aside"]["total"]

    # A rewrite that is not an append (another file in its place, shorter or not): the Run is read again.
    part.write_text(line(record("a", 0, "failure")))
    follower.refresh()
    assert follower.runs["a"].counts == {"success": 1, "failure": 1, "error": 1}


def test_follower_switches_to_the_collected_report(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_status(out / "a", planned=2, state="completed")
    append(out / "a" / "parts" / "0-2-a1.jsonl", line(record("a", 0, "success")) + line(record("a", 1, "success")))
    (out / "experiment_metadata.json").write_text(json.dumps({"status": "running"}))
    follower = FolderFollower(open_location(str(out)))
    collect([str(out)], str(out), report=True)  # index.html is there, but the run still says running
    follower.refresh()
    assert not follower.finished
    (out / "experiment_metadata.json").write_text(json.dumps({"status": "finished"}))
    follower.refresh()
    assert follower.finished and follower.runs["a"].done == 2  # the merged file read too, nothing counted twice


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server with a token on 127.0.0.1 over a folder with a link leading out and a hidden folder."""
    root = tmp_path_factory.mktemp("live")
    out = root / "out"
    write_status(out / "a", planned=2, state="running")
    append(out / "a" / "parts" / "0-2-a1.jsonl", line(record("a", 0, "success")))
    (out / "a" / "videos").mkdir()
    (out / "a" / "videos" / "ep.mp4").write_bytes(b"mp4 bytes")
    (out / ".evalfleet").mkdir()
    (out / ".evalfleet" / "inside.txt").write_text("internal")
    (root / "secret.txt").write_text("outside")
    os.symlink(root / "secret.txt", out / "a" / "videos" / "link.mp4")
    token = "t" * 24
    server = LiveServer(LiveReport(open_location(str(out)), title="t"), "127.0.0.1", 0, token)
    server.start()
    yield server, token
    server.stop()


def get(server: LiveServer, path: str, headers: dict | None = None, read: bool = True) -> tuple[int, bytes, dict]:
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
    conn.putrequest("GET", path, skip_accept_encoding=True)  # the path sent as given, never normalised
    for k, v in (headers or {}).items():
        conn.putheader(k, v)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read() if read else resp.fp.readline() + resp.fp.readline()
    conn.close()
    return resp.status, body, dict(resp.getheaders())


def test_token_is_checked_on_every_request(served) -> None:
    server, token = served
    for path in ("/", "/events", "/a/videos/ep.mp4", f"/?token={'x' * 24}"):
        assert get(server, path)[0] == 403, path
    status, body, headers = get(server, f"/?token={token}")
    assert status == 200 and b"(live)" in body
    cookie = headers["Set-Cookie"].split(";")[0]
    assert get(server, "/a/videos/ep.mp4", {"Cookie": cookie})[1] == b"mp4 bytes"  # the page's own requests
    status, first, _ = get(server, f"/events?token={token}", read=False)
    assert status == 200 and json.loads(first.split(b"data: ", 1)[1])["runs"][0]["done"] == 1
    assert get(server, "/events", {"Cookie": "evalfleet_live_token=" + "y" * 24})[0] == 403


@pytest.mark.parametrize("path", ["/../secret.txt", "/a/../../secret.txt", "/%2e%2e/secret.txt",
                                  "/a/videos/link.mp4", "/.evalfleet/inside.txt", "/a//videos/ep.mp4",
                                  "/a/videos/..%2f..%2f..%2fsecret.txt"])
def test_nothing_outside_the_folder_is_served(served, path: str) -> None:
    server, token = served
    status, body, _ = get(server, path + f"?token={token}")
    assert status == 404 and b"outside" not in body and b"internal" not in body


def test_bind_and_token_rules() -> None:
    assert parse_bind("8080", key="--serve-report") == ("127.0.0.1", 8080)
    assert parse_bind("0.0.0.0:0", key="--serve-report") == ("0.0.0.0", 0)
    with pytest.raises(UserError, match="--serve-report"):
        parse_bind("host:port", key="--serve-report")
    assert check_token("127.0.0.1", None) is None and check_token("::1", None) is None
    generated = check_token("0.0.0.0", None)
    assert generated and len(generated) >= 16 and generated != check_token("0.0.0.0", None)
    with pytest.raises(UserError, match="--token"):
        check_token("0.0.0.0", "short")


def test_a_bad_serve_report_value_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    import subprocess

    from evalfleet_testkit import ROOT, evalfleet_cmd

    exp = tmp_path / "exp.yaml"
    exp.write_text("name: t\nruns:\n  a:\n    environment: {type: metaworld, task: push-v3}\n"
                   "    policy: {type: metaworld_expert}\n    rollout_limit: {num_episodes: 1}\n")
    done = subprocess.run(evalfleet_cmd("run", str(exp), "--output", str(tmp_path / "out"), "--serve-report",
                                        "localhost:http"), cwd=ROOT, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "--serve-report" in done.stderr and "[HOST:]PORT" in done.stderr
    assert not (tmp_path / "out").exists()
