"""Secrets (API keys, bucket credentials) never appear in a file or a printed line evalfleet writes.

A policy's `api_key: VALUE` written in an Experiment file is taken out of the resolved Experiment when it is
loaded: the document every file is made from says `api_key_env: EVALFLEET_SECRET_<hash>` instead, and the
value travels only in that environment variable — exported for the runners and servers evalfleet starts
(`exported`), in a Ray job's runtime env, or through an OSMO credential the user registers. A user may name
the variable directly (`api_key_env: MY_KEY`); then evalfleet never sees the value at all. Anything else that
looks secret (a key named like a token or password, credentials inside a URL) is masked in listings and
messages (`mask_url`, one rule: `credentials_span`); a URL setting that would be written somewhere (a storage
URL, a served policy's host, a tracking URI, `osmo.output_url`) is refused when it carries credentials.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from typing import Any, Iterator

MASK = "***"
EXTRACTED_KEYS = ("api_key",)  # clients of these read `<key>_env` (serving.client_options)
SECRET_NAME = re.compile(r"(^|_)(api_?key|token|password|passwd|secret|credentials?)($|_)", re.IGNORECASE)
# A URL's scheme (`s3`, `https`, `postgresql+psycopg2`): a letter, then these; `://` follows it.
SCHEME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
ENV_PREFIX = "EVALFLEET_SECRET_"


def looks_secret(key: str) -> bool:
    """A key whose value is a secret: `api_key`, `remote_api_token`, `password`, ... (`*_env` names are not)."""
    return not key.endswith("_env") and bool(SECRET_NAME.search(key))


def env_name(path: str) -> str:
    """The variable a secret at `path` (e.g. runs.push.policy.api_key) travels in: the same on every load."""
    return ENV_PREFIX + hashlib.sha256(path.encode()).hexdigest()[:12].upper()


def extract(node: Any, path: str = "") -> tuple[Any, dict[str, str]]:
    """`node` with every literal `api_key` replaced by `api_key_env: <variable>`, and variable → value."""
    found: dict[str, str] = {}
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if key in EXTRACTED_KEYS and isinstance(value, str) and value:
                name = env_name(where)
                found[name] = value
                out[f"{key}_env"] = name
            else:
                out[key], inner = extract(value, where)
                found.update(inner)
        return out, found
    if isinstance(node, list):
        items = [extract(v, f"{path}[{i}]") for i, v in enumerate(node)]
        for _, inner in items:
            found.update(inner)
        return [v for v, _ in items], found
    return node, found


def credentials_span(text: str) -> tuple[int, int] | None:
    """Where the credentials of a URL in `text` lie, as (start, end) of what `***` replaces, or None.

    The one rule, by URL structure and never by character class (a password may hold any printable character:
    quotes, brackets, spaces, `@`, `/`, `:`, even `x://`): credentials start after the FIRST `scheme://` of the
    text and end at its LAST `@` after that. What lies between counts as credentials when it holds a `:`
    (user:password) or no `/` (user@host); so `s3://bucket/run@2` keeps its path. Where that is ambiguous it
    masks too much, never too little: a line with two URLs, or a URL and a later `@` (an e-mail, a path's `@`),
    loses what lies between them, hosts included."""
    at = text.rfind("@")
    start = first_scheme_end(text, at) if at >= 0 else None
    if start is None:
        return None
    info = text[start:at]
    return (start, at) if ":" in info or "/" not in info else None


def first_scheme_end(text: str, stop: int) -> int | None:
    """Where the text after the first `scheme://` ending before `stop` starts, or None. (A scan, not a regex:
    a regex for the scheme takes quadratic time on a long run of letters.)"""
    sep = text.find("://", 0, stop)
    while sep >= 0:
        i = sep
        while i > 0 and text[i - 1] in SCHEME_CHARS:
            i -= 1
        if any(c.isascii() and c.isalpha() for c in text[i:sep]):  # a scheme starts with a letter
            return sep + 3
        sep = text.find("://", sep + 1, stop)
    return None


def carries_credentials(value: str) -> bool:
    """Whether the URL `value` (the whole value, line breaks and all) carries credentials (credentials_span)."""
    return credentials_span(value) is not None


def mask_url(text: str, *, per_line: bool = True) -> str:
    """`text` with its URLs' credentials masked: scheme://user:secret@host/... → scheme://***@host/...
    Used for every printed line, error message, log and written file that may hold a URL. Free text is
    masked line by line (a credential never holds a line break: a log keeps its other lines readable);
    `per_line=False` masks a value (one setting, one document string) as one piece."""
    if per_line and "\n" in text:
        return "\n".join(mask_url(line, per_line=False) for line in text.split("\n"))
    span = credentials_span(text)
    return text if span is None else text[:span[0]] + MASK + text[span[1]:]


def mask_value(key: str, value: Any) -> Any:
    """What a listing shows for `key=value`."""
    if looks_secret(key.rsplit(".", 1)[-1]) and value not in (None, ""):
        return MASK
    if isinstance(value, str):
        return mask_url(value, per_line=False)
    return value


def shown_input(key: str, value: Any) -> str:
    """How an error message shows the value a user gave for `key` ("got ..."): a secret key's value never
    (whatever its type: a numeric api_key too), a URL without its credentials."""
    if looks_secret(str(key).rsplit(".", 1)[-1]):
        return MASK
    return mask_url(repr(value))


def mask_text(text: str, values: Any) -> str:
    """`text` with every given secret value replaced by ***."""
    for value in sorted((v for v in values if isinstance(v, str) and v), key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


@contextlib.contextmanager
def exported(secrets: dict[str, str]) -> Iterator[None]:
    """The secrets in this process's environment while evalfleet's runners and servers start (they inherit
    it), restored afterwards."""
    before = {name: os.environ.get(name) for name in secrets}
    os.environ.update(secrets)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def resolve(value: str | None, env: str | None, *, key: str) -> str | None:
    """The secret itself: given directly, or read from the variable `env` names (an error names both). A named
    variable that is unset or empty is refused: an empty key would mean no authentication at all."""
    if value or not env:
        return value or None
    from evalfleet.errors import UserError

    env_key = f"{key}-env" if key.startswith("--") else f"{key}_env"  # a flag keeps its dashed spelling
    if env not in os.environ:
        hint = (" (evalfleet put this Experiment's key there: resume with the original Experiment file, which "
                "holds it)") if env.startswith(ENV_PREFIX) else ""
        raise UserError(f"environment variable {env} is not set{hint}", where="environment", key=env_key)
    if not os.environ[env]:
        raise UserError(f"environment variable {env} is empty: put the key in it (an empty key would serve or"
                        " connect without authentication)", where="environment", key=env_key)
    return os.environ[env]
