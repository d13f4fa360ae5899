"""Re-asks: the same query asked again in the same session within ``REASK_WINDOW_S``.

A user re-asking is the implicit form of pressing "regenerate", so a re-ask counts as a
regeneration wherever regenerations are counted (the feedback detector's global rate,
the slices detector's rate by intent): the rule lives here, once. Only a hash of the
variant, the session and the normalized query is kept, in a bounded map: never the text.
The variant is part of the key: a shadow twin of a request is not its re-ask.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator

from monitor.contract.trace import RagTrace
from monitor.contract.variants import variant_of

REASK_WINDOW_S = 60.0
MAX_TRACKED_QUERIES = 100_000


def normalize_query(query: str) -> str:
    """Case and whitespace do not make a different question."""
    return " ".join(query.casefold().split())


class ReaskTracker:
    """Remembers when each (variant, session, query) was last asked, ``max_tracked`` at most."""

    def __init__(self, max_tracked: int = MAX_TRACKED_QUERIES) -> None:
        self._last_asked: OrderedDict[bytes, float] = OrderedDict()
        self._max_tracked = max_tracked

    def __len__(self) -> int:
        return len(self._last_asked)

    def __iter__(self) -> Iterator[bytes]:
        """The hashed keys held, oldest first."""
        return iter(self._last_asked)

    def is_reask(self, trace: RagTrace) -> bool:
        """Records ``trace``; True when its session asked the same query within the window."""
        if not trace.session_id or not trace.query:
            return False
        key = hashlib.blake2b(
            f"{variant_of(trace)}\0{trace.session_id}\0{normalize_query(trace.query)}".encode(),
            digest_size=16,
        ).digest()
        asked_at = trace.time.timestamp()
        previous = self._last_asked.pop(key, None)
        self._last_asked[key] = asked_at
        if len(self._last_asked) > self._max_tracked:
            self._last_asked.popitem(last=False)
        return previous is not None and 0 <= asked_at - previous <= REASK_WINDOW_S
