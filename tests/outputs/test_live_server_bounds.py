"""The live server's served set, its open that a swapped link cannot bend, and its bounds (#52, findings 1, 4, 5
and the IPv6 bind): only the report's own files are sent (never experiment.yaml, metadata, records, logs or a
tracking database, even tokenless on loopback), a folder or file swapped for a link between the check and the
open is refused, a half-sent request is closed after the request timeout, connections and /events streams are
capped, files are streamed, and every thread is freed when the clients go. A Hypothesis property test drives
random request targets and headers: nothing outside the served set is ever returned."""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from outputs_helpers import record, write_status

from evalfleet.analysis import local_files
from evalfleet.analysis.local_files import RefusedFile, open_regular
from evalfleet.outputs.live_server import LiveReport, LiveServer, may_serve
from evalfleet.outputs.storage import open_location

SECRET = b"SECRET-MARKER-52"
SERVED = {"plots/success.png": b"png bytes", "report_episodes/0000.js": b"table();",
          "a/videos/front/ep-0000.mp4": b"mp4 bytes", "a/arena_attempts/attempt-001/x-episode-0.mp4": b"arena mp4"}
NOT_SERVED = ["experiment.yaml", "experiment_metadata.json", "experiment_result.json", "a/episode_results.jsonl",
              "a/parts/0-2-a1.jsonl", "a/run_status.json", "a/server.log", "tracking/mlflow.db", "a/protocol.json",
              "plots/notes.txt", "report_episodes/sub/0000.js", "b/videos/ep.mp4", "passwd", "a/videos/link.mp4",
              "plots/link.png", ".evalfleet/worker-0.log"]


def request(server: LiveServer, path: str, headers: dict | None = None) -> tuple[int, bytes, dict]:
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
    try:
        conn.putrequest("GET", path, skip_accept_encoding=True, skip_host="Host" in (headers or {}))
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.getheaders())
    finally:
        conn.close()


def make_folder(root: Path) -> Path:
    out = root / "out"
    write_status(out / "a", planned=2, state="running")
    (out / "a" / "parts").mkdir(parents=True, exist_ok=True)
    (out / "a" / "parts" / "0-2-a1.jsonl").write_text(
        __import__("json").dumps({**record("a", 0, "success"), "note": SECRET.decode()}) + "\n")
    for rel, body in SERVED.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(body)
    for rel in NOT_SERVED:
        path = out / rel
        if not path.exists() and "link" not in rel:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(SECRET)
    (root / "outside.mp4").write_bytes(SECRET)
    os.symlink(root / "outside.mp4", out / "a" / "videos" / "link.mp4")
    os.symlink(root / "outside.mp4", out / "plots" / "link.png")
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return make_folder(tmp_path_factory.mktemp("served"))


@pytest.fixture(scope="module")
def tokenless(folder: Path):
    """What `evalfleet watch OUT` starts: no token, loopback."""
    server = LiveServer(LiveReport(open_location(str(folder)), title="t"), "127.0.0.1", 0, None)
    server.start()
    yield server
    server.stop()


def test_only_the_reports_own_files_are_served(tokenless) -> None:
    """Finding 1, second half: the loopback server sent every non-hidden file of the folder (and `watch /etc`
    sent /passwd); now the report's images, episode tables and the Runs' videos, nothing else."""
    for rel, body in SERVED.items():
        assert request(tokenless, "/" + rel)[:2] == (200, body), rel
    for rel in NOT_SERVED:
        status, body, _ = request(tokenless, "/" + quote(rel))
        assert status == 404 and SECRET not in body, rel


