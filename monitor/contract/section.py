"""The base of every configuration section, the core's and each component's.

A component's config model subclasses ``Section`` so that it refuses unknown
keys and is immutable like the rest of the configuration; the root config then
reports its errors with their full key path (``detectors.<name>.<key>``).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


class Section(BaseModel):
    """A configuration section: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def all_compile(patterns: list[str]) -> list[str]:
    """``patterns``, once each compiles as a regular expression."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from exc
    return patterns


Patterns = Annotated[list[str], AfterValidator(all_compile)]
"""A config value of regular expressions, each checked to compile when the config loads."""
