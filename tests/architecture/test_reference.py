"""The reference made from the code (#56, must show 2): the committed pages under docs/reference are exactly what
`evalfleet reference` makes from the code, and they hold every key of the schema's models, every built-in
environment type with each of its options and variations, and every command, found here by walking the models,
the registry and the parsers independently of the generator."""

from __future__ import annotations

import argparse
import typing

from evalfleet_testkit import ROOT, run_evalfleet
from pydantic import BaseModel

from evalfleet.cli import build_parser
from evalfleet.experiment.schema import Experiment

PAGES = ROOT / "docs" / "reference"


def models_of(annotation) -> list[tuple[str, type[BaseModel]]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is dict:
        return [(".<name>" + s, m) for s, m in models_of(args[1])]
    return [pair for arg in args for pair in models_of(arg)]


def every_key(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        path = prefix + (field.alias or name)
        keys.append(path)
        for suffix, inner in models_of(field.annotation):
            if inner is not model:
                keys += every_key(inner, f"{path}{suffix}.")
    return keys


def test_the_committed_reference_is_what_the_code_makes() -> None:
    done = run_evalfleet("reference", "--output", str(PAGES), "--check", env=None)
    assert done.returncode == 0, done.stderr  # else: run `evalfleet reference --output docs/reference`


def test_every_key_environment_and_command_is_documented() -> None:
    from evalfleet.plugins import load_registries
    from evalfleet.sim.base import ENVIRONMENTS

    experiment = (PAGES / "experiment.md").read_text()
    keys = every_key(Experiment)
    assert len(keys) > 100 and "runs.<name>.recording.trajectories.keys" in keys
    assert [k for k in keys if f"| `{k}` |" not in experiment] == []

    environments = (PAGES / "environments.md").read_text()
    load_registries()
    builtin = [e for e in ENVIRONMENTS if e.options is not None and e.options.__module__.startswith("evalfleet.")]
    assert {e.name for e in builtin} >= {"metaworld", "pusht", "gymnasium", "libero", "robosuite", "aloha"}
    for entry in builtin:
        section = environments.split(f"## `{entry.name}`", 1)[1].split("\n## ", 1)[0]
        assert [k for k in every_key(entry.options) if f"| `{k}` |" not in section] == [], entry.name
        variations = entry.info.variations if entry.info is not None else {}
        assert [v for v in variations if f"| `{v}` |" not in section] == [], entry.name

    commands = (PAGES / "commands.md").read_text()
    names = []

    def visit(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, sub_parser in action.choices.items():
                    names.append(f"{name} {sub}")
                    visit(sub_parser, f"{name} {sub}")

    visit(build_parser(), "evalfleet")
    assert {"evalfleet run", "evalfleet board", "evalfleet verify", "evalfleet store add"} <= set(names)
    assert [n for n in names if f"## `{n}`" not in commands] == []


def test_every_experiment_key_says_what_it_is():
    """Each key of the Experiment's models has a description (a `Field(description=...)` or a comment on the
    field, its own class's or a base's), so no row of docs/reference/experiment.md is blank."""
    from evalfleet.cli.reference import experiment_keys

    assert [k.path for k in experiment_keys() if not k.description.strip()] == []


def test_every_output_file_and_record_field_is_documented() -> None:
    """The output folder's page names every file and folder `layout.py` defines for the output folder and a Run
    folder, each beside the constant that names it, and every field of an episode record, aliases included."""
    import dataclasses
    import re

    import evalfleet.layout as layout
    from evalfleet.rollout.records import ARENA_ALIASES, EpisodeRecord

    page = (PAGES / "outputs.md").read_text()
    source = (ROOT / "src" / "evalfleet" / "layout.py").read_text()
    folder_section = source.split("# --- the output folder", 1)[1].split("# --- inside INTERNAL_DIR", 1)[0]
    constants = re.findall(r"^([A-Z_]+) = ", folder_section, re.M)
    assert len(constants) > 15
    for name in constants:
        value = getattr(layout, name)
        if name in ("RECORDS_PREFIX", "RECORDS_SUFFIX"):
            continue  # parts of RECORDS_FILE, which is listed
        assert re.search(rf"^ *{re.escape(value)}\S* +{name}\b", page, re.M), (name, value)
    fields = [f.name for f in dataclasses.fields(EpisodeRecord)] + list(ARENA_ALIASES)
    assert [f for f in fields if f"| `{f}` |" not in page] == []
    sample = EpisodeRecord("r", "t", "p", 3, 5, "success", True, 7, 0.1).to_json()
    assert set(sample) <= set(fields)  # nothing a record carries is left out of the page
