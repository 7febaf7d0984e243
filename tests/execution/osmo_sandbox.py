"""A sandbox that runs rendered OSMO task scripts for real with bash: OSMO's tokens filled in (`{{output}}`,
`{{input:N}}`, `{{workflow_id}}`, `{{host:...}}` → a real listener on 127.0.0.1), the task folder moved into a
temp dir, and every program the scripts call (`evalfleet`, `python3`, `python`, Arena's Python, the server)
replaced by a stand-in that records its argv, NUL-separated, one file per call. A test then asserts what each
program received, byte for byte, and that no file an injected command would create exists."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TASK_DIR = "/tmp/evalfleet"
# `-c "import evalfleet"` answers 1 when STAND_IN_NO_EVALFLEET is set (an image without evalfleet).
RECORDER = """#!/bin/bash
f="$STAND_IN_RECORD/call-$$-$RANDOM$RANDOM"
printf '%s\\0' "${0##*/}" "$@" > "$f"
if [ "${1-}" = "-c" ] && [ -n "${STAND_IN_NO_EVALFLEET-}" ]; then exit 1; fi
exit 0
"""


@dataclass
class Sandbox:
    root: Path
    work: Path  # every script runs here: an injected `touch X` would leave X here
    bin: Path
    record: Path

    @classmethod
    def create(cls, root: Path, programs: tuple[str, ...] = ("evalfleet", "python3", "python")) -> Sandbox:
        box = cls(root, root / "work", root / "bin", root / "record")
        for d in (box.work, box.bin, box.record):
            d.mkdir(parents=True)
        for name in programs:
            box.stand_in(name)
        return box

    def stand_in(self, name: str) -> None:
        """A recording executable called `name` on the sandbox's PATH."""
        exe = self.bin / name
        exe.write_text(RECORDER)
        exe.chmod(0o755)

    def calls(self) -> list[list[str]]:
        """Every recorded call: [program name, arg1, ...]."""
        return [p.read_bytes().decode("utf-8", "surrogateescape").split("\0")[:-1]
                for p in sorted(self.record.iterdir())]

    def clear(self) -> None:
        for p in self.record.iterdir():
            p.unlink()

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": f"{self.bin}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(self.root),
                "STAND_IN_RECORD": str(self.record), "LANG": "C.UTF-8", **extra}

    def run(self, script: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", script], check=False, cwd=self.work, env=self.env(**extra),
                              capture_output=True, timeout=60)

    def nothing_injected(self) -> bool:
        return not any(self.work.iterdir())


def fill(text: str, task_dir: Path, output: Path, port: int, inputs: list[Path] | None = None) -> str:
    """What OSMO does before a task starts: its tokens filled in; and the task's files moved to `task_dir`."""
    text = text.replace("{{output}}", str(output)).replace("{{workflow_id}}", "wf-1")
    text = re.sub(r"\{\{host:[^}]+\}\}", "127.0.0.1", text)
    for i, p in enumerate(inputs or []):
        text = text.replace(f"{{{{input:{i}}}}}", str(p))
    text = re.sub(r"^SERVER_PORT=\d+$", f"SERVER_PORT={port}", text, flags=re.MULTILINE)
    return text.replace(TASK_DIR, str(task_dir))


def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


def task_scripts(spec: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Task name → {file name: contents} of a rendered workflow spec."""
    return {task["name"]: {Path(f["path"]).name: f["contents"] for f in task["files"]}
            for group in spec["workflow"]["groups"] for task in group["tasks"]}
