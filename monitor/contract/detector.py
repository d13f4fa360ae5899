"""The detector contract of the core: what the pipeline calls on every detector."""

from __future__ import annotations

from typing import ClassVar, Protocol

from monitor.contract.trace import Event, RagTrace


class Detector(Protocol):
    """A processor of ``RagTrace`` values, owning its metrics on an injected registry."""

    name: ClassVar[str]  # the config key, lower_snake_case

    def observe(self, trace: RagTrace) -> None:
        """Look at one trace; cheap, inline, never raises on bad data."""

    def observe_event(self, event: Event) -> None:
        """Look at a label or feedback event."""

    def start(self) -> None:
        """Start background workers, if any."""

    def shutdown(self) -> None:
        """Stop workers and flush; safe before start and twice."""


class InlineDetector:
    """Base of detectors that work only inline: no worker to start or stop, events ignored.

    Subclasses override what they use; the rest of the ``Detector`` protocol is here.
    """

    def observe_event(self, event: Event) -> None:
        """Ignore label and feedback events."""

    def start(self) -> None:
        """Nothing to start."""

    def shutdown(self) -> None:
        """Nothing to stop."""
