"""`forking.in_child`: a task run in a forked child, its result coming back pickled; a child that failed says so
and is reaped. Each case runs in a fresh Python (single-threaded, as collect is when it forks)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

PRELUDE = """
import json, os, sys, threading
out = sys.argv[1]
parent = os.getpid()
def writes(name):
    def task():
        with open(os.path.join(out, name), "a") as f:
            f.write(f"{os.getpid()}\\n")
        return name
    return task
def pids(name):
    path = os.path.join(out, name)
    return [int(p) for p in open(path).read().split()] if os.path.exists(path) else []
def reaped(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False
"""


def run_case(tmp_path: Path, body: str) -> tuple[dict, subprocess.CompletedProcess]:
    script = PRELUDE + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc


def test_in_child_returns_what_the_task_returned_or_says_it_failed(tmp_path):
    got, _ = run_case(tmp_path, """
        from evalfleet.forking import in_child
        ok = in_child(lambda: {"pid": os.getpid(), "data": list(range(200_000))})  # more than a pipe holds
        done, value = ok.result()
        def broken():
            raise ValueError("in the child")
        failed = in_child(broken).result()
        slow = in_child(lambda: threading.Event().wait())
        slow.discard()
        print(json.dumps({"done": done, "pid": value["pid"], "n": len(value["data"]), "parent": parent,
                          "failed": list(failed), "reaped": [reaped(ok.pid), reaped(slow.pid)]}))
    """)
    assert got["done"] and got["pid"] != got["parent"] and got["n"] == 200_000
    assert got["failed"] == [False, None]
    assert got["reaped"] == [True, True]
