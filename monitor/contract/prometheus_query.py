"""Instant queries against a Prometheus server, for the reports that read what the
recording rules hold (``report drift --prometheus``, ``report review --prometheus``,
``report guardrails``)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any

PROMETHEUS_TIMEOUT_S = 10.0


def query_prometheus(url: str, query: str, at: float) -> list[tuple[dict[str, str], float]]:
    """An instant query: (labels, value) of each series. Raises OSError or ValueError."""
    result = _api(url, "query", {"query": query, "time": f"{at:.3f}"})
    return [(s["metric"], float(s["value"][1])) for s in result]


def query_prometheus_range(
    url: str, query: str, start: float, end: float, step: float
) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    """A range query: (labels, [(time, value)]) of each series, from ``start`` to ``end`` at
    ``step`` seconds (the caller keeps ``(end - start) / step`` under Prometheus's 11,000
    points a series). Raises OSError or ValueError."""
    window = {"start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    result = _api(url, "query_range", {"query": query, **window})
    return [(s["metric"], [(float(t), float(v)) for t, v in s["values"]]) for s in result]


def _api(url: str, endpoint: str, parameters: dict[str, str]) -> list[dict[str, Any]]:
    """The ``data.result`` of one query API call; raises OSError or ValueError."""
    address = f"{url.rstrip('/')}/api/v1/{endpoint}?" + urllib.parse.urlencode(parameters)
    if not address.startswith(("http://", "https://")):
        raise ValueError(f"--prometheus {url}: give an http(s) URL")
    with urllib.request.urlopen(address, timeout=PROMETHEUS_TIMEOUT_S) as answer:  # noqa: S310
        body = json.load(answer)
    if body.get("status") != "success":
        raise ValueError(f"Prometheus answered {body.get('error', body.get('status'))}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result
