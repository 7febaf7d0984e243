"""Isaac Lab Arena's `environment_builder` keys (its ArenaEnvBuilderCfg) resolved on a merged Run map at load.

For an Arena-type Run (experiment/arena_types.py) they stay as written and travel to Arena's runner; only
`episode_conditions_path` is checked here as Arena checks it (isaaclab_arena/evaluation/episode_conditions_rollout.py:
`num_rebuilds` must be 1, no `num_steps`, the episode count is the file's number of lines), so the plan has
exactly the episodes Arena will play. For one of evalfleet's own environments each key becomes its equivalent:

- `language_instruction` → the environment's `instruction` option (Meta-World, LIBERO, ALOHA, Push-T, Gymnasium);
- `camera_height` + `camera_width` → its camera size option (`image_size: [height, width]`);
- `episode_conditions_path` → `conditions:` (experiment/replay.py replays Arena's JSON lines);
- `placement_seed` has none (an evalfleet environment places objects from each episode's seed): refused.

A key with no equivalent for that environment is a UserError naming the key and the environments that take it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalfleet.errors import UserError

ARENA_BUILDER_KEYS = ("placement_seed", "language_instruction", "camera_height", "camera_width",
                      "episode_conditions_path")
ARENA_TYPES = "Isaac Lab Arena environment types (a task YAML path, a dotted class path or a registered Arena name)"


def resolve_arena_keys(runs: dict[str, Any], where: str) -> dict[str, Any]:
    """The merged Run maps with Arena's builder keys checked (Arena types) or made evalfleet's (our types)."""
    from evalfleet.sim.base import ENVIRONMENTS

    out = {}
    for name, run in runs.items():
        key = f"runs.{name}"
        builder = run.get("environment_builder") if isinstance(run, dict) else None
        env = run.get("environment") if isinstance(run, dict) else None
        if (isinstance(env, dict) and isinstance(env.get("type"), str) and ENVIRONMENTS.get(env["type"]) is None
                and run.get("conditions") is not None):
            # Arena's runner plays its own episodes: a set resolved on evalfleet's side would be silently ignored.
            raise UserError(
                "an Isaac Lab Arena Run cannot replay an evalfleet condition set (Arena's runner samples its own "
                "episodes, so the set would be ignored): give Arena's own environment_builder.episode_conditions_path "
                "(JSON lines with a `variations` map, e.g. an Arena episode_results file), or replay the set on one of "
                "evalfleet's environments", where=where, key=f"{key}.conditions")
        if not isinstance(builder, dict) or not isinstance(env, dict) or not isinstance(env.get("type"), str):
            out[name] = run  # the schema reports a malformed section
            continue
        entry = ENVIRONMENTS.get(env["type"])
        if entry is None:
            out[name] = _arena_run(run, where, key) if builder.get("episode_conditions_path") is not None else run
        else:
            out[name] = _native_run(run, entry, where, key)
    return out


def conditions_file(where: str, given: str) -> Path:
    """An `episode_conditions_path` as evalfleet reads it: relative to the Experiment file's folder."""
    path = Path(given)
    return path if path.is_absolute() else Path(where).resolve().parent / path


