"""One quoting rule for every value that reaches a shell script evalfleet renders (OSMO task scripts now; any
scheduler's later).

Every value is one shell word that bash never expands: `quote` puts it in single quotes (a quote inside as
``'\\''``), so `$`, backticks, `"`, `;`, spaces and newlines stay the characters they are. What must expand
when the script runs is said explicitly, and only evalfleet's own code says it:

* `Var("OUT")` is ``"$OUT"``: a variable the script itself sets (or its runner exports);
* `Raw("{{output}}")` is text evalfleet wrote, placed as is: a token the scheduler substitutes before the
  script runs, a ``$(...)`` of the script's own.

A user-provided value is never a `Var` or a `Raw`. `word(...)` glues pieces into one word
(``word(Var("OUT"), "/a b")`` → ``"$OUT"'/a b'``: the closing quote ends the name) and `command(...)` joins
words into a line. NUL cannot be carried by any shell word (a process's arguments end at NUL), so `quote`
refuses it with a UserError; callers name the key through `key=`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evalfleet.errors import UserError

VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")  # words that mean themselves unquoted (as shlex.quote)


@dataclass(frozen=True)
class Var:
    """``"$NAME"``: expanded when the script runs. NAME is set by the script itself, never by a user."""

    name: str

    def __post_init__(self) -> None:
        if not VAR_NAME.fullmatch(self.name):
            raise ValueError(f"not a shell variable name: {self.name!r}")


@dataclass(frozen=True)
class Raw:
    """Text evalfleet wrote, placed as is (a scheduler's token such as ``{{output}}``, the script's own
    ``$(...)``). Never holds a user value."""

    text: str


Piece = str | int | float | Var | Raw


def quote(value: str | float, *, key: str | None = None, where: str | None = None) -> str:
    """`value` as one shell word bash never expands. NUL is refused (UserError naming `key`)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TypeError(f"not a shell value: {value!r}")
    text = value if isinstance(value, str) else str(value)
    if "\0" in text:
        raise UserError("a NUL character cannot be passed to a shell command: remove it", where=where, key=key)
    if text and _SAFE.fullmatch(text):
        return text
    return "'" + text.replace("'", "'\\''") + "'"


def _piece(piece: Piece, key: str | None) -> str:
    if isinstance(piece, Var):
        return f'"${piece.name}"'
    if isinstance(piece, Raw):
        return piece.text
    return quote(piece, key=key)


def word(*pieces: Piece, key: str | None = None) -> str:
    """The pieces glued into one shell word: values quoted, `Var` expanded, `Raw` as written."""
    if not pieces:
        return "''"
    return "".join(_piece(p, key) for p in pieces)


def command(*words: Piece | tuple[Piece, ...], key: str | None = None) -> str:
    """One shell line of words; a tuple is one word made of its pieces (see `word`)."""
    return " ".join(word(*w, key=key) if isinstance(w, tuple) else word(w, key=key) for w in words)


def assign(name: str, *pieces: Piece, key: str | None = None) -> str:
    """``NAME=word``: a variable the script sets (NAME checked, the value quoted)."""
    if not VAR_NAME.fullmatch(name):
        raise ValueError(f"not a shell variable name: {name!r}")
    return f"{name}={word(*pieces, key=key)}"
