"""The reference made from the code (#56): every Experiment key from the pydantic models (type, default, bounds, and
the comment the code gives it), every environment type's options and variations from the registry, every command
and flag from the command line's parsers, the output folder's files (`layout.py`) and an episode record's fields
(`rollout/records.py`'s `EpisodeRecord`). Nothing in it is written by hand, so it cannot drift from the code:
`evalfleet reference --output docs/reference` writes the pages, `--check` exits 1 when the committed pages are not
what the code gives (tests/architecture/test_reference.py runs it).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import textwrap
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

PAGES = ("experiment.md", "environments.md", "commands.md", "outputs.md")


@dataclass(frozen=True)
class Key:
    path: str  # dotted, e.g. runs.<name>.recording.trajectories.keys
    type: str
    default: str
    bounds: str
    description: str


def field_comments(model: type) -> dict[str, str]:
    """Each field's comment in the source of the class that defines it (the model's or a base's): the `#` lines
    right above it, and a trailing `# ...`."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):  # a subclass's comment wins over its base's
        if isinstance(cls, type) and issubclass(cls, BaseModel) and cls is not BaseModel:
            found.update(_own_comments(cls))
    return found


def _own_comments(model: type) -> dict[str, str]:
    """The comments of the fields `model`'s own class body defines."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    out: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        above, row = [], node.lineno - 2
        while row >= 0 and lines[row].strip().startswith("#"):
            above.insert(0, lines[row].strip().lstrip("#").strip())
            row -= 1
        last = lines[node.end_lineno - 1]
        trailing = last.split("  # ", 1)[1] if "  # " in last else ""
        # a checker's own markers (`type: ignore[...]`, `noqa: ...`) say nothing to a reader
        trailing = " ".join(part.strip() for part in trailing.split("#")
                            if part.strip() and not part.strip().startswith(("type:", "noqa")))
        text = " ".join([*above, trailing]).strip()
        if text:
            out[node.target.id] = text
    return out


def _type_text(annotation: Any) -> str:
    """A field's type as a reader writes it: `int | None`, `list['state' | 'action']`, `Run`."""
    import types

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_text(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (list, dict, tuple, set):
        return f"{origin.__name__}[{', '.join(_type_text(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _bounds(field: Any) -> str:
    parts = []
    for item in field.metadata:
        for name, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "length >="),
                           ("max_length", "length <=")):
            value = getattr(item, name, None)
            if value is not None:
                parts.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
    return ", ".join(parts)


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    if isinstance(value, BaseModel):
        return "its keys' defaults"
    return repr(value)


