"""The live report's server, on the standard library's `ThreadingHTTPServer`.

`/` is the live page (`live_page`) until the run is collected, then the folder's own index.html, byte for byte;
`/events` pushes the page's JSON as server-sent events whenever it changes (a comment every few seconds keeps
the connection open). Any other path is served only if it is one of the report's own files (`may_serve`): an
image under `plots/`, an episode table `report_episodes/<N>.js` or a recorded episode's plot data
`report_episodes/trajectories/<N>.js`, a video inside a Run's folder, or a trajectory's frames
`<run>/trajectories/*.arrow` (the report links them). Nothing else
of the folder (experiment.yaml, metadata, records, logs, tracking databases) is ever sent. A local file is
opened from a descriptor of the folder without following links (`analysis.local_files.open_regular`), so a
file swapped for a link after the check is refused, and it is streamed in chunks, never read whole.

It binds to loopback unless told otherwise; any other host needs a token, checked on every request including
/events: `?token=T` (the page passes it on) or the cookie set when the token was given, compared in constant
time. Bound to loopback it answers only requests addressed to a loopback name (`Host: 127.0.0.1:PORT`,
`localhost`, `[::1]`): a web page whose own name was rebound to 127.0.0.1 (DNS rebinding) gets nothing.

Bounds: a connection that sends nothing for REQUEST_TIMEOUT_S is closed (a half-sent request, an idle keep-alive,
a reader that stopped reading); at most MAX_CONNECTIONS are served at once (more are closed at once) and at most
MAX_EVENT_STREAMS of them are /events streams (more get 503 with Retry-After; the page then polls again).
One thread (`LiveReport.follow`) refreshes the follower; request threads only read its latest view.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import mimetypes
import os
import re
import secrets
import shutil
import socket
import threading
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO
from urllib.parse import parse_qs, unquote, urlsplit

from evalfleet.errors import UserError
from evalfleet.layout import PLOTS_DIR, REPORT_DATA_DIR, REPORT_FILE, TRAJECTORIES_DIR
from evalfleet.outputs.live_follow import FolderFollower
from evalfleet.outputs.live_page import live_page, live_view
from evalfleet.outputs.storage import Location

log = logging.getLogger("evalfleet.outputs")

COOKIE = "evalfleet_live_token"
TOKEN_CHARACTERS = re.compile(r"[A-Za-z0-9_.~-]+")  # what a URL and a cookie carry as they are
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
REFRESH_S = 0.5  # how often the folder is looked at
KEEPALIVE_S = 10.0  # an SSE comment at least this often
REQUEST_TIMEOUT_S = 15.0  # a socket that neither sends nor takes anything this long is closed
MAX_CONNECTIONS = 1000  # connections served at once; more are closed as they come
MAX_EVENT_STREAMS = 100  # /events streams at once; more get 503 and the page's EventSource retries
CHUNK = 256 * 1024  # a file is sent in pieces of this size
SERVED_IMAGES = (".png", ".svg", ".jpg", ".jpeg")  # what collect draws into plots/
SERVED_VIDEOS = (".mp4", ".webm")  # the Runs' videos (evalfleet's and Arena's)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_bind(text: str, *, key: str) -> tuple[str, int]:
    """`[HOST:]PORT` → (host, port); host 127.0.0.1 when not given; UserError naming `key` otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]") if sep else "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535 or (sep and not host):
        raise UserError(f"expected [HOST:]PORT with PORT in 0..65535 (0: any free port), got {text!r}",
                        where="command line", key=key)
    return host, int(port)


def check_token(host: str, token: str | None, *, key: str = "--token") -> str | None:
    """The token the server requires: none on loopback unless given; a generated one for any other host."""
    if token is not None and len(token) < 16:
        raise UserError("a token must have at least 16 characters (or leave it out: one is generated)",
                        where="command line", key=key)
    if token is not None and not TOKEN_CHARACTERS.fullmatch(token):
        raise UserError("a token may hold only letters, digits and - _ . ~ (or leave it out: one is generated)",
                        where="command line", key=key)
    if token is None and not is_loopback(host):
        return secrets.token_urlsafe(24)
    return token


