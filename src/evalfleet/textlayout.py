"""Plain-text tables and commands that read well in any width and when piped.

A terminal table that does not fit either truncates names (`push_expe…`) or wraps them mid-word; both make
Runs impossible to tell apart. So a table here is laid out one of two ways, and never cuts a cell:
- *columns*, aligned, when every cell fits whole in the width;
- *blocks* otherwise: each row's first cell (its name) on a line of its own, the other cells as
  `header: value` fields below it, wrapped between fields, never inside one.
Plain text (no box drawing, no colour) so that `| grep`, `| less` and logs read the same as the terminal.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass

COLUMN_GAP = "  "
BLOCK_INDENT = "    "
FIELD_GAP = "   "


@dataclass(frozen=True)
class Column:
    header: str
    align: str = "left"  # "left" | "right"


def output_width(default: int = 80) -> int:
    """The terminal's width (COLUMNS wins, as in `COLUMNS=80 evalfleet plan ...`); `default` when piped."""
    return shutil.get_terminal_size((default, 24)).columns


def table_lines(columns: list[Column], rows: list[list[str]], width: int, *, title: str | None = None,
                name_columns: int = 1) -> list[str]:
    """The table as lines of at most `width` characters, except a single cell longer than the width.
    In blocks, the first `name_columns` cells (what names a row) head each block, joined by " / "."""
    lines = [title] if title else []
    widths = [max([len(c.header)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    if sum(widths) + len(COLUMN_GAP) * (len(columns) - 1) <= width:
        def line(cells: list[str]) -> str:
            out = [cell.rjust(w) if col.align == "right" else cell.ljust(w)
                   for cell, w, col in zip(cells, widths, columns)]
            return COLUMN_GAP.join(out).rstrip()

        lines.append(line([c.header for c in columns]))
        lines.append(COLUMN_GAP.join("-" * w for w in widths))
        lines.extend(line(r) for r in rows)
        return lines
    for r in rows:
        lines.append(" / ".join(r[:name_columns]))
        fields = [f"{c.header}: {cell}" for c, cell in zip(columns[name_columns:], r[name_columns:])]
        lines.extend(wrap_fields(fields, width, indent=BLOCK_INDENT))
    return lines


def wrap_fields(fields: list[str], width: int, *, indent: str = "", gap: str = FIELD_GAP,
                continuation: str = "", hanging: str = "") -> list[str]:
    """`fields` joined by `gap` into lines of at most `width`, breaking only between fields (a field longer
    than a line gets a line of its own, whole). `continuation` ends every line but the last (e.g. " \\");
    `hanging` indents every line but the first a little more."""
    lines: list[str] = []
    current = ""
    room = width - len(continuation)
    for f in fields:
        candidate = f"{current}{gap}{f}" if current else f"{indent}{f}"
        if current and len(candidate) > room:
            lines.append(current + continuation)
            current = f"{indent}{hanging}{f}"
        else:
            current = candidate
    if current:
        lines.append(current)
    return lines


def command_lines(command: str, width: int, *, indent: str = "  ") -> list[str]:
    """A shell command wrapped between arguments with ` \\` continuations, so it pastes back into a shell and
    no path or option is split; a flag stays on the line of the value that follows it."""
    try:
        tokens = shlex.split(command, posix=True)
    except ValueError:  # not shell syntax after all: leave it whole
        return [indent + command]
    words: list[str] = []
    quoted = [_quote(t) for t in tokens]
    i = 0
    while i < len(quoted):
        word = quoted[i]
        if word.startswith("-") and "=" not in word and i + 1 < len(quoted) and not quoted[i + 1].startswith("-") \
                and quoted[i + 1] not in ("&&", "||", ";", "|"):
            word = f"{word} {quoted[i + 1]}"
            i += 1
        words.append(word)
        i += 1
    return wrap_fields(words, width, indent=indent, gap=" ", continuation=" \\", hanging="    ") or [indent]


def _quote(token: str) -> str:
    """Quote a token for the shell, keeping operators and `NAME=value` assignments readable."""
    if token in ("&&", "||", ";", "|"):
        return token
    name, eq, value = token.partition("=")
    if eq and name.isidentifier():
        return f"{name}={value if value == '***' else shlex.quote(value)}"  # *** is a masked secret
    return shlex.quote(token)
