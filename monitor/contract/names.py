"""Metric and recording-rule names of the core: the one spelling the sidecar's own metrics,
the rule kit, the rules and panels of ``alerts/`` and the demo share. Counters are spelled
with ``_total``, as PromQL reads them (prometheus_client drops the suffix when it registers
one and writes it back on every sample)."""

from __future__ import annotations

# --- the pipeline (monitor/contract/pipeline_metrics.py) ------------------------------------------

# RAG requests by source and variant: the denominator of every per-request ratio.
REQUESTS_TOTAL = "rag_requests_total"
RECORDS_TOTAL = "rag_monitor_records_total"  # by collector and outcome
ASSEMBLED_TRACES_TOTAL = "rag_monitor_assembled_traces_total"  # by outcome
PENDING_TRACES = "rag_monitor_pending_traces"  # gauge
LATE_SPANS_TOTAL = "rag_monitor_late_spans_total"
REFUSED_SPANS_TOTAL = "rag_monitor_refused_spans_total"  # by collector and reason
REJECTED_SPANS_TOTAL = "rag_monitor_rejected_spans_total"  # by collector
EVENTS_TOTAL = "rag_monitor_events_total"  # by type
DETECTOR_ERRORS_TOTAL = "rag_monitor_detector_errors_total"  # by detector
VARIANT_FOLDED_TOTAL = "rag_variant_folded_total"  # monitor/contract/variants.py

# 1 for the faithfulness judge a process runs, label judge (its identity): the judges'
# rules, the slices' and the reports keep to the judges that run now
JUDGE_INFO = "rag_faithfulness_judge_info"

# --- human review against the judges (detectors/review counts, the judges' rules read) -----

# labels stratum (random, other), hhem (the judge's verdict: supported, unsupported), human
JUDGE_AGREEMENT_TOTAL = "rag_review_judge_agreement_total"
# labels stratum, evaluation (a name compared with review, or other), outcome (pass, fail),
# human
EVALUATION_AGREEMENT_TOTAL = "rag_review_evaluation_agreement_total"

# --- guardrails by slice (monitor/contract/slicing.py): each guardrail's detector counts,
# the slices detector's rules read; labels dimension (intent, document_type) and slice,
# production only

# scored answers and those below the threshold, also by judge
SLICE_FAITHFULNESS_SCORED_TOTAL = "rag_slice_faithfulness_scored_total"
SLICE_FAITHFULNESS_BELOW_TOTAL = "rag_slice_faithfulness_below_threshold_total"
# labeled queries with eligible gold, and those whose relevance filter removed all of it
SLICE_EXCLUSION_QUERIES_TOTAL = "rag_slice_exclusion_eligible_queries_total"
SLICE_FALSE_EXCLUSIONS_TOTAL = "rag_slice_false_exclusions_total"
# requests with a latency-SLO stage, and those slower than its threshold_s, also by stage
SLICE_LATENCY_REQUESTS_TOTAL = "rag_slice_latency_requests_total"
SLICE_LATENCY_SLOW_TOTAL = "rag_slice_latency_slow_requests_total"
# the review's judge agreement (JUDGE_AGREEMENT_TOTAL's labels) by the item's slices
SLICE_JUDGE_AGREEMENT_TOTAL = "rag_slice_review_judge_agreement_total"
# priced requests and their cost
SLICE_COST_REQUESTS_TOTAL = "rag_slice_cost_requests_total"
SLICE_COST_USD_TOTAL = "rag_slice_cost_usd_total"


def slice_recording(guardrail: str, part: str, window: str) -> str:
    """A slice recording of ``window``: ``guardrail`` is faithfulness_pass, false_exclusion,
    latency_slow or cost_per_query (the share or mean: part ratio_rate, upper_bound or
    lower_bound), or exclusion_queries, faithfulness_scored, latency_requests or
    cost_requests (the evidence: part increase)."""
    return f"rag:slice_{guardrail}:{part}{window}"


# --- verdicts that leave the process (monitor/contract/verdict_exports/) --------------------------

# Faithfulness scores sent to Phoenix as span annotations, by outcome (written, failed,
# dropped).
ANNOTATIONS_TOTAL = "rag_faithfulness_annotations_total"

# --- what the monitor can see (monitor/contract/field_presence.py, missing.py) ------------

