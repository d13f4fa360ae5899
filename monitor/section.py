"""The base of every configuration section, the core's and each component's.

A component's config model subclasses ``Section`` so that it refuses unknown
keys and is immutable like the rest of the configuration; the root config then
reports its errors with their full key path (``detectors.<name>.<key>``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A configuration section: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
