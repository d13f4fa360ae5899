"""Faithfulness scores written back to Phoenix as span annotations, off the hot path
(configured as ``detectors.faithfulness.phoenix``).

Scores are queued (bounded; a full queue drops and counts) and a thread sends
them in batches through the ``arize-phoenix`` client. Annotations are posted
asynchronously (``sync=False``): Phoenix holds an annotation whose span has not
arrived yet and retries it, so the order of spans and scores does not matter.
The client reads ``PHOENIX_API_KEY`` and ``PHOENIX_CLIENT_HEADERS`` from the
environment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args

import structlog
from prometheus_client import Counter

from monitor.contract.names import ANNOTATIONS_TOTAL
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.worker import Worker

log = structlog.get_logger("rag_monitor.faithfulness.phoenix")

ANNOTATION_NAME = "faithfulness_hhem"
AnnotationOutcome = Literal["written", "failed", "dropped"]
BATCH_SIZE = 100
FLUSH_INTERVAL_S = 1.0
QUEUE_SIZE = 10_000
DRAIN_S = 10.0  # at shutdown, what is queued is sent for this long, then counted dropped
STALL_S = 60.0  # the first send imports the Phoenix client, which takes seconds


def phoenix_spans_client(endpoint: str) -> Any:
    """The ``spans`` resource of a Phoenix client for ``endpoint`` (imported here: it is slow)."""
    from phoenix.client import Client

    return Client(base_url=endpoint).spans


class PhoenixAnnotator:
    """Sends ``faithfulness_hhem`` span annotations to Phoenix in batches."""

    def __init__(
        self,
        endpoint: str,
        registry: SidecarRegistry,
        *,
        threshold: float,
        metadata: dict[str, str] | None = None,
        batch_size: int = BATCH_SIZE,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        queue_size: int = QUEUE_SIZE,
        connect: Callable[[str], Any] = phoenix_spans_client,
    ) -> None:
        self._endpoint = endpoint
        self._threshold = threshold
        self._metadata = metadata or {}
        self._connect = connect
        self._spans: Any = None
        self._worker: Worker[dict[str, Any]] = Worker(
            "phoenix_annotations",
            handle=self._send_batch,
            queue_size=queue_size,
            batch_size=batch_size,
            batch_wait_s=flush_interval_s,
            tick_s=0.1,
            drain_s=DRAIN_S,
            stall_after_s=STALL_S,
            supervisor=registry.supervisor,
        )
        self._failing = False
        counter = Counter(
            ANNOTATIONS_TOTAL,
            "Faithfulness scores sent to Phoenix as span annotations: written, failed "
            "(Phoenix refused or was unreachable), dropped (the send queue was full).",
            ["outcome"],
            registry=registry,
        )
        self._outcomes = {o: counter.labels(o) for o in get_args(AnnotationOutcome)}

    def annotate(self, span_id: str, score: float) -> None:
        """Queue one annotation of the root span ``span_id``; never blocks."""
        label = "consistent" if score >= self._threshold else "hallucinated"
        annotation: dict[str, Any] = {
            "name": ANNOTATION_NAME,
            "annotator_kind": "CODE",
            "span_id": span_id,
            "result": {"score": score, "label": label},
        }
        if self._metadata:
            annotation["metadata"] = self._metadata
        if not self._worker.offer(annotation):
            self._outcomes["dropped"].inc()

    def start(self) -> None:
        self._worker.start()

    def shutdown(self) -> None:
        """Send what is queued (within ``DRAIN_S``), then stop. Safe twice."""
        self._worker.stop()

    def _send_batch(self, batch: list[dict[str, Any]]) -> None:
        if self._spans is None:
            self._spans = self._client()
        self._send(self._spans, batch)

    def _client(self) -> Any:
        try:
            return self._connect(self._endpoint)
        except Exception:
            if self._failing:
                return None
            self._failing = True
            log.exception(
                "phoenix_client_unavailable",
                endpoint=self._endpoint,
                hint="pip install arize-phoenix-client",
            )
            return None

    def _send(self, spans: Any, batch: list[dict[str, Any]]) -> None:
        try:
            if spans is None:
                raise RuntimeError("no Phoenix client")
            spans.log_span_annotations(span_annotations=batch, sync=False)
        except Exception as exc:
            self._outcomes["failed"].inc(len(batch))
            if not self._failing:  # one line per run of failures, not one per batch
                self._failing = True
                log.warning(
                    "phoenix_annotations_failed",
                    endpoint=self._endpoint,
                    error=type(exc).__name__,
                    detail=str(exc)[:200],
                )
            return
        if self._failing:
            self._failing = False
            log.info("phoenix_annotations_recovered", endpoint=self._endpoint)
        self._outcomes["written"].inc(len(batch))
