"""The Experiment's non-whole numbers: numbers only. Lax pydantic would read `alpha: '0.05'`, `control_hz: '80'`
or `fixed_ms: true` as numbers; a key that means a number refuses them, naming the key. A whole number is a number.

One form of string is a number: `1e-3`, `1.5e3`, `2E+6`. YAML 1.2 reads them as numbers but PyYAML (YAML 1.1)
reads them as strings, so a string in exactly that form is taken as the number it writes. The loader itself is
not changed: YAML documents evalfleet writes and reads back keep every string a string."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Strict

EXPONENT_FORM = re.compile(r"[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+")


def _exponent_form(value: Any) -> Any:
    if not isinstance(value, str) or not EXPONENT_FORM.fullmatch(value):
        return value
    number = float(value.replace("_", ""))
    if not math.isfinite(number):  # 1e400
        raise ValueError(f"must be a finite number, got {value!r}")
    return number


Float = Annotated[float, BeforeValidator(_exponent_form), Strict()]
