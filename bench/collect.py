"""Benchmark: collect + plots + report of 100,000 synthetic episodes over 40 Runs, records parsed once.

Writes the Runs as runners leave them (two shard logs per Run, run_status.json, three variations per record)
once, then, on a fresh copy for every measurement, each step in a fresh process of its own (so its peak RSS,
the kernel's VmHWM, is the step's alone), interleaves (ABBA, --repeats rounds):

  separate  what `evalfleet run` did before the pipeline: `collect` in place, then the success plot from
            `load_records` (the records parsed a second time), then `write_report` (a third time)
  finalize  `outputs.finalize.finalize`: collect, plot and report from the records parsed once
  collect   `evalfleet collect OUT` with its report: `outputs.collect.collect([OUT], OUT, report=True)`

and prints JSON: median and spread of each step's wall time and peak RSS, finalize/separate pair by pair, the
size of index.html and of its largest episode table (report_episodes/), and the machine. `--steps` picks the
steps (`separate` holds every record in memory through `load_records`: leave it out at a million episodes).
`--paint N` opens the last step's index.html N times in headless Chromium (Debian's, through Playwright; a
fresh browser context each time, from disk) and states its first contentful paint and the time until the page's
script has drawn the summary (`body[data-ready]`), from navigation start.
`--src DIR` runs the steps with another checkout's `src/` (the figures before a change, from `git archive`).
`--baseline DIR` runs every step with this checkout's `src/` and with DIR's too, interleaved in each round, and
states each step's time this checkout / baseline pair by pair (a change's speed-up on one machine, one run).

    python bench/collect.py [--episodes 100000] [--runs 40] [--repeats 3] [--steps separate,finalize,collect]
                            [--paint 3] [--baseline /tmp/before/src]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Timer, add_repeat_arg, emit, machine, peak_rss_mb, ratios, spread

STEPS = ("separate", "finalize", "collect")


def make_runs(root: str, episodes: int, runs: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    per_run = episodes // runs
    tasks = ["pick-place", "drawer-open", "door-open", "button-press", "reach"]
    policies = ["expert", "random", "pi0", "gr00t", "diffusion", "act", "bc", "octo"]
    t0 = 1_760_000_000.0
    for r in range(runs):
        task, policy = tasks[r % len(tasks)], policies[(r // len(tasks)) % len(policies)]
        name = f"{task}_{policy}" + (f"_v{r // 40}" if runs > 40 else "")  # 40 pairs, then their variants
        run_dir = os.path.join(root, name)
        os.makedirs(os.path.join(run_dir, "parts"))
        p_success = rng.uniform(0.1, 0.9)
        shards = [open(os.path.join(run_dir, "parts", f"shard-{s:03d}.jsonl"), "w") for s in range(2)]
        for e in range(per_run):
            roll = rng.random()
            status = "error" if roll < 0.005 else ("success" if rng.random() < p_success else "failure")
            rec = {
                "run": name, "task": task, "policy": policy, "episode": e, "seed": rng.getrandbits(32),
                "status": status, "success": None if status == "error" else status == "success",
                "episode_length": rng.randint(40, 500), "duration_s": rng.uniform(0.5, 12.0),
                "variations": {"object.mass": rng.uniform(0.05, 1.0), "light.intensity": rng.uniform(0.2, 2.0),
                               "object.position": [rng.uniform(-0.2, 0.2), rng.uniform(-0.2, 0.2), 0.02]},
                "attempt": 1, "timestamp": t0 + r * 1000 + e * 0.5, "job_name": name, "env_id": e,
                "episode_in_env": 0, "policy_latency_ms": rng.uniform(2, 40),
            }
            if status == "error":
                rec["error"] = "policy server timeout"
            shards[e % 2].write(json.dumps(rec) + "\n")
        for f in shards:
            f.close()
        with open(os.path.join(run_dir, "run_status.json"), "w") as f:
            json.dump({"run": name, "task": task, "policy": policy, "planned_episodes": per_run,
                       "state": "completed", "reason": None}, f)


def run_step(step: str, root: str) -> dict:
    """One step on `root`, in this process: its result's episode counts."""
    from evalfleet.outputs.collect import collect
    from evalfleet.outputs.finalize import finalize, write_report

    if step == "separate":
        from evalfleet.analysis.loading import load_records
        from evalfleet.analysis.success import write_success_plots

        result = collect([root], root)
        write_success_plots(load_records([root]), Path(root) / "plots" / "success_rates.png")
        write_report(root)
    elif step == "finalize":
        result = finalize(root).result
    else:
        result = collect([root], root, report=True)
    return result["summary"]["episodes"]


def child(step: str, root: str) -> int:
    with Timer() as t:
        episodes = run_step(step, root)
    usage = resource.getrusage(resource.RUSAGE_SELF)  # CPU seconds: less sensitive than wall time to a busy machine
    print(json.dumps({"seconds": t.seconds, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": peak_rss_mb(),
                      "episodes": episodes}))
    return 0


