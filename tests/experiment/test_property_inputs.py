"""Property-based: whatever the input, the Experiment loader, the overrides and the record readers return
a result or raise a UserError (one line) — never another exception, never a hang. What loads also plans,
and its plan is strict JSON (no NaN), because every number that got through is finite.

Runs in the default test command; the example counts keep the whole file well under 30 s."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalfleet.errors import UserError
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.overrides import parse_override
from evalfleet.experiment.plan import make_plan
from evalfleet.experiment.safe_yaml import parse_yaml
from evalfleet.rollout.records import RunScope, iter_record_dicts, read_run_records, record_run

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

GOOD: dict[str, Any] = {
    "name": "prop",
    "runs": {
        "push_expert": {
            "environment": {"type": "metaworld", "task": "push-v3"},
            "policy": {"type": "metaworld_expert"},
            "rollout_limit": {"num_episodes": 3},
            "variations": {"robot.action_noise": {"enabled": True, "low": 0.0, "high": 0.1}},
        },
        "ext": {
            "environment": {"type": "some/tasks/alpha.yaml"},
            "policy": {"type": "my_pkg.Policy", "gain": 1.0},
            "rollout_limit": {"num_steps": 50},
        },
    },
}

# The vocabulary of an Experiment, so generated documents reach deep into the schema, not only "unknown key".
KEYS = ["name", "seed", "runs", "shared", "server_sharing", "environment", "policy", "rollout_limit",
        "environment_builder", "variations", "task", "policy_name", "recording", "max_attempts",
        "episode_timeout_s", "type", "num_episodes", "num_steps", "num_envs", "enabled", "sampler_cfg",
        "distribution", "low", "high", "mean", "std", "values", "video", "fps", "width", "height",
        "open_loop_horizon", "robot.action_noise", "object.position_noise", "push_expert", "ext", "metaworld",
        "metaworld_expert", "uniform", "normal", "choice", "push-v3", "serve"]

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**63 - 1, 2**63, 2**64, 10**30, 1_000_000, 1_000_001, 1024, 1025]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(KEYS), st.text(max_size=30),
    st.sampled_from(["", "\n", "a\nb", "r" * 101, "../x", "nan", "inf", "1e400", "\x00", "пуш", "a.b"]),
)
trees = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8), st.integers()), inner, max_size=4),
), max_leaves=25)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _replace(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = dict(node) if isinstance(node, dict) else list(node)
    copy[path[0]] = _replace(node[path[0]], path[1:], value)
    return copy


@st.composite
def mutated_documents(draw: st.DrawFn) -> Any:
    """GOOD with one to three values (anywhere, maps included) replaced by arbitrary trees."""
    doc: Any = GOOD
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        doc = _replace(doc, path, draw(trees))
    return doc


@pytest.fixture(scope="module")
def exp_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prop") / "exp.yaml"


def _load_or_user_error(path: Path, overrides: list[str] = ()) -> None:  # type: ignore[assignment]
    """The property: a LoadedExperiment whose plan is strict JSON, or a one-line UserError."""
    try:
        loaded = load_experiment(path, overrides)
    except UserError as exc:
        assert "\n" not in exc.line() and exc.line()
        return
    plan = make_plan(loaded, workers=2)
    json.dumps(plan.to_json(with_episodes=plan.total_episodes <= 200), allow_nan=False)
    json.dumps(loaded.resolved_document(), allow_nan=False)


@SETTINGS
@given(doc=st.one_of(mutated_documents(), trees))
def test_any_document_loads_or_is_a_user_error(doc: Any, exp_file: Path) -> None:
    exp_file.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    _load_or_user_error(exp_file)


YAML_BITS = ["runs:", "  r:", "    ", "&a ", "*a", "[", "]", "{", "}", ": ", "- ", "!!binary ", "!!set ", "!!python/x ",
             ".nan", ".inf", "? ", "<<: *a", "\n", "'", '"', "\\0", "#", "---", "%YAML 1.1", "\t", "1e400", "|\n"]


@SETTINGS
@given(text=st.one_of(st.text(max_size=200), st.lists(st.sampled_from(YAML_BITS), max_size=40).map("".join)))
def test_any_text_parses_or_is_a_user_error(text: str, exp_file: Path) -> None:
    try:
        value = parse_yaml(text, "prop.yaml")
    except UserError as exc:
        assert "\n" not in exc.line()
        return
    json.dumps(value, allow_nan=False)  # plain, finite data only
    exp_file.write_text(text, encoding="utf-8", errors="surrogatepass")
    _load_or_user_error(exp_file)


@SETTINGS
@given(data=st.binary(max_size=300))
def test_any_bytes_as_the_file_load_or_are_a_user_error(data: bytes, exp_file: Path) -> None:
    exp_file.write_bytes(data)
    _load_or_user_error(exp_file)


OVERRIDE_KEYS = ["runs.push_expert.rollout_limit.num_episodes", "runs.push_expert.variations.robot.action_noise",
                 "runs.push_expert.variations.robot.action_noise.low", "runs.ext.policy.gain", "shared.task",
                 "shared.environment_builder.num_envs", "runs.push_expert", "runs.nobody.task", "seed", "name",
                 "server_sharing", "experiment_cfg.seed", "osmo.pool", "ray.address", "runs..x", "shared", "",
                 "runs.push_expert.environment.type", "runs.ext.rollout_limit"]


@st.composite
def override_texts(draw: st.DrawFn) -> str:
    key = draw(st.one_of(st.sampled_from(OVERRIDE_KEYS), st.text(max_size=20)))
    sep = draw(st.sampled_from(["=", "=", "", "=="]))
    value = draw(st.one_of(st.text(max_size=30), st.lists(st.sampled_from(YAML_BITS), max_size=12).map("".join),
                           trees.map(lambda t: yaml.safe_dump(t, default_flow_style=True).strip())))
    return f"{key}{sep}{value}"


@SETTINGS
@given(overrides=st.lists(override_texts(), min_size=1, max_size=3))
def test_any_overrides_load_or_are_a_user_error(overrides: list[str], exp_file: Path) -> None:
    exp_file.write_text(yaml.safe_dump(GOOD), encoding="utf-8")
    for text in overrides:
        try:
            parse_override(text)
        except UserError as exc:
            assert "\n" not in exc.line()
    _load_or_user_error(exp_file, overrides)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=10,
)
record_like = st.fixed_dictionaries(
    {},
    optional={"run": st.one_of(st.sampled_from(["r", "s"]), json_values), "job_name": json_values,
              "episode": st.one_of(st.integers(-3, 5), json_values), "env_id": json_values,
              "status": st.one_of(st.sampled_from(["success", "failure", "error"]), json_values),
              "attempt": st.one_of(st.integers(0, 4), json_values), "timestamp": json_values},
)
lines = st.one_of(record_like.map(json.dumps), json_values.map(json.dumps), st.text(max_size=40),
                  st.sampled_from(["null", "[1, 2]", "{", '{"episode": 1e400}', "NaN", '{"run": "r", "episode": "x"}']))


@SETTINGS
@given(body=st.lists(lines, max_size=12), torn=st.booleans())
def test_any_record_file_reads_without_error(body: list[str], torn: bool, exp_file: Path) -> None:
    path = exp_file.with_name("records.jsonl")
    text = "\n".join(body) + ("" if torn else "\n")
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    records = list(iter_record_dicts(path))
    assert all(isinstance(r, dict) for r in records)
    counted = read_run_records(RunScope("r", 5), [path, path])
    assert all(isinstance(ep, int) and 0 <= ep < 5 for ep in counted.by_episode)
    assert all(record_run(rec) in (None, "r") for rec in counted.records)  # naming no Run: the folder's
    from evalfleet.rollout.records import is_decided

    for rec in records:
        is_decided(rec, 3)


def test_the_properties_can_fail(exp_file: Path) -> None:
    """The checks above are not vacuous: a NaN that slipped through would break strict JSON."""
    with pytest.raises(ValueError):
        json.dumps({"x": math.nan}, allow_nan=False)
    exp_file.write_text(yaml.safe_dump(GOOD), encoding="utf-8")
    loaded = load_experiment(exp_file)
    assert set(loaded.experiment.runs) == {"push_expert", "ext"}