def test_the_rule_names_the_served_set() -> None:
    runs = {"a"}
    assert may_serve("plots/success.png", runs) and may_serve("plots/sub/x.SVG", runs)
    assert may_serve("report_episodes/0003.js", runs) and may_serve("a/videos/c/e.webm", runs)
    assert may_serve("report_episodes/trajectories/0003-000012.js", runs)  # a recorded episode's plot data
    assert may_serve("a/trajectories/episode_000012.arrow", runs) and may_serve("a/trajectories/c/e.mp4", runs)
    for rel in ("a", "plots", "a/x.json", "b/x.mp4", "a/.hidden/x.mp4", "a/../a/x.mp4", "plots//x.png",
                "a\\..\\x.mp4", "report_episodes/x.mp4", "index.html", "experiment.yaml",
                "report_episodes/sub/0000.js", "report_episodes/trajectories/x/0000.js", "b/trajectories/e.arrow",
                "a/trajectories/e.parquet",
                "a/parts/e.arrow", "a/trajectories/.tmp-1-e.arrow", "a/trajectories/c/e.arrow"):
        assert not may_serve(rel, runs), rel


def swap_after_check(monkeypatch, swap) -> None:
    """Run `swap` right after the check and before the open: the window the finding's race hit 4 times in 3,000
    requests, made certain."""
    checked = local_files.kind_inside

    def check_then_swap(root: str, path: str):
        answer = checked(root, path)
        swap()
        return answer

    monkeypatch.setattr(local_files, "kind_inside", check_then_swap)


def test_a_folder_swapped_for_a_link_after_the_check_is_refused(tmp_path: Path, monkeypatch) -> None:
    """Finding 4: the check passed, then `videos/` became a link to an outside folder: the old open followed it."""
    out = tmp_path / "out"
    (out / "a" / "videos").mkdir(parents=True)
    (out / "a" / "videos" / "ep.mp4").write_bytes(b"inside")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "ep.mp4").write_bytes(SECRET)

    def swap() -> None:
        os.rename(out / "a" / "videos", out / "a" / "videos.old")
        os.symlink(tmp_path / "elsewhere", out / "a" / "videos")

    swap_after_check(monkeypatch, swap)
    with pytest.raises(RefusedFile):
        open_regular(str(out), str(out / "a" / "videos" / "ep.mp4"))


def test_a_file_swapped_for_a_link_after_the_check_is_refused(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "out"
    (out / "a").mkdir(parents=True)
    (out / "a" / "ep.mp4").write_bytes(b"inside")
    (tmp_path / "outside.mp4").write_bytes(SECRET)

    def swap() -> None:
        os.unlink(out / "a" / "ep.mp4")
        os.symlink(tmp_path / "outside.mp4", out / "a" / "ep.mp4")

    swap_after_check(monkeypatch, swap)
    with pytest.raises(RefusedFile):
        open_regular(str(out), str(out / "a" / "ep.mp4"))


def test_a_link_that_stays_inside_is_still_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "real").mkdir(parents=True)
    (out / "real" / "ep.mp4").write_bytes(b"inside")
    os.symlink(out / "real", out / "alias")
    with open_regular(str(out), str(out / "alias" / "ep.mp4")) as f:
        assert f.read() == b"inside"


