"""`evalfleet` processes end without the interpreter's module teardown (`process_exit.exit_now`), yet keep everything a
normal exit does that matters: the exit code, non-daemon threads finished, atexit handlers, open files
flushed, a closed pipe ending quietly."""

from __future__ import annotations

import subprocess
import sys

from evalfleet_testkit import run_evalfleet


def test_exit_now_keeps_what_a_normal_exit_keeps(tmp_path):
    left_open, from_atexit, from_thread = tmp_path / "open.txt", tmp_path / "atexit.txt", tmp_path / "thread.txt"
    code = f"""
import atexit, threading, time, weakref
from evalfleet.cli import exit_now
class Gone: pass
dead = weakref.proxy(Gone())  # a weak proxy whose referent is already collected (asyncio leaves such)
f = open({str(left_open)!r}, "w", buffering=1 << 20)  # a plugin's file, never closed
f.write("written, not flushed")
atexit.register(lambda: open({str(from_atexit)!r}, "w").write("atexit ran"))
def late():
    time.sleep(0.2)
    open({str(from_thread)!r}, "w").write("thread finished")
threading.Thread(target=late).start()
print("to stdout", flush=False)
exit_now(7)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "to stdout\n" and proc.stderr == ""
    assert left_open.read_text() == "written, not flushed"
    assert from_atexit.read_text() == "atexit ran"
    assert from_thread.read_text() == "thread finished"


def test_cli_exit_codes_and_a_closed_pipe(tmp_path):
    assert run_evalfleet("--version").returncode == 0
    bad = run_evalfleet("plan", str(tmp_path / "missing.yaml"))
    assert bad.returncode == 2 and bad.stderr.startswith("evalfleet: error:")
    head = subprocess.run(f"{sys.executable} -m evalfleet.cli --help | head -1", shell=True, capture_output=True,
                          text=True, timeout=60)
    assert head.returncode == 0 and head.stderr == ""


def test_exit_now_searches_for_files_only_where_one_may_be_open_for_writing(tmp_path):
    """The search of every object for open files (45-60 ms in a runner) runs only where a descriptor besides 0-2 is
    open for writing; stdout and stderr are flushed either way."""
    code = """
import gc, os, sys
from evalfleet.cli import exit_now
searched = gc.get_objects
def watched(*args):
    sys.stdout.write("searched\\n")
    return searched(*args)
gc.get_objects = watched
reader = open(sys.argv[1])  # open for reading only: nothing to flush
if sys.argv[2] == "pipe":
    read_end, write_end = os.pipe()  # a descriptor open for writing
print("to stdout", flush=False)
sys.stderr.write("to stderr")
exit_now(3)
"""
    readable = tmp_path / "readable.txt"
    readable.write_text("x")
    for case, searched in (("none", False), ("pipe", True)):
        proc = subprocess.run([sys.executable, "-c", code, str(readable), case], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 3, proc.stderr
        assert proc.stdout.startswith("to stdout\n") and proc.stderr == "to stderr"
        assert ("searched" in proc.stdout) is searched, (case, proc.stdout)