def measure(step: str, template: str, work: str, src: str | None) -> dict:
    """`step` on a fresh copy of the template (the copy is not timed), in a fresh process."""
    root = os.path.join(work, step)
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(template, root)
    env = dict(os.environ, MPLBACKEND="Agg")
    if src:
        env["PYTHONPATH"] = os.path.abspath(src) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", step, root], env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{step} failed:\n{proc.stderr[-4000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["index_html_bytes"] = os.path.getsize(os.path.join(root, "index.html"))
    tables = os.path.join(root, "report_episodes")
    out["largest_table_bytes"] = max((os.path.getsize(os.path.join(tables, n)) for n in os.listdir(tables)),
                                     default=0) if os.path.isdir(tables) else 0
    return out


CHROMIUM = "/usr/bin/chromium"  # Debian's (scripts/install-chromium.sh)


def paint_times(index: str, times: int) -> dict:
    """First contentful paint and summary-drawn time of `index` in Chromium, `times` fresh contexts."""
    from playwright.sync_api import sync_playwright

    fcp, ready = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            for _ in range(times):
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                page = context.new_page()
                page.goto(Path(index).as_uri())
                page.wait_for_selector("body[data-ready='1']", timeout=60_000)
                page.wait_for_timeout(200)  # the paint entry is queued after the frame that drew it
                got = page.evaluate("""() => {
                    const p = performance.getEntriesByName('first-contentful-paint')[0];
                    const mark = performance.getEntriesByName('evalfleet-ready')[0];
                    return [p ? p.startTime : null, mark ? mark.startTime : null]; }""")
                if got[0] is None:
                    raise SystemExit(f"--paint: Chromium recorded no first-contentful-paint for {index}")
                fcp.append(got[0] / 1000)
                if got[1] is not None:
                    ready.append(got[1] / 1000)
                context.close()
        finally:
            browser.close()
    out = {"first_contentful_paint_s": spread(fcp)}
    if ready:
        out["summary_drawn_s"] = spread(ready)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--steps", default=",".join(STEPS[:2]), help="comma-separated: " + ", ".join(STEPS))
    parser.add_argument("--src", help="run the steps with this checkout's src/ folder (figures before a change)")
    parser.add_argument("--baseline", help="also run every step with this src/ folder, interleaved: the ratio")
    parser.add_argument("--paint", type=int, default=0, metavar="N",
                        help="open the last step's index.html N times in Chromium: first paint (0: not)")
    parser.add_argument("--child", nargs=2, metavar=("STEP", "ROOT"), help=argparse.SUPPRESS)
    add_repeat_arg(parser)
    args = parser.parse_args()
    if args.child:
        return child(*args.child)
    steps = [s for s in args.steps.split(",") if s]
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        parser.error(f"--steps: unknown {', '.join(unknown)} (choose from {', '.join(STEPS)})")
    start = machine()
    work = tempfile.mkdtemp(prefix="evalfleet-bench-collect-")
    template = os.path.join(work, "template")
    try:
        os.makedirs(template)
        make_runs(template, args.episodes, args.runs)
        got: dict[str, list[dict]] = {s: [] for s in steps}
        before: dict[str, list[dict]] = {s: [] for s in steps}
        for i in range(args.repeats):  # ABBA: every other round in reverse order
            order = [(step, False) for step in steps] + [(step, True) for step in steps if args.baseline]
            for step, is_baseline in (order if i % 2 == 0 else order[::-1]):
                if is_baseline:
                    before[step].append(measure(step, template, work, args.baseline))
                else:
                    got[step].append(measure(step, template, work, args.src))
        counts = {s: got[s][0]["episodes"] for s in steps}
        assert len({json.dumps(c, sort_keys=True) for c in counts.values()}) == 1, counts  # the same either way
        episodes = next(iter(counts.values()))["recorded"]
        figures = {"episodes": episodes, "runs": args.runs, "src": args.src or "this checkout"}
        for step in steps:
            figures[step] = {"seconds": spread([m["seconds"] for m in got[step]]),
                             "cpu_s": spread([m["cpu_s"] for m in got[step]]),
                             "peak_rss_mb": spread([m["peak_rss_mb"] for m in got[step]], 1),
                             "index_html_bytes": got[step][0]["index_html_bytes"],
                             "largest_episode_table_bytes": got[step][0]["largest_table_bytes"]}
        if args.baseline:
            assert all(before[s][0]["episodes"] == counts[s] for s in steps), "the baseline counted differently"
            figures["baseline"] = {"src": args.baseline}
            for step in steps:
                figures["baseline"][step] = {
                    "seconds": spread([m["seconds"] for m in before[step]]),
                    "peak_rss_mb": spread([m["peak_rss_mb"] for m in before[step]], 1),
                    "this_over_baseline": spread(ratios([m["seconds"] for m in got[step]],
                                                        [m["seconds"] for m in before[step]]))}
        if args.paint:
            figures["paint_" + steps[-1]] = paint_times(os.path.join(work, steps[-1], "index.html"), args.paint)
        if "separate" in got and "finalize" in got:
            figures["finalize_over_separate"] = spread(ratios([m["seconds"] for m in got["finalize"]],
                                                              [m["seconds"] for m in got["separate"]]))
        emit(figures, machine_before=start)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
