"""The report's screenshots in the documentation, made from the quickstart's own output (never pasted by hand):

    python scripts/screenshots.py [--output outputs/screenshots/quickstart] [--into docs/images] [--episodes 20]

Runs examples/quickstart.yaml with `--episodes` episodes per Run into `--output` (a folder that already holds a
finished report is used as it is), opens its index.html in headless Chromium (Debian's, driven by Playwright:
scripts/install-chromium.sh) and writes into `--into`:

    report-summary.png    the report's header, its Runs with their intervals, and the task × policy matrix
    report-plots.png      the plots section

Runs again give the same pictures, up to the run's times and paths the header shows."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
SHOTS = {"report-summary.png": ("#title", "#matrix-section"), "report-plots.png": ("#plots-section", None)}


def quickstart_output(out: Path, episodes: int) -> Path:
    """The quickstart run afresh into `out` (what an earlier call left is removed): the report of this evalfleet."""
    shutil.rmtree(out, ignore_errors=True)
    import evalfleet

    result = evalfleet.run(ROOT / "examples" / "quickstart.yaml", output=out, progress=False,
                           overrides=[f"shared.rollout_limit.num_episodes={episodes}"])
    if not result.ok:
        raise SystemExit(f"the quickstart did not complete; see {out}")
    return out


def screenshots(index: Path, into: Path) -> list[Path]:
    """One PNG per entry of SHOTS: the page region from its first element's top to its last element's bottom."""
    from playwright.sync_api import sync_playwright

    into.mkdir(parents=True, exist_ok=True)
    written = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
            page.goto(index.resolve().as_uri())
            page.wait_for_load_state("load")
            for name, (first, last) in SHOTS.items():
                top = page.locator(first).bounding_box()
                bottom = page.locator(last or first).bounding_box()
                if top is None or bottom is None:
                    raise SystemExit(f"{index}: no {first} or {last} on the page")
                clip = {"x": 0, "y": top["y"], "width": 1280, "height": bottom["y"] + bottom["height"] - top["y"]}
                path = into / name
                page.screenshot(path=str(path), clip=clip, full_page=True)
                small_png(path)
                written.append(path)
        finally:
            browser.close()
    return written


def small_png(path: Path) -> None:
    """The screenshot with a palette of its own 256 colours: a page of flat colours and text looks the same, in a
    third of the bytes of Chromium's 24-bit PNG."""
    from PIL import Image

    with Image.open(path) as shot:
        small = shot.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "outputs" / "screenshots" / "quickstart")
    parser.add_argument("--into", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--episodes", type=int, default=20)
    args = parser.parse_args()
    out = quickstart_output(args.output, args.episodes)
    for path in screenshots(out / "index.html", args.into):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
