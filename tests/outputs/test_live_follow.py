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
    # the path sent as given, never normalised; a `Host` given replaces the one http.client would send
    conn.putrequest("GET", path, skip_accept_encoding=True, skip_host="Host" in (headers or {}))
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


@pytest.fixture(scope="module")
def tokenless(tmp_path_factory):
    """A tokenless server on loopback (what `evalfleet watch DIR` starts)."""
    out = tmp_path_factory.mktemp("tokenless") / "out"
    write_status(out / "a", planned=2, state="running")
    append(out / "a" / "parts" / "0-2-a1.jsonl", line(record("a", 0, "success")))
    (out / "experiment_metadata.json").write_text('{"command": "evalfleet run --secret-flag"}')
    server = LiveServer(LiveReport(open_location(str(out)), title="t"), "127.0.0.1", 0, None)
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:{port}", "127.0.0.1.nip.io:{port}",
                                  "127.0.0.1:1", "", "[::1]:1"])
def test_a_request_addressed_to_another_name_gets_nothing(tokenless, host: str) -> None:
    """DNS rebinding (#52, finding 1): a page whose own name now resolves to 127.0.0.1 sends its own name as
    `Host`; the tokenless loopback server answers it with nothing of the folder."""
    port = tokenless.server_address[1]
    for path in ("/", "/events", "/experiment_metadata.json"):
        status, body, _ = get(tokenless, path, {"Host": host.format(port=port)})
        assert status == 421 and b"secret-flag" not in body and b"(live)" not in body, (host, path)


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST", "[::1]:{port}", "127.0.0.1"])
def test_a_request_addressed_to_a_loopback_name_is_answered(tokenless, host: str) -> None:
    status, body, _ = get(tokenless, "/", {"Host": host.format(port=tokenless.server_address[1])})
    assert status == 200 and b"(live)" in body


def test_a_token_given_beside_a_valid_cookie_never_reaches_a_header(served) -> None:
    """#52, finding 6: a `?token=` that is not the token, next to the right cookie, is neither echoed into
    Set-Cookie (CR/LF would inject headers) nor crashes the handler (a value outside Latin-1)."""
    server, token = served
    cookie = {"Cookie": f"evalfleet_live_token={token}"}
    for given in ("x%0d%0aX-Injected:%20yes", "%0d%0aSet-Cookie:%20evil=1", "%C3%A9t%C3%A9" * 4, "%E2%82%AC" * 8):
        status, body, headers = get(server, f"/?token={given}", cookie)
        assert status == 200 and b"(live)" in body, given
        assert "X-Injected" not in headers and "Set-Cookie" not in headers, headers
    status, _, headers = get(server, f"/?token={token}")
    assert status == 200 and headers["Set-Cookie"].startswith(f"evalfleet_live_token={token};")


@pytest.mark.parametrize("path", ["/a%00b", "/a/videos/ep.mp4%00", "/%0d%0a", "/a/%7f"])
def test_a_control_character_in_the_path_is_not_found(served, path: str) -> None:
    """#52, polish: a NUL byte in a URL path printed a traceback (the open's ValueError); now a plain 404."""
    server, token = served
    status, body, _ = get(server, f"{path}?token={token}")
    assert status == 404 and body == b"not found\n"
    assert get(server, f"/?token={token}")[0] == 200  # still serving


def test_a_token_outside_the_url_safe_characters_is_refused() -> None:
    for token in ("a" * 16 + "\r\nX: y", "ü" * 16, "a b" * 8, "a;b" * 8):
        with pytest.raises(UserError, match="a token may hold only letters, digits"):
            check_token("0.0.0.0", token)
    assert check_token("0.0.0.0", "Az09-_.~" * 2) == "Az09-_.~" * 2


def test_a_run_the_experiment_names_before_its_folder_exists_is_waiting(tmp_path: Path) -> None:
    """#52, finding 8: `watch` stopped with an AttributeError when experiment.yaml named a Run whose folder did
    not exist yet (a Run no worker had reached)."""
    out = tmp_path / "out"
    append(out / "a" / "parts" / "0-2-a1.jsonl", line(record("a", 0, "success")))
    run = "{environment: {type: metaworld, task: push-v3}, policy: {type: metaworld_expert}, " \
          "rollout_limit: {num_episodes: 2}}"
    (out / "experiment.yaml").write_text(f"name: t\nruns:\n  a: {run}\n  b: {run}\n")
    follower = FolderFollower(open_location(str(out)))
    follower.refresh()
    view = live_view(follower)
    runs = {r["run"]: r for r in view["runs"]}
    assert runs["b"]["state"] == "waiting" and runs["b"]["done"] == 0 and runs["b"]["videos"] == []
    assert runs["a"]["done"] == 1 and view["planned"] == 4


def test_markup_in_a_value_can_neither_end_nor_bend_the_pages_script() -> None:
    """#52, polish: `<!--<script>` in a Run's reason blanked the live page (the HTML parser's script states)."""
    from evalfleet.outputs.live_page import live_page

    reason = "<!--<script>x</script><!-- </SCRIPT "
    view = {"version": 1, "finished": False, "status": "running", "updated": "", "done": 0, "planned": None,
            "eta_text": "", "runs": [{"run": "a", "reason": reason}], "comparisons": []}
    page = live_page("t", view)
    inline = page.split("\ndraw(", 1)[1].split(");\n", 1)[0]
    assert "<" not in inline and json.loads(inline)["runs"][0]["reason"] == reason
