"""structlog set-up: JSON lines on stderr, with the request text redacted.

Query, answer and context text must never reach a log line, whoever logs it:
the redaction stage drops those keys before rendering.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

import structlog

REDACTED = "[redacted]"
_MAX_DEPTH = 8
REDACTED_KEYS = frozenset(
    {"query", "answer", "text", "context", "contexts", "prompt", "completion", "input", "output"}
)


class RedactText:
    """Processor replacing the values of text-bearing keys with ``"[redacted]"``, at any depth:
    a ``{"request": {"query": ...}}`` or a list of such mappings is redacted too."""

    def __init__(self, keys: frozenset[str] = REDACTED_KEYS) -> None:
        self._keys = keys

    def __call__(
        self, logger: Any, method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key, value in event_dict.items():
            event_dict[key] = REDACTED if key in self._keys else self._redacted(value, 0)
        return event_dict

    def _redacted(self, value: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            return REDACTED  # deeper than any log call nests on purpose
        if isinstance(value, Mapping):
            return {
                key: REDACTED if key in self._keys else self._redacted(item, depth + 1)
                for key, item in value.items()
            }
        if isinstance(value, list | tuple | set | frozenset):
            return [self._redacted(item, depth + 1) for item in value]
        return value


def configure_logging(level: str = "info") -> None:
    """Send structlog (and stdlib logging, e.g. kafka-python's) as JSON to stderr."""
    numeric = logging.getLevelNamesMapping()[level.upper()]
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        RedactText(),
        structlog.processors.format_exc_info,
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=structlog.processors.JSONRenderer(), foreign_pre_chain=shared
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    # Third-party libraries (kafka-python, grpc) log through stdlib; keep them at warning.
    root.setLevel(max(numeric, logging.WARNING))
