"""structlog set-up: JSON lines on stderr, with the request text redacted.

Query, answer and context text must never reach a log line, whoever logs it:
the redaction stage drops those keys before rendering. Every line on stderr is
one JSON object, whatever writes it: stdlib loggers (kafka-python, grpc) and
warnings go through the same renderer, and an exception escaping a thread, the
main thread or a destructor is logged with its traceback in the ``exception``
field instead of Python's plain-text report.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Mapping, MutableMapping
from types import TracebackType
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
        # Before redaction, which would turn an ``exc_info`` tuple into a list.
        structlog.processors.format_exc_info,
        RedactText(),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # One write per line (print writes the newline apart): a stdlib record from
        # another thread cannot land between an event and its newline.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
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
    logging.captureWarnings(True)  # warnings.warn goes through the handler above
    install_exception_hooks()


_hook_log = structlog.get_logger("rag_monitor.uncaught")
_ExcInfo = tuple[type[BaseException], BaseException | None, TracebackType | None]


def install_exception_hooks() -> None:
    """Log what escapes a thread, the main thread or a destructor as one JSON line each."""
    threading.excepthook = _thread_exception
    sys.excepthook = _uncaught_exception
    sys.unraisablehook = _unraisable_exception


def _thread_exception(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:  # threading ignores it too
        return
    exc_info: _ExcInfo = (args.exc_type, args.exc_value, args.exc_traceback)
    thread = args.thread.name if args.thread is not None else None
    _hook_log.error("thread_exception", thread=thread, exc_info=exc_info)


def _uncaught_exception(
    exc_type: type[BaseException], exc_value: BaseException, traceback: TracebackType | None
) -> None:
    _hook_log.critical("uncaught_exception", exc_info=(exc_type, exc_value, traceback))


def _unraisable_exception(unraisable: sys.UnraisableHookArgs) -> None:
    exc_info: _ExcInfo = (unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback)
    # The object's type, not its repr: a repr can hold request text.
    _hook_log.error(
        "unraisable_exception",
        message=unraisable.err_msg or "Exception ignored",
        object_type=type(unraisable.object).__name__,
        exc_info=exc_info,
    )
