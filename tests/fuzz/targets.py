"""Every project entry point the fuzz harnesses call, imported in this one module.

The harnesses (``tests/fuzz/harnesses.py``) name these only through this module, so a
module that moves changes one import line here. Each entry point is the function the
transport calls with the bytes it received; the refusal types are the exceptions its
caller catches and turns into a 4xx, a dead letter or a count.
"""

from __future__ import annotations

# Modules are imported whole for the line coverage tests/fuzz/run.py reports.
from collectors.inspect import command as inspect_command
from collectors.inspect import missing as inspect_missing
from collectors.inspect import provenance as inspect_provenance
from collectors.inspect import view as inspect_view
from collectors.inspect.command import group_traces, read_otlp_file
from collectors.inspect.provenance import inspect_trace
from collectors.inspect.view import render, summary
from collectors.kafka import records
from collectors.kafka.records import decode_logs_record, decode_trace_record
from collectors.otlp import decode as otlp
from collectors.otlp import export_decoding
from collectors.otlp import http as otlp_http
from collectors.otlp import logs as otlp_logs
from collectors.otlp.decode import PayloadError, decode_otlp_json, decode_otlp_proto
from collectors.otlp.http import OtlpHttpReceiver
from collectors.otlp.logs import decode_logs_json, decode_logs_proto
from collectors.spans import assembly, openinference, tools
from collectors.spans import evaluations as span_evaluations
from collectors.spans.assembly import SpanAssembly
from detectors.review import page as review_form
from detectors.review import web as review_web
from detectors.review.config import ReviewHttpSettings
from detectors.review.model import ReviewContext, ReviewItem
from detectors.review.store import ReviewStore
from detectors.review.web import SESSION_COOKIE, ReviewPage
from monitor.contract import events, trace
from monitor.contract.events import InvalidRecord, parse_feedback, parse_labels
from monitor.contract.http import wire
from monitor.contract.http.service import HttpService
from monitor.contract.http.wire import HEAD_END, Response, parse_head
from monitor.contract.pipeline_metrics import PipelineMetrics
from monitor.runtime import config_loading
from monitor.runtime.config_loading import ConfigError, load_config
from monitor.runtime.pipeline import Pipeline

__all__ = [
    "HEAD_END",
    "SESSION_COOKIE",
    "ConfigError",
    "HttpService",
    "InvalidRecord",
    "OtlpHttpReceiver",
    "PayloadError",
    "Pipeline",
    "PipelineMetrics",
    "Response",
    "ReviewContext",
    "ReviewHttpSettings",
    "ReviewItem",
    "ReviewPage",
    "ReviewStore",
    "SpanAssembly",
    "assembly",
    "config_loading",
    "decode_logs_json",
    "decode_logs_proto",
    "decode_logs_record",
    "decode_otlp_json",
    "decode_otlp_proto",
    "decode_trace_record",
    "events",
    "export_decoding",
    "group_traces",
    "inspect_command",
    "inspect_missing",
    "inspect_provenance",
    "inspect_trace",
    "inspect_view",
    "load_config",
    "openinference",
    "otlp",
    "otlp_http",
    "otlp_logs",
    "parse_feedback",
    "parse_head",
    "parse_labels",
    "read_otlp_file",
    "records",
    "render",
    "review_form",
    "review_web",
    "span_evaluations",
    "summary",
    "tools",
    "trace",
    "wire",
]
