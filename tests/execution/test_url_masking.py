"""Issue #52, finding 3: URL credentials are found by the URL's structure, never by a character class. A property
over URLs whose user and password hold random printable characters (quotes, brackets, braces, `<>`, a backtick,
spaces, `@`, `/`, `:`, even `x://`), standing in random text as it is printed: bare, quoted, in parentheses,
inside JSON and repr(). Unique markers are spread through the user and the password; no marker, and no longer
run of their letters and digits, survives masking; the host, the path and the text around stay readable where
the line is unambiguous (no other URL before it, no other `@` after it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalfleet_testkit import run_evalfleet
from evalfleet.secrets import MASK, carries_credentials, mask_url, mask_value, shown_input

SPECIALS = list("()'[]{}<>\"` @/:\\;,.%#?&=+!$*~|^") + ["://", "x://", "@h", "'@", "@'", "@ ", ":/", "é", "✓"]
CHAR = st.one_of(st.sampled_from(SPECIALS), st.characters(categories=["L", "N", "P", "S", "Zs"]))
CHUNK = st.lists(CHAR, max_size=6).map("".join)
MARK = "MK{}Z"  # ASCII letters and digits: JSON and repr() leave them as they are
TEXT = st.lists(st.one_of(CHAR, st.just("\n")), max_size=12).map("".join).filter(lambda t: "MK" not in t)
HOST = st.from_regex(r"[a-z0-9][a-z0-9.-]{0,10}(:[0-9]{1,5})?", fullmatch=True)
PATH = st.from_regex(r"(/[a-z0-9._{}-]{0,8}){0,3}", fullmatch=True)
SCHEME = st.sampled_from(["s3", "https", "http", "gs", "postgresql+psycopg2", "mlflow-artifacts", "swift"])

WRAPS = {
    "bare": lambda u: u,
    "single quotes": lambda u: f"'{u}'",
    "double quotes": lambda u: f'"{u}"',
    "parentheses": lambda u: f"({u})",
    "brackets": lambda u: f"[{u}]",
    "braces": lambda u: f"{{{u}}}",
    "angle brackets": lambda u: f"<{u}>",
    "backticks": lambda u: f"`{u}`",
    "json": lambda u: json.dumps({"tracking_uri": u, "experiment": "evalfleet"}),
    "json list": lambda u: json.dumps(["s3://bucket/x", u]),
    "repr": repr,
    "repr in a message": lambda u: f"cannot open {u!r} (see the docs)",
    "repr of a dict": lambda u: repr({"output_url": u, "n": 1}),
}


@st.composite
def marked(draw: st.DrawFn, first: int) -> str:
    """Random chunks with a unique marker before, between and after them."""
    chunks = draw(st.lists(CHUNK, min_size=1, max_size=4))
    return "".join(MARK.format(first + i) + c for i, c in enumerate(chunks)) + MARK.format(first + len(chunks))


def alnum_runs(text: str, length: int) -> set[str]:
    """Every run of `length` letters and digits in `text` (what no escaping changes)."""
    return {text[i:i + length] for i in range(len(text) - length + 1) if text[i:i + length].isalnum()}


@settings(max_examples=600, deadline=None)
@given(scheme=SCHEME, user=marked(0), password=marked(10), host=HOST, path=PATH, prefix=TEXT, suffix=TEXT,
       wrap=st.sampled_from(sorted(WRAPS)))
def test_no_credential_character_survives_masking(scheme, user, password, host, path, prefix, suffix, wrap):
    url = f"{scheme}://{user}:{password}@{host}{path}"
    text = prefix + WRAPS[wrap](url) + suffix
    clean = prefix + WRAPS[wrap](f"{scheme}://{MASK}@{host}{path}") + suffix  # what the ideal masking shows
    shown = [mask_url(text), mask_url(text, per_line=False), mask_value("tracking_uri", url), shown_input("x", url)]
    for masked in shown:
        assert "MK" not in masked, (wrap, masked)
        leaked = alnum_runs(user + password, 6) - alnum_runs(clean, 6)
        assert not [run for run in leaked if run in masked], (wrap, masked)
    assert carries_credentials(url)
    assert mask_value("tracking_uri", url) == f"{scheme}://{MASK}@{host}{path}"
    if "://" not in prefix and "@" not in suffix:  # unambiguous: the host, the path and the text around stay
        masked = mask_url(text)
        assert f"://{MASK}@{host}{path}" in masked and masked.startswith(prefix) and masked.endswith(suffix)


@given(text=TEXT, host=HOST, path=PATH)
def test_text_without_credentials_is_left_alone(text, host, path):
    line = f"{text} s3://{host}{path} {text}"
    if "@" not in line:
        assert mask_url(line) == line and not carries_credentials(f"s3://{host}{path}")


@pytest.mark.parametrize("password", ["pa ss(w)rd", "x'y[z]", 'q"u{o}t<e>`d`'])
def test_collect_refuses_a_url_whose_password_holds_spaces_quotes_or_brackets_and_never_prints_it(
        tmp_path: Path, password: str) -> None:
    done = run_evalfleet("collect", f"s3://AKIAKEYID:{password}@bucket/x", "--output", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert "s3://***@bucket/x" in done.stderr and "carries credentials" in done.stderr
    assert "AKIAKEYID" not in done.stderr + done.stdout
    assert not [part for part in password.replace("(", " ").split() if part in done.stderr]
    assert not (tmp_path / "out").exists()


def test_the_tracked_config_is_masked_string_by_string_and_stays_a_document() -> None:
    """The config a tracker logs: a URI whose password holds a space is masked; a later `@` in another string
    is left alone (masking the JSON text as one line would have joined them)."""
    from evalfleet.outputs.tracking.payload import masked

    document = {"tracking": {"mlflow": {"tracking_uri": "https://user:pa ss\"w@mlflow.example/x"}},
                "runs": {"r": {"note": "ask me@home", "list": ["s3://bucket/x", 1]}}}
    assert masked(document) == {"tracking": {"mlflow": {"tracking_uri": "https://***@mlflow.example/x"}},
                                "runs": {"r": {"note": "ask me@home", "list": ["s3://bucket/x", 1]}}}
