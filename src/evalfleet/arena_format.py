"""Isaac Lab Arena's output format, read in this one place: its record files' names and order
(`episode_results_rebuild<R>.jsonl` / `_rank<N>`, names defined in `layout`), its video file names, and one
line of its records as an evalfleet record. Used by `rollout.run_folder` (Arena Run folders), `analysis.loading`
(the success rule for a success term written as text) and the OSMO Arena task (counting an attempt's records)."""

from __future__ import annotations

from typing import Any, Iterable

from evalfleet.layout import ARENA_RECORDS, ARENA_VIDEO


def truthy(value: Any) -> bool:
    """A success term as Arena (or a hand-written record) may write it: a bool, a number or text."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "success")
    return bool(value)


def arena_file_order(name: str) -> tuple[int, int] | None:
    """(0 for rebuild / 1 for rank, its number) for an Arena record file name, else None."""
    m = ARENA_RECORDS.match(name)
    return (0 if m.group(1) == "rebuild" else 1, int(m.group(2))) if m else None


def flat_variations(value: Any) -> dict[str, Any]:
    """Arena's variation values, nested asset → variation → value or flat, as {"asset.variation": value}."""
    if not isinstance(value, dict):
        return {}
    flat: dict[str, Any] = {}
    for name, inner in value.items():
        if isinstance(inner, dict) and inner and "." not in str(name):
            for sub, v in inner.items():
                flat[f"{name}.{sub}"] = v
        else:
            flat[str(name)] = inner
    return flat


def arena_record(raw: dict[str, Any], *, run: str, episode: int,
                 videos: dict[tuple[int, int, int], dict[str, str]] | None = None,
                 task: str | None = None, policy: str | None = None) -> dict[str, Any]:
    """One line of Arena's episode_results_*.jsonl as an evalfleet record (Arena's own keys kept beside)."""
    rec = dict(raw)
    success = raw.get("success")
    status = "error" if success is None else ("success" if truthy(success) else "failure")
    variations = next((raw[k] for k in ("variations", "variation_values", "episode_conditions") if
                       isinstance(raw.get(k), dict)), {})
    rec.update(run=run, episode=episode, status=status, success=None if status == "error" else status == "success",
               variations=flat_variations(variations))
    # Arena's lines do not name the task or policy; the Run's run_status.json (written by evalfleet's task) does.
    if task or raw.get("task_name"):
        rec.setdefault("task", task or raw.get("task_name"))
    if policy or raw.get("policy_name"):
        rec.setdefault("policy", policy or raw.get("policy_name"))
    if status == "error":
        rec.setdefault("error", "Arena recorded no success term for this episode")
    key = (int(raw.get("rebuild_idx") or 0), int(raw.get("env_id") or 0), int(raw.get("episode_in_env") or 0))
    if videos and key in videos and not rec.get("video"):
        rec["video"] = videos[key]
    return rec


def arena_videos(names: Iterable[str]) -> dict[tuple[int, int, int], dict[str, str]]:
    """(rebuild, env, episode-in-env) → {camera: relative path} from Arena's video file names."""
    out: dict[tuple[int, int, int], dict[str, str]] = {}
    for rel in names:
        m = ARENA_VIDEO.match(rel.rsplit("/", 1)[-1])
        if m:
            key = (int(m["rebuild"]), int(m["env"]), int(m["episode"]))
            out.setdefault(key, {})[m["camera"]] = rel
    return out