def may_serve(rel: str, runs: set[str]) -> bool:
    """The one rule for what the server sends besides its pages: the report's own files and nothing else: an
    image under plots/, an episode table report_episodes/<N>.js or plot data report_episodes/trajectories/<N>.js,
    a video inside the folder of one of `runs` or its trajectories' frames (<run>/trajectories/<file>.arrow).
    Never a hidden part, `..`, an empty part or a backslash."""
    names = rel.split("/")
    if any(n in ("", ".", "..") or n.startswith(".") or "\\" in n for n in names) or len(names) < 2:
        return False
    lower = names[-1].lower()
    if names[0] == PLOTS_DIR:
        return lower.endswith(SERVED_IMAGES)
    if names[0] == REPORT_DATA_DIR:
        return lower.endswith(".js") and (len(names) == 2 or (len(names) == 3 and names[1] == TRAJECTORIES_DIR))
    if names[0] in runs and len(names) == 3 and names[1] == TRAJECTORIES_DIR and lower.endswith(".arrow"):
        return True
    return names[0] in runs and lower.endswith(SERVED_VIDEOS)


class LiveReport:
    """A follower, refreshed on its own thread, and the latest view for the request threads."""

    def __init__(self, location: Location, *, title: str, refresh_s: float = REFRESH_S):
        self.follower = FolderFollower(location)
        self.location = location
        self.title = title
        self.refresh_s = refresh_s
        self.changed = threading.Condition()
        self.stopped = threading.Event()
        self.follower.refresh()
        self.view = live_view(self.follower)

    def follow(self) -> None:
        while not self.stopped.wait(self.refresh_s):
            try:
                changed = self.follower.refresh()
            except Exception as exc:  # noqa: BLE001 - one bad refresh must not end the thread: tried again; this
                log.warning("live report: %s", exc)  # thread never ends on one bad file (the page would freeze)
                continue
            if changed:
                view = live_view(self.follower)
                with self.changed:
                    self.view = view
                    self.changed.notify_all()

    def wait_change(self, version: int, timeout: float) -> dict[str, Any]:
        with self.changed:
            self.changed.wait_for(lambda: self.view["version"] != version or self.stopped.is_set(), timeout)
            return self.view

    def stop(self) -> None:
        self.stopped.set()
        with self.changed:
            self.changed.notify_all()


class LiveServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, report: LiveReport, host: str, port: int, token: str | None, *,
                 max_connections: int = MAX_CONNECTIONS, max_streams: int = MAX_EVENT_STREAMS,
                 request_timeout_s: float = REQUEST_TIMEOUT_S):
        self.report = report
        self.token = token
        self.request_timeout_s = request_timeout_s
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.connections = threading.BoundedSemaphore(max_connections)
        self.streams = threading.BoundedSemaphore(max_streams)
        super().__init__((host, port), LiveHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer is routine (a closed tab, a slow client's own end): one debug line,
        not a traceback on the terminal; anything else is reported as the standard library does."""
        import sys

        if isinstance(sys.exc_info()[1], OSError):
            log.debug("live report: %s: %s", client_address, sys.exc_info()[1])
            return
        super().handle_error(request, client_address)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.connections.acquire(blocking=False):
            self.shutdown_request(request)  # past the bound: closed at once, no thread started
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connections.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{port}/"

    def start(self) -> threading.Thread:
        threading.Thread(target=self.report.follow, name="live-follow", daemon=True).start()
        thread = threading.Thread(target=self.serve_forever, name="live-serve", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.report.stop()
        self.shutdown()
        self.server_close()


class LiveHandler(BaseHTTPRequestHandler):
    server: LiveServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.timeout = self.server.request_timeout_s  # the socket's: reading a request line or header, every send
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("live report: " + format, *args)

    def do_GET(self) -> None:
        if not self._addressed_here():
            return self._send(HTTPStatus.MISDIRECTED_REQUEST, b"this server answers only requests to its own address\n")
        parts = urlsplit(self.path)
        given = parse_qs(parts.query).get("token", [None])[0]
        if not self._allowed(given):
            return self._send(HTTPStatus.FORBIDDEN, b"a token is required: open the URL printed with ?token=\n")
        cookie = self._cookie(given)
        path = unquote(parts.path)
        if CONTROL.search(path):  # a NUL or line break names no file
            return self._send(HTTPStatus.NOT_FOUND, b"not found\n")
        if path == "/":
            return self._index(cookie)
        if path == "/events":
            return self._events()
        return self._static(path.lstrip("/"), cookie)

    def _allowed(self, given: str | None) -> bool:
        token = self.server.token
        if token is None:
            return True
        cookies = SimpleCookie(self.headers.get("Cookie", ""))
        candidates = [given, cookies[COOKIE].value if COOKIE in cookies else None]
        return any(c is not None and hmac.compare_digest(c.encode(), token.encode()) for c in candidates)

    def _addressed_here(self) -> bool:
        """Bound to loopback: the request's `Host` names a loopback address (and this port, when it names one)."""
        bound, port = self.server.server_address[:2]
        if not is_loopback(str(bound)):
            return True  # reachable from other machines: the token guards it
        host = self.headers.get("Host", "")
        match = re.fullmatch(r"\[?([^\[\]]*?)\]?(?::(\d+))?", host.strip().lower())
        if match is None:
            return False
        name, given_port = match.groups()
        return name in (*LOOPBACK_NAMES, str(bound)) and (given_port is None or int(given_port) == port)

    def _cookie(self, given: str | None) -> str | None:
        """The cookie the page's own requests carry, set when the request gave the right token (the server's own
        value: nothing a request sends reaches a header)."""
        token = self.server.token
        if token is None or given is None or not hmac.compare_digest(given.encode(), token.encode()):
            return None
        return f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"

    def _index(self, cookie: str | None) -> None:
        report = self.server.report
        if report.view["finished"] and self._stream(REPORT_FILE, "text/html; charset=utf-8", cookie):
            return
        page = live_page(report.title, report.view)
        self._send(HTTPStatus.OK, page.encode("utf-8"), "text/html; charset=utf-8", cookie)

    def _events(self) -> None:
        if not self.server.streams.acquire(blocking=False):
            self.close_connection = True
            return self._send(HTTPStatus.SERVICE_UNAVAILABLE, b"too many live pages open; retrying\n",
                              extra={"Retry-After": "10", "Connection": "close"})
        try:
            self._stream_events()
        finally:
            self.server.streams.release()

    def _stream_events(self) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        report = self.server.report
        version = None
        try:
            while not report.stopped.is_set():
                view = report.view if version is None else report.wait_change(version, KEEPALIVE_S)
                if view["version"] == version:
                    self.wfile.write(b": keepalive\n\n")
                else:
                    version = view["version"]
                    self.wfile.write(b"data: " + json.dumps(view).encode() + b"\n\n")
                self.wfile.flush()
        except OSError:  # the page went away, or stopped reading for REQUEST_TIMEOUT_S
            return

    def _static(self, rel: str, cookie: str | None) -> None:
        runs = {str(r.get("run")) for r in self.server.report.view.get("runs", [])}
        kind = mimetypes.guess_type(rel)[0] or "application/octet-stream"
        if not may_serve(rel, runs) or not self._stream(rel, kind, cookie):
            self._send(HTTPStatus.NOT_FOUND, b"not found\n")

    def _open(self, rel: str) -> tuple[BinaryIO, int]:
        loc = self.server.report.location
        if loc.is_local:
            f = loc.open_local(rel)
            return f, os.fstat(f.fileno()).st_size
        path = loc.join(rel)
        if not loc.fs.isfile(path):
            raise FileNotFoundError(rel)
        f = loc.fs.open(path, "rb")
        return f, int(f.size)

    def _stream(self, rel: str, kind: str, cookie: str | None) -> bool:
        """Send `rel` in chunks; False (nothing sent) when it cannot be opened."""
        try:
            f, size = self._open(rel)
        except (UserError, OSError, ValueError):
            return False
        with f:
            self._head(HTTPStatus.OK, kind, size, cookie)
            try:
                shutil.copyfileobj(f, self.wfile, CHUNK)
            except OSError:  # the reader went away or stopped reading: this connection ends
                self.close_connection = True
        return True

    def _send(self, status: HTTPStatus, body: bytes, kind: str = "text/plain; charset=utf-8",
              cookie: str | None = None, extra: dict[str, str] | None = None) -> None:
        self._head(status, kind, len(body), cookie, extra)
        self.wfile.write(body)

    def _head(self, status: HTTPStatus, kind: str, length: int, cookie: str | None = None,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        if cookie:
            self.send_header("Set-Cookie", cookie)
        self.end_headers()