def _models_in(annotation: Any) -> list[tuple[str, type[BaseModel]]]:
    """The models a field holds: ("", M) for M itself, (".<name>", M) for a map of M (Runs by name)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    out = []
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is dict and len(args) == 2:
        return [(".<name>" + suffix, model) for suffix, model in _models_in(args[1])]
    for arg in args:
        out += _models_in(arg)
    return out


def model_keys(model: type[BaseModel], prefix: str = "") -> list[Key]:
    """Every key of `model` and of the models its fields hold, depth first, in declaration order."""
    keys = []
    comments = field_comments(model)
    for name, field in model.model_fields.items():
        key = field.alias or name
        path = f"{prefix}{key}"
        description = field.description or comments.get(name, "")
        keys.append(Key(path, _type_text(field.annotation), _default(field), _bounds(field), description))
        for suffix, inner in _models_in(field.annotation):
            if inner is not model:
                keys += model_keys(inner, f"{path}{suffix}.")
    return keys


def experiment_keys() -> list[Key]:
    from evalfleet.experiment.schema import Experiment

    return model_keys(Experiment)


def environment_types() -> list[dict[str, Any]]:
    """Each registered environment type: its options (from its options model) and variations."""
    from evalfleet.plugins import load_registries
    from evalfleet.sim.base import ENVIRONMENTS, EnvironmentInfo

    load_registries()
    out = []
    for entry in sorted(ENVIRONMENTS, key=lambda e: e.name):
        if not builtin(entry):
            continue  # a plug-in's type (EVALFLEET_PLUGINS, an installed package) is not evalfleet's reference
        info = entry.info if isinstance(entry.info, EnvironmentInfo) else None
        out.append({"name": entry.name, "summary": getattr(entry, "summary", "") or "",
                    "options": model_keys(entry.options) if entry.options is not None else [],
                    "variations": sorted((info.variations if info else {}).values(), key=lambda v: v.name)})
    return out


def builtin(entry: Any) -> bool:
    """Whether a registry entry is evalfleet's own (its options model or entry point in evalfleet), read without
    importing its factory."""
    where = entry.options.__module__ if entry.options is not None else (
        entry.target if isinstance(entry.target, str) else entry.target.__module__)
    return where.startswith("evalfleet.")


def commands() -> list[dict[str, Any]]:
    """Each command (and sub-command) with its help and arguments, from the parsers."""
    from evalfleet.cli import build_parser

    out: list[dict[str, Any]] = []

    def visit(parser: argparse.ArgumentParser, name: str, help_text: str) -> None:
        arguments, subs = [], []
        for action in parser._actions:  # argparse keeps no public list of its arguments
            if isinstance(action, argparse._SubParsersAction):
                helps = {choice.dest: choice.help for choice in action._choices_actions}
                subs += [(f"{name} {sub}", p, helps.get(sub, "")) for sub, p in action.choices.items()]
            elif not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS:
                arguments.append({"flags": ", ".join(action.option_strings) or action.metavar or action.dest,
                                  "help": action.help or "",
                                  "default": "" if action.default in (None, False, argparse.SUPPRESS, [])
                                  else repr(action.default)})
        if name != "evalfleet":
            out.append({"name": name, "help": help_text or parser.description or "", "arguments": arguments})
        for sub_name, sub_parser, sub_help in subs:
            visit(sub_parser, sub_name, sub_help)

    visit(build_parser(), "evalfleet", "")
    return out


def output_layout() -> tuple[str, str]:
    """(the output folder's tree, what follows it) as `layout.py` states them: the names are its constants."""
    import evalfleet.layout as layout

    doc = inspect.getdoc(layout) or ""
    before, tree, after = doc.split("```", 2)
    return tree.strip("\n"), " ".join(after.split())


def record_fields() -> list[dict[str, str]]:
    """Every field of an episode record (`EpisodeRecord`, one line of `episode_results.jsonl`) with its type,
    default and comment, then the aliases `to_json` adds for Isaac Lab Arena's readers."""
    import dataclasses

    from evalfleet.rollout.records import ARENA_ALIASES, EpisodeRecord

    hints = typing.get_type_hints(EpisodeRecord)
    comments = _own_comments(EpisodeRecord)
    rows = []
    for f in dataclasses.fields(EpisodeRecord):
        if f.default is not dataclasses.MISSING:
            default = repr(f.default)
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = "the time it was written" if f.name == "timestamp" else repr(f.default_factory())  # type: ignore[misc]
        else:
            default = "always there"
        rows.append({"name": f.name, "type": _type_text(hints[f.name]), "default": default,
                     "description": comments.get(f.name, "")})
    types = {row["name"]: row["type"] for row in rows}
    for alias, name in ARENA_ALIASES.items():
        rows.append({"name": alias, "type": types[name] if name else "int", "default": "always there",
                     "description": f"Arena's name for `{name}`" if name else "Arena's episode index within its "
                     "environment: always 0 (one episode per environment slot)"})
    return rows


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _key_rows(keys: list[Key]) -> list[list[str]]:
    return [[f"`{k.path}`", _cell(k.type), _cell(k.default), _cell(k.bounds), _cell(k.description)] for k in keys]


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table after a blank line; cells already escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n" + "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def pages() -> dict[str, str]:
    """The reference pages' Markdown, by file name."""
    head = "<!-- made by `evalfleet reference --output docs/reference`: edit the code, not this page -->\n\n"
    experiment = (head + "# Experiment keys\n\nEvery key an Experiment file takes, from the schema's models "
                  "(`experiment/schema.py`). `runs.<name>` is one Run; `shared` takes the same keys as a Run and "
                  "is merged into every Run. `environment` and `policy` take a `type` and that type's options "
                  "(see environments.md and `evalfleet plan`).\n" + _table(
                      ["key", "type", "default", "bounds", "what it is"], _key_rows(experiment_keys())))
    parts = [head + "# Environment types\n\nEvery registered environment type, its options and its variations "
             "(the registry: `sim/*_spec.py`).\n"]
    for env in environment_types():
        parts.append(f"\n## `{env['name']}`\n\n{_cell(env['summary'])}\n")
        if env["options"]:
            parts.append(_table(["option", "type", "default", "bounds", "what it is"], _key_rows(env["options"])))
        if env["variations"]:
            parts.append(_table(["variation", "kind", "what it changes"],
                                [[f"`{v.name}`", v.kind, _cell(v.description)] for v in env["variations"]]))
    lines = [head + "# Commands\n\nEvery command and its arguments, from the command line's parsers "
             "(`cli/`).\n"]
    for command in commands():
        lines.append(f"\n## `{command['name']}`\n\n{_cell(command['help'])}\n")
        if command["arguments"]:
            lines.append(_table(["argument", "default", "what it does"],
                                [[f"`{_cell(a['flags'])}`", _cell(a["default"]), _cell(a["help"])]
                                 for a in command["arguments"]]))
    tree, names_beside = output_layout()
    outputs = (head + "# The output folder and its records\n\nEvery file and folder of an output folder, as "
               "`layout.py` names them (`evalfleet collect` and the report read nothing else), then every field of "
               "an episode record: one JSON line of `<run>/episode_results.jsonl` (and of `<run>/parts/`), from "
               "`rollout/records.py`'s `EpisodeRecord`. A field whose value is None is left out of the line, "
               "`success` excepted.\n\n```text\n" + tree + "\n```\n\n" + names_beside + "\n\n"
               "## Episode record fields\n" + _table(
                   ["field", "type", "default", "what it is"],
                   [[f"`{r['name']}`", _cell(r["type"]), _cell(r["default"]), _cell(r["description"])]
                    for r in record_fields()]))
    return {"experiment.md": experiment, "environments.md": "".join(parts), "commands.md": "".join(lines),
            "outputs.md": outputs}


def register(sub: Any) -> None:
    p = sub.add_parser("reference", help="write the reference made from the code (Experiment keys, environment "
                       "types, commands, output files and record fields)", description=__doc__.split("\n\n")[0])
    p.add_argument("--output", default="docs/reference", metavar="DIR", help="the folder of the pages")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when the pages there differ")
    p.set_defaults(handler=_reference)


def _reference(args: argparse.Namespace) -> int:
    import sys

    from evalfleet.errors import UserError

    folder = Path(args.output)
    made = pages()
    if args.check:
        stale = [name for name, text in made.items()
                 if not (folder / name).is_file() or (folder / name).read_text(encoding="utf-8") != text]
        for name in stale:
            print(f"{folder / name}: not what the code gives; run `evalfleet reference --output {folder}`",
                  file=sys.stderr)
        return 1 if stale else 0
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in made.items():
            (folder / name).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write the pages ({exc.strerror or exc})", where=str(folder), key="--output") from None
    print(f"wrote {', '.join(str(folder / n) for n in made)}")
    return 0
