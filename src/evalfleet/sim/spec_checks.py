"""Checks the environment option models (sim/*_spec.py) share, so one rule holds for every benchmark.

- `Int`: an integer that is not a boolean (YAML's `true` is an int to Python, so `max_steps: true`
  would otherwise be 1); `not_bool` does the same for a union such as LIBERO's `task: int | str`.
- `ImageSize`: an image size, N or [height, width], each side MIN_IMAGE_SIDE..MAX_IMAGE_SIDE pixels,
  checked when the Experiment is loaded (before anything is written), not in the runner when the
  renderer asks for the memory.
- `EnvironmentOptions`: the base of every options model (an unknown key is refused), `CameraOptions` of
  one that renders cameras at one size (`image_hw()`); `Actions`,
  `RenderQuality` and `max_steps_field` the options several types share.
- `check_name`/`check_names`: a task or camera name one of a benchmark's own, else a message that lists or
  suggests them.
- `EnvironmentOptionsError`: what options decide but only the runner can find out (an unknown id).
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, ClassVar, Iterable, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from evalfleet.errors import UserError

MIN_IMAGE_SIDE = 8
MAX_IMAGE_SIDE = 4096  # a 4096×4096 RGB frame is 48 MiB; larger is a typo, not a camera


def reject_bool(value: Any) -> Any:
    if isinstance(value, bool):
        # pydantic turns a ValueError (not a TypeError) into a validation error
        raise ValueError(f"expected an integer, not a boolean (got {value!r})")  # noqa: TRY004 - pydantic reports ValueError
    return value


def not_bool(expected: str) -> BeforeValidator:
    """A validator refusing a boolean where `expected` (said in the message) is, e.g. for `int | str`."""

    def check(value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"expected {expected}, not a boolean (got {value!r})")  # noqa: TRY004 - pydantic reports ValueError
        return value

    return BeforeValidator(check)


Int = Annotated[int, BeforeValidator(reject_bool)]


def check_image_size(value: Any) -> int | tuple[int, int]:
    sides = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    if isinstance(value, (list, tuple)) and len(sides) != 2:
        raise ValueError(f"expected pixels N or [height, width] (got {value!r})")
    for side in sides:
        if isinstance(side, bool) or not isinstance(side, int):
            raise ValueError(f"expected pixels N or [height, width], whole numbers (got {value!r})")  # noqa: TRY004 - pydantic reports ValueError
        if not MIN_IMAGE_SIDE <= side <= MAX_IMAGE_SIDE:
            raise ValueError(f"each side must be {MIN_IMAGE_SIDE}..{MAX_IMAGE_SIDE} pixels (got {value!r})")
    return sides if len(sides) == 2 else sides[0]


ImageSize = Annotated[int | tuple[int, int], BeforeValidator(check_image_size)]


def image_hw(size: int | tuple[int, int]) -> tuple[int, int]:
    """(height, width) of an `ImageSize`."""
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


class EnvironmentOptions(BaseModel):
    """The base of an environment type's options model: a key the type does not know is refused."""

    model_config = ConfigDict(extra="forbid")


class CameraOptions(EnvironmentOptions):
    """The options of a type that renders its cameras at one `ImageSize`, the field `size_field` names."""

    size_field: ClassVar[str] = "image_size"

    def image_hw(self) -> tuple[int, int]:
        return image_hw(getattr(self, self.size_field))


Actions = Literal["native", "normalized"]  # normalized: [-1, 1], scaled to the env's own bounds
RenderQuality = Literal["fast", "default"]  # default: the model's own visuals


def max_steps_field(default: int | None, *, most: int = 10_000, description: str | None = None) -> Any:
    """The `max_steps` field: a positive step limit, at most `most`."""
    return Field(default=default, gt=0, le=most, description=description)


def check_name(value: str, names: Iterable[str], what: str, otherwise: str, *, suggest: bool = True) -> str:
    """`value` if it is one of `names`; else a ValueError "unknown {what} {value!r}; " and the close
    spellings (where `suggest`) or, when none is close, `otherwise`."""
    names = list(names)
    if value not in names:
        close = difflib.get_close_matches(value, names, n=3) if suggest else []
        raise ValueError(f"unknown {what} {value!r}; "
                         + (f"did you mean {', '.join(close)}?" if close else otherwise))
    return value


def check_names(values: list[str], names: Iterable[str], what: str) -> list[str]:
    """Every one of `values` one of `names` (cameras): else "unknown {what} ...; {what}s: <names>"."""
    names = list(names)
    for value in values:
        check_name(value, names, what, f"{what.split()[-1]}s: {', '.join(names)}", suggest=False)
    return values


class EnvironmentOptionsError(UserError):
    """The Run's environment cannot be built from its options (an unknown Gymnasium id, kwargs the env does
    not take, an `import` module that is not installed): the Experiment's fault, not the machine's. An
    adapter raises it while building the env; `rollout.runner.run_shards` then runs none of that Run's
    episodes and the worker records the Run as failed (`failed_because: environment_error`), once,
    instead of a crashed runner being restarted to fail the same way."""
