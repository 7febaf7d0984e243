"""`forking.at_once`: tasks run in forked children while the caller does its own share; a task that fails there
runs again in the caller (which raises what it raises); children print nothing and are reaped; with a thread
alive nothing is forked. Each case runs in a fresh Python (single-threaded, as `evalfleet run` is at its end)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

PRELUDE = """
import json, os, sys, threading
from evalfleet.forking import at_once
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


def test_others_run_in_children_at_once_and_are_reaped(tmp_path):
    got, _ = run_case(tmp_path, """
        result = at_once(writes("first"), [writes("a"), writes("b")])
        children = pids("a") + pids("b")
        print(json.dumps({"result": result, "first": pids("first"), "parent": parent, "children": children,
                          "reaped": [reaped(p) for p in children]}))
    """)
    assert got["result"] == "first" and got["first"] == [got["parent"]]
    assert len(set(got["children"])) == 2 and got["parent"] not in got["children"]  # one child each, not here
    assert got["reaped"] == [True, True]


def test_a_task_that_fails_in_its_child_runs_again_here(tmp_path):
    got, _ = run_case(tmp_path, """
        def only_here():
            if os.getpid() != parent:
                raise RuntimeError("not in a child")
            writes("only_here")()
        at_once(writes("first"), [only_here, writes("fine")])
        print(json.dumps({"only_here": pids("only_here"), "fine": pids("fine"), "parent": parent}))
    """)
    assert got["only_here"] == [got["parent"]]  # failed in its child, done here
    assert len(got["fine"]) == 1 and got["fine"] != [got["parent"]]  # succeeded in its child: not run twice


def test_an_error_is_raised_here_as_if_run_here(tmp_path):
    got, _ = run_case(tmp_path, """
        def broken():
            writes("tries")()
            raise ValueError("the disk is full")
        try:
            at_once(writes("first"), [broken])
        except ValueError as exc:
            raised = str(exc)
        tries = pids("tries")
        print(json.dumps({"raised": raised, "tries": tries, "parent": parent, "reaped": reaped(tries[0])}))
    """)
    assert got["raised"] == "the disk is full"
    assert len(got["tries"]) == 2 and got["tries"][1] == got["parent"] != got["tries"][0]  # child, then here
    assert got["reaped"]


def test_when_first_fails_children_are_reaped_and_nothing_reruns(tmp_path):
    got, _ = run_case(tmp_path, """
        def first():
            raise KeyError("first failed")
        try:
            at_once(first, [writes("a")])
        except KeyError:
            pass
        a = pids("a")
        print(json.dumps({"a": a, "parent": parent, "reaped": reaped(a[0])}))
    """)
    assert len(got["a"]) == 1 and got["a"] != [got["parent"]] and got["reaped"]


def test_children_print_nothing(tmp_path):
    got, proc = run_case(tmp_path, """
        def noisy():
            print("from a child"); print("from a child", file=sys.stderr)
            writes("noisy")()
        at_once(writes("first"), [noisy])
        print(json.dumps({"noisy": pids("noisy"), "parent": parent}))
    """)
    assert got["noisy"] and got["noisy"] != [got["parent"]]
    assert "from a child" not in proc.stdout + proc.stderr


def test_with_another_thread_alive_everything_runs_here(tmp_path):
    got, _ = run_case(tmp_path, """
        release = threading.Event()
        waiting = threading.Thread(target=release.wait)
        waiting.start()
        at_once(writes("order"), [writes("order"), writes("order")])
        release.set(); waiting.join()
        print(json.dumps({"order": pids("order"), "parent": parent}))
    """)
    assert got["order"] == [got["parent"]] * 3


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
