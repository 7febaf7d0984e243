"""Sphinx configuration of evalfleet's documentation site, built by `bash scripts/docs.sh` (warnings are errors).

The pages are the Markdown files of docs/ (MyST), readable as they are in the repository too. A page's links to
the repository's own files (`../src/...`, `../tests/...`) lead nowhere on the site: they are shown as the file's
path in code instead (`_repository_links`)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT / "src"))  # the API pages document this checkout's evalfleet

project = "evalfleet"
author = "the evalfleet developers"
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "evalfleet"
myst_heading_anchors = 4  # `page.md#a-heading` links work as they do on GitHub
autodoc_member_order = "bysource"
autodoc_typehints = "description"
nitpick_ignore_regex = [(r"py:.*", r".*")]  # type hints name third-party types the site does not document

# [text](../src/x.py) → `src/x.py`: a link from docs/ to a file of the repository outside it
_OUTSIDE = re.compile(r"\[([^\]]+)\]\(\.\./((?:src|tests|bench|scripts|examples)/[^)#\s]*)(?:#[^)]*)?\)")


def _repository_links(app, docname: str, source: list[str]) -> None:
    def shown(m: re.Match) -> str:
        text, path = m.group(1), m.group(2)
        return text if text.startswith("`") else f"{text} (`{path}`)"

    source[0] = _OUTSIDE.sub(shown, source[0])


def setup(app) -> None:
    app.connect("source-read", _repository_links)
