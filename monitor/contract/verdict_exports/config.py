"""The settings of the verdict exports. They sit in the sections of the detectors whose
verdicts they send: ``detectors.evaluations.emit`` (OTLP log records) and
``detectors.faithfulness.phoenix`` (Phoenix span annotations)."""

from __future__ import annotations

from pydantic import Field

from monitor.contract.section import Section


class EmitConfig(Section):
    """Where this sidecar's own verdicts go as gen_ai.evaluation.result log records."""

    endpoint: str = Field(
        description="OTLP/HTTP logs URL, e.g. http://otel-collector:4318/v1/logs (never this "
        "sidecar's own /v1/logs: its results would count here again)."
    )
    timeout_s: float = Field(10.0, gt=0, description="Seconds an export may take.")
    evaluation_name: str = Field(
        "faithfulness",
        min_length=1,
        description="gen_ai.evaluation.name of the faithfulness records (scores and "
        "unscored outcomes).",
    )


class PhoenixConfig(Section):
    """``detectors.faithfulness.phoenix`` (formerly ``collectors.phoenix``)."""

    enabled: bool = Field(False, description="connect to Phoenix (for the annotations below)")
    endpoint: str = Field("http://127.0.0.1:6006", description="Phoenix base URL")
    annotate: bool = Field(True, description="write faithfulness scores back as annotations")
