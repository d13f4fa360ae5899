"""Histogram bucket bounds the core needs to know: a latency SLO's threshold must be one
of them (``guardrails.latency_slo``), since the rules count the requests at or under it
from the bucket of that bound; ``histogram_quantile`` would only interpolate."""

from __future__ import annotations

# 5 ms to 60 s: embedding and rerank calls sit at the low end, long generations
# at the top; about three buckets per decade keep histogram_quantile honest.
LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
)  # fmt: skip
