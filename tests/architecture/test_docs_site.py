"""The documentation site (#56, must show 1): `bash scripts/docs.sh` builds it from the repository with Sphinx,
warnings as errors (a broken internal link, a missing page, a bad directive fail the build), offline; here into a
temporary folder. Every page of docs/ is on the site, and every link between the site's pages (page and anchor)
leads somewhere, checked on the HTML the build wrote."""

from __future__ import annotations

import html.parser
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlsplit

from evalfleet_testkit import ROOT


class Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.hrefs.append(attrs["href"])


def parsed(page: Path) -> Links:
    links = Links()
    links.feed(page.read_text(encoding="utf-8"))
    return links


def test_the_site_builds_with_warnings_as_errors_and_its_links_lead_somewhere(tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "docs.sh"), str(site)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    pages = {p.relative_to(ROOT / "docs").with_suffix(".html").as_posix()
             for p in (ROOT / "docs").rglob("*.md")}
    built = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert pages <= built, sorted(pages - built)
    cache: dict[Path, Links] = {}
    broken = []
    for page in sorted(site.rglob("*.html")):
        if page.parent.name.startswith("_"):
            continue
        for href in parsed(page).hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith("mailto:"):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(site)}: {href}")
            elif parts.fragment and target.suffix == ".html":
                ids = cache.setdefault(target, parsed(target)).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{page.relative_to(site)}: {href} (no such anchor)")
    assert broken == []


def test_the_readme_and_docs_link_only_files_of_the_repository():
    """A clone has nothing beside it: every relative link of README.md and docs/ names a file or folder in it."""
    import re

    broken = []
    for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            path = target.split("#")[0]
            if path and not re.match(r"[a-z]+:", path) and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []
    assert len((ROOT / "README.md").read_bytes()) < 8 * 1024  # what a newcomer reads first; the rest is in docs/