FIELDS_TOTAL = "rag_trace_fields_total"  # by field, present and instrumentation
DERIVED_DOCUMENT_IDS_TOTAL = "rag_trace_derived_document_ids_total"  # by instrumentation
# by scope: the names behind instrumentation="other"
OTHER_INSTRUMENTATIONS_TOTAL = "rag_trace_other_instrumentations_total"
# by instrumentation: retrieval steps a request made (an agent may retrieve several times)
RETRIEVAL_CALLS = "rag_trace_retrieval_calls"
TOOL_CALLS_TOTAL = "rag_trace_tool_calls_total"  # by tool and whether it retrieved
MISSING_INPUTS_TOTAL = "rag_monitor_detector_missing_inputs_total"  # by detector and field


def missing_ratio(window: str) -> str:
    """The recorded share of production requests without a field, per field and
    instrumentation."""
    return f"rag:trace_field_missing:ratio_rate{window}"


def requests_count(window: str) -> str:
    """The recorded requests the missing share rests on, per field and instrumentation."""
    return f"rag:trace_fields:increase{window}"


def missing_lower_bound(window: str) -> str:
    """The recorded one-sided Wilson lower bound of ``missing_ratio(window)``."""
    return f"rag:trace_field_missing:lower_bound{window}"


# --- detectors, samplers, queues and workers (monitor/contract/metrics.py, sampler.py, ...)

DETECTOR_UP = "rag_monitor_detector_up"  # gauge, by detector
SAMPLES_TOTAL = "rag_monitor_samples_total"  # by detector and outcome
EFFECTIVE_SAMPLE_RATE = "rag_monitor_effective_sample_rate"  # gauge, by detector
QUEUE_DEPTH = "rag_monitor_queue_depth"  # gauge, by queue
WORKER_UP = "rag_monitor_worker_up"  # gauge, by worker
WORKER_DROPPED_TOTAL = "rag_monitor_worker_dropped_total"  # by worker
# gauge, by component (monitor/contract/http/endpoints.py)
COMPONENT_UP = "rag_monitor_component_up"

# --- HTTP serving (monitor/contract/http/) -------------------------------------------------------

HTTP_REFUSED_TOTAL = "rag_monitor_http_refused_total"  # by server and reason
HTTP_CONNECTIONS = "rag_monitor_http_connections"  # gauge, by server
INFLIGHT_BYTES = "rag_monitor_inflight_bytes"  # gauge, by budget
INFLIGHT_MAX_BYTES = "rag_monitor_inflight_max_bytes"  # gauge, by budget

# --- the state directory (monitor/contract/state.py) ---------------------------------------------

STATE_BYTES = "rag_monitor_state_bytes"  # gauge, by file
STATE_MAX_BYTES = "rag_monitor_state_max_bytes"  # gauge
STATE_WRITE_ERRORS_TOTAL = "rag_monitor_state_write_errors_total"  # by file and reason

# --- read by the core, declared by a detector --------------------------------------------

# The release detector's gauge (detectors/release), spelled here because every guardrail
# alert's triage annotation reads it (monitor.contract.rulekit.promql.triage): when a replica first
# saw a service.version.
RELEASE_FIRST_SEEN = "rag_release_first_seen_timestamp_seconds"

# --- read by another detector, declared by the filter-exclusion detector ----------------

# The drift detector's weekly report (detectors/drift/migration.py) reads them from
# Prometheus around each encoder change; a detector imports no other detector, so they are
# spelled here and detectors/filter_exclusion/names.py takes them from here.
ELIGIBLE_QUERIES_TOTAL = "rag_filter_eligible_queries_total"  # label variant
FALSE_EXCLUSIONS_TOTAL = "rag_filter_false_exclusions_total"  # label variant
RETRIEVAL_RECALL = "rag_retrieval_recall"  # histogram, label k

# --- read by the guardrail report, declared by a detector -------------------------------

# The guardrail report and the dashboard's guardrail row (alerts/guardrail_*.py) read them;
# a detector's names.py takes them from here.
P_VALUE = "rag_drift_p_value"  # gauges, label signal; absent until the first test
MMD_STATISTIC = "rag_drift_mmd_statistic"
REPRESENTATION_INFO = "rag_drift_representation_info"  # 1 per current representation
REQUEST_COST_USD = "rag_request_cost_usd"  # histogram of the cost of each request, by variant
COVERAGE_REQUESTS_TOTAL = "rag_coverage_requests_total"  # labels intent, document_type
SAMPLED_TOTAL = "rag_review_sampled_total"  # label stratum
QUEUE_ITEMS = "rag_review_queue_items"
VERDICTS_TOTAL = "rag_review_verdicts_total"

# --- read by the core, declared by a collector ------------------------------------------

# The Kafka collector's gauge (collectors/kafka/collector.py), by topic and partition, spelled here
# because the health row of the dashboard (alerts/health.py) reads it.
KAFKA_LAG_RECORDS = "rag_monitor_kafka_lag_records"
