"""The live report's server, on the standard library's `ThreadingHTTPServer`.

`/` is the live page (`live_page`) until the run is collected, then the folder's own index.html, byte for byte;
`/events` pushes the page's JSON as server-sent events whenever it changes (a comment every few seconds keeps
the connection open); any other path is a file of the folder (videos, plots), only below it: a path with `..`,
a hidden part (`.evalfleet/`) or, locally, a link leading out of the folder is refused (`Location.open_local`).

It binds to loopback unless told otherwise; any other host needs a token, checked on every request including
/events: `?token=T` (the page passes it on) or the cookie set when the token was given, compared in constant
time. Bound to loopback it answers only requests addressed to a loopback name (`Host: 127.0.0.1:PORT`,
`localhost`, `[::1]`): a web page whose own name was rebound to 127.0.0.1 (DNS rebinding) gets nothing.
One thread (`LiveReport.follow`) refreshes the follower; request threads only read its latest view.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import mimetypes
import re
import secrets
import threading
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from evalfleet.errors import UserError
from evalfleet.layout import REPORT_FILE
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
            except (UserError, OSError) as exc:  # a listing that failed now: the next refresh tries again
                log.warning("live report: %s", exc)
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

    def __init__(self, report: LiveReport, host: str, port: int, token: str | None):
        self.report = report
        self.token = token
        super().__init__((host, port), LiveHandler)

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
        if report.view["finished"]:
            try:
                body = report.location.read_bytes(REPORT_FILE)
            except (UserError, OSError):
                body = None
            if body is not None:
                return self._send(HTTPStatus.OK, body, "text/html; charset=utf-8", cookie)
        page = live_page(report.title, report.view)
        self._send(HTTPStatus.OK, page.encode("utf-8"), "text/html; charset=utf-8", cookie)

    def _events(self) -> None:
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
        except (BrokenPipeError, ConnectionResetError):
            return  # the page went away

    def _static(self, rel: str, cookie: str | None) -> None:
        names = rel.split("/")
        if not rel or any(n in ("", ".", "..") or n.startswith(".") or "\\" in n for n in names):
            return self._send(HTTPStatus.NOT_FOUND, b"not found\n")
        loc = self.server.report.location
        try:
            if not loc.is_file(rel):
                return self._send(HTTPStatus.NOT_FOUND, b"not found\n")
            body = loc.read_bytes(rel)
        except (UserError, OSError, ValueError):
            return self._send(HTTPStatus.NOT_FOUND, b"not found\n")
        kind = mimetypes.guess_type(rel)[0] or "application/octet-stream"
        self._send(HTTPStatus.OK, body, kind, cookie)

    def _send(self, status: HTTPStatus, body: bytes, kind: str = "text/plain; charset=utf-8",
              cookie: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        if cookie:
            self.send_header("Set-Cookie", cookie)
        self.end_headers()
        self.wfile.write(body)
