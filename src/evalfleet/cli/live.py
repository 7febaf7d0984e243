"""`evalfleet watch DIR|URL` (the live report of a folder or bucket any backend is writing) and the live report
of `evalfleet run --serve-report [HOST:]PORT`, which runs `watch` as a child process on its output folder (no
thread in the run process, so its runners are still forked: backends/local/standby.py).

The URL is printed once on a line of its own, `live report: URL` (with `?token=...` where a token is needed);
the token is never written to a file. A child started by `run` gets its token and its parent's pid through the
environment (never on a command line) and ends when its parent has gone."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from typing import Any

TOKEN_ENV = "EVALFLEET_LIVE_TOKEN"
PARENT_ENV = "EVALFLEET_LIVE_PARENT"
URL_LINE = "live report: "
PARENT_CHECK_S = 1.0


def register(sub: Any) -> None:
    p = sub.add_parser("watch", help="serve the live report of an output folder or bucket a run is writing",
                       description="Serve a live index.html of DIR|URL (a folder or s3://bucket/prefix that any "
                       "backend is writing), reading only what is new; once the run is collected the page is "
                       "its index.html. Loopback by default; any other host needs a token. Ends on Ctrl-C.")
    p.add_argument("target", metavar="DIR|URL")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (not loopback: a token is required)")
    p.add_argument("--port", type=int, default=8765, help="port to bind (0: any free port)")
    p.add_argument("--token", default=None,
                   help=f"the token a browser must give (default: ${TOKEN_ENV}; generated off loopback)")
    p.add_argument("--s3-endpoint", metavar="URL", default=None,
                   help="S3-compatible endpoint (default: $EVALFLEET_S3_ENDPOINT, then $AWS_ENDPOINT_URL)")
    p.set_defaults(handler=cmd_watch)


def cmd_watch(args: argparse.Namespace) -> int:
    from evalfleet.errors import UserError
    from evalfleet.outputs.live_server import LiveReport, LiveServer, check_token, parse_bind
    from evalfleet.outputs.storage import open_location

    host, port = parse_bind(f"{args.host}:{args.port}", key="--host/--port")
    token = check_token(host, args.token or os.environ.get(TOKEN_ENV) or None)
    location = open_location(args.target, endpoint_url=args.s3_endpoint, role="source")
    report = LiveReport(location, title=f"evalfleet: {location.display()}")
    try:
        server = LiveServer(report, host, port, token)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another port",
                        where="command line", key="--port") from None
    server.start()
    print(URL_LINE + server.url + (f"?token={token}" if token else ""), flush=True)
    parent = os.environ.get(PARENT_ENV)
    try:
        while not report.stopped.wait(PARENT_CHECK_S):
            if parent and str(os.getppid()) != parent:
                break  # the `evalfleet run` that started this has gone
    except KeyboardInterrupt:
        pass
    server.stop()
    return 0


class ServedReport:
    """`evalfleet watch OUT` as a child of `evalfleet run --serve-report`."""

    def __init__(self, bind: str, output: str):
        from evalfleet.interpreter import python_command
        from evalfleet.outputs.live_server import check_token, parse_bind

        host, port = parse_bind(bind, key="--serve-report")
        token = check_token(host, None, key="--serve-report")
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        env.pop(TOKEN_ENV, None)
        if token:
            env[TOKEN_ENV] = token
        command = [*python_command(), "-m", "evalfleet.cli", "watch", output, "--host", host, "--port", str(port)]
        self.proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith(URL_LINE):
            code = self.proc.wait()
            from evalfleet.errors import UserError

            raise UserError(f"the live report did not start (exit {code}); see the message above",
                            where="command line", key="--serve-report")
        self.url = line[len(URL_LINE):].strip()
        print(URL_LINE + self.url, file=sys.stderr, flush=True)

    def keep_serving(self) -> None:
        """After the run: until Ctrl-C on a terminal; otherwise until stdin is closed (at once for /dev/null)."""
        try:
            if sys.stdin is not None and sys.stdin.isatty():
                print(f"serving the final report at {self.url} until Ctrl-C", file=sys.stderr, flush=True)
                threading.Event().wait()
            elif sys.stdin is not None:
                print(f"serving the final report at {self.url} until stdin is closed", file=sys.stderr,
                      flush=True)
                sys.stdin.buffer.read()
        except (KeyboardInterrupt, OSError, ValueError):
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
