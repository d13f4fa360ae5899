"""The detectors.release section."""

from __future__ import annotations

from pydantic import Field

from monitor.contract.section import Section


class ReleaseConfig(Section):
    max_versions_per_service: int = Field(
        5, ge=1, le=100, description="versions kept per service; the least recently seen goes"
    )
    max_services: int = Field(
        20, ge=1, le=1000, description="services tracked; traces of further ones are counted"
    )
