"""The span assembly's registration (entry point ``spans`` in ``rag_monitor.collectors``):
its config section ``collectors.spans`` and how spans from every collector become RAG
traces. The assembly module is imported only when the component builds."""

from __future__ import annotations

from collectors.spans.config import SpansConfig
from monitor.contract.components import CollectorComponent
from monitor.contract.work_items import TraceAssembly


def _span_assembly(config: SpansConfig) -> TraceAssembly:
    from collectors.spans.assembly import SpanAssembly

    return SpanAssembly(config.assembly, config.mapping)


SPANS = CollectorComponent(
    name="spans",
    config_model=SpansConfig,
    description="how spans from every collector become RAG traces",
    assembly=_span_assembly,
    order=0,
)
