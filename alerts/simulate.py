"""The synthetic world of ``rag-monitor rules backtest --simulate``: the counters the
sidecar would export, minute by minute, for a service with known true rates.

The world itself (diurnal traffic, incidents, the seeded generator) is the core's
(``monitor.contract.rulekit.simulation``); each registered detector adds its own series through
its component's ``simulate`` and names the incident kinds it reacts to. What is left here
is the core's own: the requests (``rag_requests_total``) and field coverage. 0.01 of the
requests lack each field the coverage ticket watches (questions nothing was retrieved
for); a ``coverage`` incident leaves every request without contexts, as an
instrumentation the mapping cannot read does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from alerts.field_coverage import COVERAGE
from alerts.scratch import write_openmetrics_series
from monitor.contract.components import load_components
from monitor.contract.config import Config, detector_section, shared_values
from monitor.contract.field_presence import DEFAULT_INSTRUMENTATIONS
from monitor.contract.names import FIELDS_TOTAL, REQUESTS_TOTAL
from monitor.contract.rulekit.simulation import Samples, SimulatedWorld, World
from monitor.contract.shared import SLICER

FIELD_MISSING = 0.01  # the share of requests without each watched field
# The instrumentation scope of the simulated requests.
SIMULATED_INSTRUMENTATION = DEFAULT_INSTRUMENTATIONS[0]


def simulate(world: World, config: Config, fields: Sequence[str] = ()) -> Samples:
    """The world's counters, one sample a minute: the requests, each detector's series as
    ``config`` configures it, and the coverage of ``fields`` (those the ticket watches)."""
    simulated = SimulatedWorld.start(world, shared_values(config)[SLICER])
    samples, requests = simulated.samples, simulated.requests
    samples.add_gauge("up", simulated.target, np.ones(simulated.steps))  # scraped throughout
    samples.add(REQUESTS_TOTAL, {**simulated.labels, "source": "otlp"}, requests)
    for component in load_components():
        own = simulated.of(component.name)
        component.simulate(detector_section(config, component), config.guardrails, own)
    coverage = simulated.of(COVERAGE)
    contexts = coverage.rate(COVERAGE, FIELD_MISSING, 1.0)
    for name in fields:
        share = contexts if name == "contexts" else FIELD_MISSING
        missing = coverage.rng.binomial(requests, share)
        field = {**simulated.target, "field": name, "instrumentation": SIMULATED_INSTRUMENTATION}
        samples.add(FIELDS_TOTAL, {**field, "present": "false"}, missing)
        samples.add(FIELDS_TOTAL, {**field, "present": "true"}, requests - missing)
    return samples


def write_openmetrics(samples: Samples, path: Path) -> None:
    """The samples as an OpenMetrics file for ``promtool tsdb create-blocks-from openmetrics``."""
    times = [str(t) for t in samples.timestamps.tolist()]
    with path.open("w") as out:
        for name, labels, values in samples.series:
            # NaN: not scraped at that time (a process that was not running)
            scraped = ~np.isnan(values)
            formatted = [f"{value:.10g}" for value in values[scraped].tolist()]
            kept = [time for time, keep in zip(times, scraped.tolist(), strict=True) if keep]
            write_openmetrics_series(out, name, labels, kept, formatted)
        out.write("# EOF\n")
