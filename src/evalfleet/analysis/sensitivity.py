"""Sensitivity of an outcome to variation factors, across policies.

For each requested factor (a key of the records' `variations`), each policy gets:
- numeric factors: binned outcome rates with 95% intervals (Wilson for 0/1 outcomes) and a fitted curve
  (logistic by IRLS for 0/1 outcomes, quasi-logistic for fractions, least squares otherwise) with a 95% band;
  vector factors are split into named components (x, y, z; r, g, b for colours);
- categorical factors (strings, booleans): one bar per value with Wilson whiskers;
- a matched control arm when present: that policy's records of the same tasks in which the variation was
  disabled (the factor is absent), drawn as a horizontal band. The plan gives the control the same seeds.
Every policy is overlaid in the factor's panel. By default a panel pools every task the records hold into one
curve per policy (and says so); `per_task` draws one panel per task and factor instead. A logistic slope is
the change in log-odds of the outcome per unit of the factor (the odds multiply by e^slope per unit); a linear
slope is the change in the mean outcome per unit. The numbers are written as JSON next to the PNG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalfleet.analysis.fitting import linear_fit, logistic_fit
from evalfleet.analysis.grouping import Arm
from evalfleet.analysis.stats import mean_interval, wilson_interval
from evalfleet.errors import UserError

# Keys of a record that are never variation factors when looking for undeclared top-level factors.
RECORD_KEYS = {
    "run", "task", "policy", "episode", "seed", "status", "success", "episode_length", "duration_s", "variations",
    "attempt", "timestamp", "error", "video", "policy_latency_ms", "progress", "job_name", "env_id",
    "episode_in_env", "_source", "timing",
}
# A record's `timing` values read as factors `timing.<key>` (Runs at several fixed latencies on one curve).
TIMING_FACTORS = ("latency_ms", "latency_steps", "stale_ratio")


@dataclass(frozen=True)
class FactorSpec:
    key: str  # the variation key in the records
    component: int | None  # index into a vector value, None for scalars/categories
    label: str  # what the panel is called: key, or key.<component name>
    kind: str  # "numeric" | "categorical"


def factor_values(record: dict[str, Any]) -> dict[str, Any]:
    """A record's variation values, nested dicts flattened to dotted keys; dotted top-level keys count too."""
    out: dict[str, Any] = {}

    def flatten(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                flatten(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out[prefix] = value

    variations = record.get("variations")
    if isinstance(variations, dict):
        flatten("", variations)
    for k, v in record.items():
        if k not in RECORD_KEYS and "." in k and k not in out:
            out[k] = v
    timing = record.get("timing")  # a simulated or wall-clock Run's latency (rollout/latency.py) is a factor too
    if isinstance(timing, dict):
        for k in TIMING_FACTORS:
            if timing.get(k) is not None:
                out.setdefault(f"timing.{k}", timing[k])
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _value_kind(v: Any) -> tuple[str, int]:
    if _is_number(v):
        return ("numeric", 1)
    if isinstance(v, (list, tuple)) and v and all(_is_number(c) for c in v):
        return ("vector", len(v))
    return ("categorical", 1)


def component_names(key: str, length: int) -> list[str]:
    """Names of a vector factor's components."""
    lower = key.lower()
    if length == 3:
        return ["r", "g", "b"] if any(w in lower for w in ("color", "colour", "rgb")) else ["x", "y", "z"]
    if length == 2:
        return ["x", "y"]
    if length == 4 and any(w in lower for w in ("quat", "orientation", "rotation")):
        return ["w", "x", "y", "z"]
    if length == 4 and any(w in lower for w in ("color", "colour", "rgba")):
        return ["r", "g", "b", "a"]
    if length == 6 and any(w in lower for w in ("pose", "extrinsic")):
        return ["x", "y", "z", "roll", "pitch", "yaw"]
    return [str(i) for i in range(length)]


def catalog(records: list[dict[str, Any]]) -> dict[str, tuple[str, int]]:
    """Factor key → (kind, length): the kind most records give it (numeric, vector or categorical)."""
    seen: dict[str, dict[tuple[str, int], int]] = {}
    for rec in records:
        for key, value in factor_values(rec).items():
            kinds = seen.setdefault(key, {})
            kind = _value_kind(value)
            kinds[kind] = kinds.get(kind, 0) + 1
    return {key: max(kinds, key=kinds.get) for key, kinds in sorted(seen.items())}


def known_factor_labels(cat: dict[str, tuple[str, int]]) -> list[str]:
    labels = []
    for key, (kind, length) in cat.items():
        if kind == "vector":
            labels.append(f"{key} ({'/'.join(component_names(key, length))})")
        else:
            labels.append(key)
    return labels


def resolve_factors(requested: list[str], cat: dict[str, tuple[str, int]], *, where: str) -> list[FactorSpec]:
    """Requested factor names → panels. A name may be a full key, a key's unique last part, or
    `<key>.<component>` for one component of a vector factor."""
    specs: list[FactorSpec] = []
    for name in requested:
        key, component = _match_factor(name, cat)
        if key is None:
            known = known_factor_labels(cat)
            raise UserError(
                f"unknown factor {name!r}; factors in these records: "
                f"{', '.join(known) if known else '(none: no record has variations)'}",
                where=where,
                key="--factors",
            )
        kind, length = cat[key]
        if kind == "vector":
            names = component_names(key, length)
            indices = range(length) if component is None else [names.index(component)]
            specs.extend(FactorSpec(key, i, f"{key}.{names[i]}", "numeric") for i in indices)
        else:
            specs.append(FactorSpec(key, None, key, kind))
    return list(dict.fromkeys(specs))


def _match_factor(name: str, cat: dict[str, tuple[str, int]]) -> tuple[str | None, str | None]:
    if name in cat:
        return name, None
    for key, (kind, length) in cat.items():
        if kind == "vector" and name.startswith(key + ".") and name[len(key) + 1:] in component_names(key, length):
            return key, name[len(key) + 1:]
    tails = [k for k in cat if k.split(".")[-1] == name or k.endswith("." + name)]
    if len(tails) == 1:
        return tails[0], None
    return None, None


# ---------------------------------------------------------------------------------------------- outcomes


@dataclass
class Outcome:
    name: str
    kind: str  # "binary" | "fraction" | "numeric"

    def value(self, record: dict[str, Any]) -> float | None:
        if self.name == "success":
            return 1.0 if record["status"] == "success" else 0.0
        v = record.get(self.name)
        if isinstance(v, bool):
            return float(v)
        return float(v) if _is_number(v) else None


def resolve_outcome(name: str, records: list[dict[str, Any]], *, where: str) -> Outcome:
    if name == "success":
        return Outcome("success", "binary")
    values = [v for v in (Outcome(name, "numeric").value(r) for r in records) if v is not None]
    if not values:
        numeric = sorted({k for r in records for k, v in r.items() if (_is_number(v) or isinstance(v, bool))
                          and k not in ("episode", "seed", "attempt", "timestamp", "env_id", "episode_in_env")})
        raise UserError(
            f"no record has a numeric {name!r}; outcomes available: success, {', '.join(numeric)}",
            where=where,
            key="--outcome",
        )
    if all(v in (0.0, 1.0) for v in values):
        return Outcome(name, "binary")
    if all(0.0 <= v <= 1.0 for v in values):
        return Outcome(name, "fraction")
    return Outcome(name, "numeric")


def summarise(ys: list[float], kind: str) -> dict[str, Any]:
    n = len(ys)
    if kind == "binary":
        s = int(round(sum(ys)))
        lo, hi = wilson_interval(s, n)
        return {"n": n, "successes": s, "value": s / n if n else None, "ci": [lo, hi]}
    mean, lo, hi = mean_interval(ys)
    return {"n": n, "value": mean, "ci": [lo, hi]}


# ---------------------------------------------------------------------------------------------- analysis


def _factor_value(values: dict[str, Any], spec: FactorSpec) -> Any:
    if spec.key not in values:
        return None
    v = values[spec.key]
    if spec.component is not None:
        if isinstance(v, (list, tuple)) and len(v) > spec.component and _is_number(v[spec.component]):
            return float(v[spec.component])
        return None
    if spec.kind == "numeric":
        return float(v) if _is_number(v) else None
    return v if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)


def bin_edges(xs: np.ndarray, bins: int) -> np.ndarray | None:
    """Equal-width edges; None when there are at most `bins` distinct values (then one bin per value)."""
    if len(np.unique(xs)) <= bins:
        return None
    return np.linspace(float(xs.min()), float(xs.max()), bins + 1)


def binned(xs: np.ndarray, ys: np.ndarray, edges: np.ndarray | None, kind: str) -> list[dict[str, Any]]:
    out = []
    if edges is None:
        for v in np.unique(xs):
            mask = xs == v
            out.append({"lo": float(v), "hi": float(v), "x": float(v), **summarise(list(ys[mask]), kind)})
        return out
    idx = np.clip(np.searchsorted(edges, xs, side="right") - 1, 0, len(edges) - 2)
    for b in range(len(edges) - 1):
        mask = idx == b
        if not mask.any():
            continue
        out.append({"lo": float(edges[b]), "hi": float(edges[b + 1]), "x": float(xs[mask].mean()),
                    **summarise(list(ys[mask]), kind)})
    return out


def analyse(
    labelled: list[tuple[Arm, dict[str, Any]]],
    specs: list[FactorSpec],
    outcome: Outcome,
    policies: list[str],
    *,
    method: str = "both",
    bins: int = 6,
) -> list[dict[str, Any]]:
    """The numbers behind every panel (also what the JSON holds)."""
    prepared = [(arm, rec, factor_values(rec), outcome.value(rec)) for arm, rec in labelled]
    prepared = [p for p in prepared if p[3] is not None]
    panels = []
    for spec in specs:
        per_policy: dict[str, list[tuple[Any, float, Arm, dict[str, Any]]]] = {p: [] for p in policies}
        for arm, rec, values, y in prepared:
            x = _factor_value(values, spec)
            if x is not None and arm.policy in per_policy:
                per_policy[arm.policy].append((x, y, arm, rec))
        all_x = (
            np.array([x for rows in per_policy.values() for x, *_ in rows], dtype=float)
            if spec.kind == "numeric"
            else None
        )
        edges = bin_edges(all_x, bins) if all_x is not None and all_x.size else None
        panel: dict[str, Any] = {"factor": spec.key, "component": spec.label[len(spec.key) + 1:] or None,
                                 "label": spec.label, "kind": spec.kind, "policies": {}}
        for policy, rows in per_policy.items():
            entry: dict[str, Any] = {"n": len(rows)}
            if rows:
                ys = np.array([y for _, y, _, _ in rows], dtype=float)
                if spec.kind == "numeric":
                    xs = np.array([x for x, *_ in rows], dtype=float)
                    if method in ("binned", "both"):
                        entry["bins"] = binned(xs, ys, edges, outcome.kind)
                    if method in ("logistic", "both"):
                        if outcome.kind == "numeric":
                            fit = linear_fit(xs, ys)
                        else:
                            fit = logistic_fit(xs, ys, quasi=outcome.kind == "fraction")
                        entry["fit"] = fit.to_json() if fit else None
                else:
                    cats = sorted({x for x, *_ in rows})
                    entry["categories"] = [
                        {"category": c, **summarise([y for x, y, _, _ in rows if x == c], outcome.kind)} for c in cats
                    ]
                entry["control"] = _control(prepared, spec, policy, rows, outcome.kind)
            panel["policies"][policy] = entry
        panels.append(panel)
    return panels


def _control(prepared, spec: FactorSpec, policy: str, rows, kind: str) -> dict[str, Any] | None:
    """The matched control arm: records of the same tasks with the variation disabled (factor absent).

    Preferably the same policy's (a Run and its control Run). Failing that, the records of policies that never
    have the factor and share seeds with these rows: when the variation is what makes the arm (the quickstart's
    `expert_noisy` is `expert` with action noise on), the plain policy is the control."""
    tasks = {arm.task for _, _, arm, _ in rows}
    treated_seeds = {(arm.task, rec.get("seed")) for _, _, arm, rec in rows if rec.get("seed") is not None}
    control = [(arm, rec, y) for arm, rec, values, y in prepared
               if arm.policy == policy and arm.task in tasks and spec.key not in values]
    if not control:
        with_factor = {arm.policy for arm, _, values, _ in prepared if spec.key in values}
        control = [(arm, rec, y) for arm, rec, values, y in prepared
                   if arm.policy not in with_factor and arm.task in tasks]
    matched = sum(1 for arm, rec, _ in control if (arm.task, rec.get("seed")) in treated_seeds)
    if not control or (control[0][0].policy != policy and not matched):
        return None
    out = summarise([y for _, _, y in control], kind)
    out["policies"] = sorted({arm.policy for arm, _, _ in control})
    out["runs"] = sorted({rec["run"] for _, rec, _ in control})
    out["matched_seeds"] = matched
    return out


def analyse_per_task(labelled: list[tuple[Arm, dict[str, Any]]], specs: list[FactorSpec], outcome: Outcome,
                     policies: list[str], **options: Any) -> list[dict[str, Any]]:
    """One panel per (factor, task), each with that task's records only; panels carry `task`."""
    tasks = sorted({arm.task for arm, _ in labelled})
    panels = []
    for spec in specs:
        for task in tasks:
            subset = [(arm, rec) for arm, rec in labelled if arm.task == task]
            for panel in analyse(subset, [spec], outcome, policies, **options):
                panels.append({**panel, "task": task, "tasks": [task], "pooled": False})
    return panels


def mark_pooled(panels: list[dict[str, Any]], labelled: list[tuple[Arm, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Say on every pooled panel which tasks went into its curves."""
    tasks = sorted({arm.task for arm, _ in labelled})
    return [{**panel, "task": None, "tasks": tasks, "pooled": len(tasks) > 1} for panel in panels]


def scope_text(panel: dict[str, Any]) -> str:
    """What a panel's curves are made of: `task push-v3`, or `2 tasks pooled: a, b`."""
    tasks = panel.get("tasks") or []
    if panel.get("pooled"):
        return f"{len(tasks)} tasks pooled: {', '.join(tasks)}"
    return f"task {tasks[0]}" if tasks else "all records"


def slope_unit(fit: dict[str, Any], factor: str, outcome: Outcome) -> str:
    """What a fit's slope measures, in words."""
    if fit["model"] == "linear":
        return f"change in mean {outcome.name} per unit of {factor}"
    return f"log-odds of {outcome.name} per unit of {factor}; odds x e^slope per unit"


def slope_text(fit: dict[str, Any], factor: str, outcome: Outcome) -> str:
    """`slope +1.2 [+0.4, +2.0] log-odds of success per unit of F; odds x e^slope per unit (x3.32)`."""
    lo, hi = fit.get("slope_ci") or (None, None)
    ci = f"[{lo:+.4g}, {hi:+.4g}]" if lo is not None and hi is not None else "[interval n/a]"
    text = f"slope {fit['slope']:+.4g} {ci} {slope_unit(fit, factor, outcome)}"
    if fit["model"] != "linear":
        try:
            text += f" (x{math.exp(fit['slope']):.3g})"
        except OverflowError:
            pass
    return text


# ---------------------------------------------------------------------------------------------- drawing


def plot(
    panels: list[dict[str, Any]], policies: list[str], outcome: Outcome, output: Path, title: str
) -> tuple[int, int]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.4 * ncols, 4.2 * nrows), dpi=100, squeeze=False)
    colours = plt.get_cmap("tab10")
    ylabel = f"{outcome.name} rate" if outcome.kind == "binary" else f"mean {outcome.name}"
    try:
        for ax, panel in zip(axes.flat, panels):
            n_pol = max(len(policies), 1)
            cats = sorted({c["category"] for e in panel["policies"].values() for c in e.get("categories", [])})
            for j, policy in enumerate(policies):
                entry = panel["policies"].get(policy, {})
                colour = colours(j % 10)
                if not entry.get("n"):
                    continue
                if panel["kind"] == "numeric":
                    _draw_numeric(ax, entry, policy, colour, j, n_pol)
                else:
                    _draw_categories(ax, entry, policy, colour, j, n_pol, cats)
                control = entry.get("control")
                if control and control.get("value") is not None:
                    ax.axhspan(control["ci"][0], control["ci"][1], color=colour, alpha=0.10, lw=0)
                    who = "" if control["policies"] == [policy] else f": {', '.join(control['policies'])}"
                    ax.axhline(control["value"], color=colour, ls="--", lw=1,
                               label=f"{policy} control{who} (variation off, n={control['n']})")
            if panel["kind"] != "numeric":
                ax.set_xticks(range(len(cats)))
                ax.set_xticklabels(cats, rotation=20, fontsize=8)
            if outcome.kind != "numeric":
                ax.set_ylim(-0.02, 1.05)
            ax.set_xlabel(panel["label"])
            ax.set_ylabel(ylabel)
            ax.set_title(scope_text(panel), fontsize=9)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="best")
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")
        fits = [e.get("fit") for p in panels for e in p["policies"].values() if e.get("fit")]
        if fits:
            models = {f["model"] for f in fits}
            unit = "change in mean outcome" if models == {"linear"} else "log-odds (odds x e^slope)"
            title = f"{title}\nfit slopes: {unit} per unit of the panel's factor"
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        output.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(output, dpi=100)
        size = fig.canvas.get_width_height()
    finally:
        plt.close(fig)
    return size


def _draw_numeric(ax, entry, policy, colour, j, n_pol) -> None:
    bins = entry.get("bins") or []
    if bins:
        width = max((b["hi"] - b["lo"]) for b in bins) or 1.0
        shift = (j - (n_pol - 1) / 2) * 0.04 * width  # keep overlaid whiskers apart
        xs = [b["x"] + shift for b in bins]
        ys = [b["value"] for b in bins]
        lo = [max(b["value"] - b["ci"][0], 0) for b in bins]
        hi = [max(b["ci"][1] - b["value"], 0) for b in bins]
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", color=colour, capsize=3, ms=4,
                    label=f"{policy} binned (n={entry['n']})")
    fit = entry.get("fit")
    if fit:
        ax.plot(fit["grid"], fit["curve"], color=colour, lw=1.5,
                label=f"{policy} {fit['model']} fit, slope {fit['slope']:+.3g}"
                + (" log-odds/unit" if fit["model"] != "linear" else "/unit") if fit["slope"] is not None else None)
        ax.fill_between(fit["grid"], fit["band_lower"], fit["band_upper"], color=colour, alpha=0.18, lw=0)


def _draw_categories(ax, entry, policy, colour, j, n_pol, cats: list[str]) -> None:
    width = 0.8 / n_pol
    xs, ys, lo, hi = [], [], [], []
    for c in entry.get("categories") or []:
        xs.append(cats.index(c["category"]) - 0.4 + width * (j + 0.5))
        ys.append(c["value"])
        lo.append(max(c["value"] - c["ci"][0], 0))
        hi.append(max(c["ci"][1] - c["value"], 0))
    ax.bar(xs, ys, width * 0.95, color=colour, yerr=[lo, hi], capsize=3, label=f"{policy} (n={entry['n']})")