def _arena_run(run: dict[str, Any], where: str, key: str) -> dict[str, Any]:
    from evalfleet.experiment.conditions import arena_conditions, read_set_file
    from evalfleet.experiment.replay import task_of

    given = run["environment_builder"]["episode_conditions_path"]
    ckey = f"{key}.environment_builder.episode_conditions_path"
    if not isinstance(given, str):
        return run  # the schema refuses a non-text path
    rebuilds = run.get("num_rebuilds")
    if rebuilds not in (None, 1):
        raise UserError(f"num_rebuilds is {rebuilds!r}, but a Run with environment_builder.episode_conditions_path "
                        "replays one overlay in one build: Arena's runner requires num_rebuilds: 1; set it to 1 or "
                        "drop episode_conditions_path", where=where, key=f"{key}.num_rebuilds")
    limit = run.get("rollout_limit") if isinstance(run.get("rollout_limit"), dict) else {}
    if limit.get("num_steps") is not None:
        raise UserError("a Run replaying episode_conditions_path plays the file's episodes, not a step budget "
                        "(Arena refuses num_steps with it); drop num_steps", where=where,
                        key=f"{key}.rollout_limit.num_steps")
    path = conditions_file(where, given)
    if not path.is_file():
        raise UserError(f"the episode conditions file {path} does not exist; evalfleet reads it (relative to the "
                        "Experiment file's folder) to plan the Run's episodes and carries it into Arena's runner "
                        "task; give the path of a JSON lines file here", where=where, key=ckey)
    text_sha, lines = read_set_file(path, where, ckey)
    if not isinstance(lines, list):
        raise UserError("an episode conditions file is JSON lines (.jsonl): one episode's `variations` per line",
                        where=str(path))
    count = len(arena_conditions(lines, text_sha, task_of(run) or "", str(path)))
    if limit.get("num_episodes") is not None and limit["num_episodes"] != count:
        raise UserError(f"num_episodes is {limit['num_episodes']!r}, but Arena takes the episode count from "
                        f"episode_conditions_path: {given} lists {count} episodes; drop num_episodes or set it to "
                        f"{count}", where=where, key=f"{key}.rollout_limit.num_episodes")
    return {**run, "rollout_limit": {"num_episodes": count}}


def _native_run(run: dict[str, Any], entry: Any, where: str, key: str) -> dict[str, Any]:
    builder = dict(run["environment_builder"])
    env = dict(run["environment"])
    fields = set(entry.options.model_fields) if entry.options is not None else set()
    bkey = f"{key}.environment_builder"
    out = dict(run)
    if builder.get("placement_seed") is not None:
        raise UserError(f"placement_seed is Isaac Lab Arena's object placement seed, taken only by {ARENA_TYPES}; "
                        f"{env['type']} places its objects from each episode's seed (the Experiment's `seed`): drop "
                        "it", where=where, key=f"{bkey}.placement_seed")
    instruction = builder.pop("language_instruction", None)
    if instruction is not None:
        _set_equivalent(env, "instruction", instruction, fields, where, f"{bkey}.language_instruction", key)
    height, width = builder.pop("camera_height", None), builder.pop("camera_width", None)
    if height is not None or width is not None:
        which = "camera_height" if height is not None else "camera_width"
        size_field = getattr(entry.options, "size_field", None) if entry.options is not None else None
        if height is None or width is None:
            missing = "camera_width" if height is not None else "camera_height"
            raise UserError(f"give camera_height and camera_width together; {missing} is missing", where=where,
                            key=f"{bkey}.{missing}")
        _set_equivalent(env, size_field, [height, width], fields, where, f"{bkey}.{which}", key)
    conditions = builder.pop("episode_conditions_path", None)
    if conditions is not None:
        if out.get("conditions") is not None:
            raise UserError(f"{bkey}.episode_conditions_path and {key}.conditions both give the episodes to replay; "
                            "keep one of them (episode_conditions_path is Arena's spelling)", where=where,
                            key=f"{bkey}.episode_conditions_path")
        rebuilds = out.get("num_rebuilds")
        if rebuilds not in (None, 1):
            raise UserError(f"num_rebuilds is {rebuilds!r}, but a Run replaying episode_conditions_path needs "
                            "num_rebuilds: 1 (Arena's rule); set it to 1 or drop it", where=where,
                            key=f"{key}.num_rebuilds")
        out["conditions"] = conditions
    out.update(environment=env, environment_builder=builder)
    return out


def _set_equivalent(env: dict[str, Any], option: str | None, value: Any, fields: set[str], where: str,
                    key: str, run_key: str) -> None:
    """Put an Arena builder key's value into the environment option that means the same, once."""
    name = key.rsplit(".", 1)[-1]
    if option is None or option not in fields:
        raise UserError(f"{name} has no equivalent in environment type {env['type']!r}; it is taken by {ARENA_TYPES} "
                        "and, as `instruction` / `image_size`, by evalfleet's environments that have that option "
                        "(see docs/environments.md): drop it or set the environment's own option",
                        where=where, key=key)
    if env.get(option) is not None and env[option] != value:
        raise UserError(f"{key} and {run_key}.environment.{option} set the same thing differently ({value!r} and "
                        f"{env[option]!r}); keep one of them", where=where, key=key)
    env[option] = value
