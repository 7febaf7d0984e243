"""finalize's success plots come from per-arm counts kept as collect streams the Runs (issue #29): the same
numbers as counting every record one by one, and as `evalfleet plot` over the folder's records."""

from __future__ import annotations

import json
from pathlib import Path

from outputs_helpers import record, write_jsonl, write_status

from evalfleet.analysis.stats import mean_interval, wilson_interval
from evalfleet.cli import main
from evalfleet.outputs.finalize import finalize


def progress_of(run: str, e: int):
    """Numbers, Arena's map, and values that are no score (bool, text, none)."""
    return [0.1 * (e % 7), {"overall_score": 0.25 + e / 100}, True, "high", None][(e + len(run)) % 5]


def small_folder(root: Path) -> list[dict]:
    """Two policies over two tasks; one Run records two tasks; progress of every kind; one error with a
    progress (not counted)."""
    runs = {"pick_expert": ("pick", "expert"), "pick_random": ("pick", "random"),
            "mixed_random": (None, "random")}
    records = []
    for run, (task, policy) in runs.items():
        recs = [record(run, e, "success" if (e * 7 + len(run)) % 3 == 0 else "failure",
                       task=task or ("drawer" if e % 2 else "pick"), policy=policy, progress=progress_of(run, e))
                for e in range(23)]
        if run == "pick_random":
            recs[4] = record(run, 4, "error", task="pick", policy=policy, progress=0.9, error="server lost")
        write_jsonl(root / run / "parts" / "w0.jsonl", recs)
        write_status(root / run, planned=23, state="completed", task=task or "pick", policy=policy)
        records += recs
    (root / "experiment.yaml").write_text("runs:\n" + "".join(f"  {run}: {{}}\n" for run in runs))
    return records


def one_by_one(records: list[dict]) -> tuple[dict, dict]:
    """The cells counted record by record, as the plot counted them before it kept counts."""
    outcomes: dict[tuple[str, str], list[int]] = {}
    progress: dict[tuple[str, str], list[float]] = {}
    for rec in records:
        if rec["status"] == "error":
            continue
        arm = (rec["task"], rec["policy"])
        outcomes.setdefault(arm, []).append(rec["status"] == "success")
        p = rec["progress"]
        p = p["overall_score"] if isinstance(p, dict) else p
        if isinstance(p, float):
            progress.setdefault(arm, []).append(p)
    rates = {arm: {"n": len(v), "value": sum(v) / len(v), "ci": list(wilson_interval(sum(v), len(v))),
                   "successes": sum(v)} for arm, v in outcomes.items()}
    means = {arm: (lambda m: {"n": len(v), "value": m[0], "ci": [m[1], m[2]]})(mean_interval(v))
             for arm, v in progress.items()}
    return rates, means


def cells(path: Path) -> dict:
    data = json.loads(path.read_text())
    return {(c["task"], c["policy"]): {k: v for k, v in c.items() if k not in ("task", "policy")}
            for c in data["cells"] if c["n"]}


def test_streamed_counts_equal_the_per_record_numbers(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    records = small_folder(out)
    done = finalize(out)
    plots = out / "plots"
    assert done.plot_problem is None
    assert sorted(p.name for p in done.plots) == ["average_progress.png", "success_rates.png"]
    rates, means = one_by_one(records)
    assert cells(plots / "success_rates.json") == rates
    assert cells(plots / "average_progress.json") == means
    summary = json.loads((plots / "success_rates.json").read_text())
    assert (summary["episodes"], summary["excluded_errors"]) == (len(records) - 1, 1)
    assert summary["tasks"] == ["drawer", "pick"] and summary["policies"] == ["expert", "random"]

    # `evalfleet plot` reads the records again through analysis.loading: the same JSON, byte for byte.
    again = tmp_path / "again" / "success_rates.png"
    assert main(["plot", str(out), "-o", str(again)]) == 0
    capsys.readouterr()
    for name in ("success_rates.json", "average_progress.json"):
        ours = json.loads((plots / name).read_text())
        theirs = json.loads((again.parent / name).read_text())
        ours.pop("image", None), theirs.pop("image", None)
        assert ours == theirs, name


def test_only_errors_skips_the_plot_and_keeps_the_results(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "r" / "parts" / "w0.jsonl", [record("r", 0, "error"), record("r", 1, "error")])
    write_status(tmp_path / "r", planned=2, state="completed")
    done = finalize(tmp_path)
    assert done.plots == [] and (tmp_path / "experiment_result.json").is_file()
    assert done.plot_problem == f"{tmp_path}: all 2 records are infrastructure errors " \
                                "(status: error); no outcome to analyse"
