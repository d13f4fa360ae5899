"""The detectors.slices section: which intents and document types become labels."""

from __future__ import annotations

from pydantic import Field

from monitor.contract.section import Section
from monitor.contract.slicing import Slicer
from monitor.contract.variants import AllowList

MAX_SLICE_VALUES = 64  # per list: the coverage matrix has (intents + 2) x (types + 2) cells


class SlicesConfig(Section):
    intents: AllowList = Field(
        default_factory=list,
        max_length=MAX_SLICE_VALUES,
        description="rag.intent values exported as the intent label; any other intent is "
        "other, a trace without one none; empty: the slices detector is off",
    )
    document_type_key: str = Field(
        "file_type",
        min_length=1,
        description="context metadata key holding the document type (LlamaIndex readers "
        "set file_type, a MIME type; LangChain's Unstructured loaders set filetype)",
    )
    document_types: AllowList = Field(
        default_factory=lambda: ["application/pdf", "text/html", "text/markdown", "text/plain"],
        max_length=MAX_SLICE_VALUES,
        description="document types exported as the document_type label; any other is other, "
        "a context without one none",
    )
    max_tracked_traces: int = Field(
        100_000,
        gt=0,
        description="recent traces whose intent is kept for their regenerate feedback (and "
        "re-ask keys held); beyond it the oldest goes (rag_slice_evicted_traces_total)",
    )
    feedback_ttl_s: float = Field(
        3600.0, gt=0, description="a regenerate event this long after its trace is not sliced"
    )

    def slicer(self) -> Slicer:
        """The slices of these allow-lists (off while no intent is listed)."""
        return Slicer(
            frozenset(self.intents), frozenset(self.document_types), self.document_type_key
        )
