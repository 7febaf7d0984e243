"""The code blocks of the tutorial and the how-to guides run as written (#56, must show: the documentation cannot
rot): each page's blocks, in order, in a fresh folder holding the repository's examples/: a YAML block whose first
line is a `# NAME` comment is saved as NAME, a bash block is run line by line, a Python block by this Python. Fewer
episodes than the page says (every `num_episodes`, shorter `wave`s, and an override on every `evalfleet run`), and
no progress bar; `pip install` lines are left out (the suite runs installed). Each command must exit 0."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from evalfleet_testkit import ROOT

pytestmark = pytest.mark.slow

EPISODES = 4
TUTORIAL = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


def blocks(page: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(page.read_text(encoding="utf-8"))]


HOW_TOS = sorted((ROOT / "docs" / "how-to").glob("*.md"))


def fewer_episodes(text: str) -> str:
    text = re.sub(r"num_episodes([:=] ?)\d+", lambda m: f"num_episodes{m.group(1)}{EPISODES}", text)
    return re.sub(r"wave: \d+", "wave: 2", text)


def command(line: str) -> list[str]:
    argv = shlex.split(line)
    if argv[:2] == ["evalfleet", "run"]:
        argv += [f"shared.rollout_limit.num_episodes={EPISODES}", "--no-progress"]
    if argv[0] == "evalfleet":
        argv = [sys.executable, "-m", "evalfleet.cli", *argv[1:]]
    return argv


def run_blocks(page: Path, folder: Path) -> dict[str, int]:
    """Run `page`'s blocks in `folder`; how many of each kind ran."""
    (folder / "examples").symlink_to(ROOT / "examples")
    env = dict(os.environ)
    ran = {"bash": 0, "yaml": 0, "python": 0}
    for language, text in blocks(page):
        if language == "yaml":
            name = text.splitlines()[0].lstrip("#").strip()
            assert re.fullmatch(r"[\w.-]+\.yaml", name), f"a YAML block starts with `# NAME.yaml`: {text[:80]!r}"
            (folder / name).write_text(fewer_episodes(text))
        elif language == "bash":
            for line in filter(None, (ln.strip() for ln in text.splitlines())):
                if line.startswith("pip install"):
                    continue
                proc = subprocess.run(command(line), cwd=folder, env=env, capture_output=True, text=True,
                                      stdin=subprocess.DEVNULL, timeout=600)
                assert proc.returncode == 0, f"{line}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        elif language == "python":
            proc = subprocess.run([sys.executable, "-c", fewer_episodes(text)], cwd=folder, env=env,
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
            assert proc.returncode == 0, f"{text}\n{proc.stderr[-3000:]}"
        else:
            continue
        ran[language] += 1
    return ran


def test_every_block_of_the_tutorial_runs(tmp_path):
    assert run_blocks(TUTORIAL, tmp_path) == {"bash": 4, "yaml": 1, "python": 1}
    assert (tmp_path / "outputs" / "tutorial" / "quickstart" / "index.html").is_file()
    assert (tmp_path / "outputs" / "tutorial" / "compare" / "plots" / "compare_expert.json").is_file()
    assert (tmp_path / "outputs" / "tutorial" / "compare-ray" / "experiment_result.json").is_file()


@pytest.mark.parametrize("page", HOW_TOS, ids=[p.stem for p in HOW_TOS])
def test_every_block_of_a_how_to_runs(page, tmp_path):
    ran = run_blocks(page, tmp_path)
    assert ran["bash"] + ran["python"] >= 1, f"{page.name} has no block to run"


def test_the_tutorials_pictures_are_the_screenshot_scripts():
    """The pictures the tutorial shows are the ones scripts/screenshots.py writes (regenerated, never pasted)."""
    shown = set(re.findall(r"images/([\w.-]+\.png)", TUTORIAL.read_text(encoding="utf-8")))
    script = (ROOT / "scripts" / "screenshots.py").read_text(encoding="utf-8")
    assert shown and all(f'"{name}"' in script and (ROOT / "docs" / "images" / name).is_file() for name in shown)
