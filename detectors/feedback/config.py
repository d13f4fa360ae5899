"""The feedback detector has no settings: it gets no key under ``detectors:``."""

from __future__ import annotations

from monitor.contract.section import Section


class FeedbackConfig(Section):
    """No settings; a component whose model has no fields gets no config key."""