SEGMENTS = st.sampled_from(["a", "b", "plots", "report_episodes", "videos", "front", "ep-0000.mp4", "success.png",
                            "0000.js", "..", ".", "", ".evalfleet", "link.mp4", "link.png", "experiment.yaml",
                            "run_status.json", "parts", "passwd", "mlflow.db", "tracking", "%2e%2e", "%2f", "..%2f",
                            "%00", "\\", "é", "%c0%ae", "outside.mp4", "server.log"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(SEGMENTS, min_size=0, max_size=6), query=st.sampled_from(["", "?token=x", "?a=b&token=",
                                                                               "#frag", "?%0d%0aX: y"]),
       host=st.sampled_from(["127.0.0.1:{port}", "localhost", "[::1]:{port}", "evil.example", "127.0.0.1:1", ""]),
       cookie=st.sampled_from([None, "evalfleet_live_token=abc", "a=b; evalfleet_live_token=\u00e9"]))
def test_no_request_gets_anything_outside_the_served_set(tokenless, parts, query, host, cookie) -> None:
    target = "/" + "/".join(parts) + query
    headers = {"Host": host.format(port=tokenless.server_address[1])}
    if cookie is not None:
        headers["Cookie"] = cookie
    status, body = raw_request(tokenless, target.encode("utf-8"), headers)
    assert SECRET not in body
    if status == 200:
        assert body in SERVED.values() or b"(live)" in body, target


def raw_request(server: LiveServer, target: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """The request sent byte for byte as given (http.client refuses some of these targets); (status, body)."""
    head = b"GET " + target + b" HTTP/1.1\r\n" + b"".join(
        f"{k}: {v}\r\n".encode("utf-8") for k, v in headers.items()) + b"Connection: close\r\n\r\n"
    with socket.create_connection(server.server_address[:2], timeout=60) as sock:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def raw_connection(server: LiveServer) -> socket.socket:
    sock = socket.create_connection(server.server_address[:2], timeout=60)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never finished
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed `sock` (waits for it, up to the socket's own 60 s)."""
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def eventually(condition, what: str, limit_s: float = 60.0) -> None:
    """Wait for `condition` (a thread ending, a slot freed) with a limit only a hang would reach."""
    end = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < end, what
        time.sleep(0.02)


@pytest.fixture
def bounded(folder: Path):
    server = LiveServer(LiveReport(open_location(str(folder)), title="t"), "127.0.0.1", 0, None,
                        max_connections=6, max_streams=2, request_timeout_s=0.5)
    server.start()
    yield server
    server.stop()


def test_a_half_sent_request_is_closed_after_the_request_timeout(bounded) -> None:
    """Finding 5: no socket timeout: 400 half-sent requests held 400 threads for ever."""
    sock = raw_connection(bounded)
    assert closed_by_server(sock)
    sock.close()


def test_connections_past_the_bound_are_closed_and_the_server_keeps_answering(folder: Path) -> None:
    server = LiveServer(LiveReport(open_location(str(folder)), title="t"), "127.0.0.1", 0, None,
                        max_connections=4, max_streams=2, request_timeout_s=60)
    server.start()
    try:
        before = threading.active_count()
        held = [raw_connection(server) for _ in range(4)]
        eventually(lambda: threading.active_count() >= before + 4, "four request threads")
        extra = raw_connection(server)
        assert closed_by_server(extra)  # past the bound: closed at once, no thread
        extra.close()
        for sock in held:
            sock.close()  # the clients go: their threads end and free their slots
        eventually(lambda: threading.active_count() <= before, "every request thread freed")
        assert request(server, "/plots/success.png")[:2] == (200, SERVED["plots/success.png"])
    finally:
        server.stop()


def test_event_streams_past_the_bound_get_503_and_pages_still_load(bounded) -> None:
    streams = []
    for _ in range(2):
        conn = http.client.HTTPConnection(*bounded.server_address[:2], timeout=60)
        conn.request("GET", "/events")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.fp.readline().startswith(b"data: ")
        streams.append(conn)
    status, _, headers = request(bounded, "/events")
    assert status == 503 and headers.get("Retry-After") == "10"
    status, body, _ = request(bounded, "/")
    assert status == 200 and b"(live)" in body
    for conn in streams:
        conn.close()


def test_a_large_file_is_sent_whole_in_pieces(tmp_path: Path) -> None:
    out = make_folder(tmp_path)
    big = os.urandom(1024) * 3000  # 3 MB, more than ten pieces
    (out / "a" / "videos" / "big.mp4").write_bytes(big)
    server = LiveServer(LiveReport(open_location(str(out)), title="t"), "127.0.0.1", 0, None)
    server.start()
    try:
        status, body, headers = request(server, "/a/videos/big.mp4")
        assert status == 200 and body == big and headers["Content-Length"] == str(len(big))
    finally:
        server.stop()


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_an_ipv6_address_binds(folder: Path) -> None:
    """Polish: `--host ::1` failed with 'cannot listen ... choose another port' (an IPv4 socket for an IPv6
    address)."""
    server = LiveServer(LiveReport(open_location(str(folder)), title="t"), "::1", 0, None)
    server.start()
    try:
        assert server.url.startswith("http://[::1]:")
        conn = http.client.HTTPConnection("::1", server.server_address[1], timeout=60)
        conn.request("GET", "/plots/success.png")
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (200, SERVED["plots/success.png"])
        conn.close()
    finally:
        server.stop()
