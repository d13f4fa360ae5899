"""The one duration grammar: Prometheus durations such as ``30s``, ``5m``, ``1h30m``, ``7d``.

Alert ``for`` values and rate windows go into the generated rules verbatim, so
every duration the sidecar accepts (config keys, ``--since``) is one Prometheus
would accept too: digits and a unit, units from the largest to the smallest,
each at most once (``y`` = 365 d, ``w`` = 7 d), or a bare ``0``.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_UNIT_SECONDS = {
    "y": 31_536_000,
    "w": 604_800,
    "d": 86_400,
    "h": 3600,
    "m": 60,
    "s": 1,
    "ms": 0.001,
}
_DURATION = re.compile("0|" + "".join(f"(?:([0-9]+){unit})?" for unit in _UNIT_SECONDS))


def parse_duration(text: str) -> float:
    """Seconds in the Prometheus duration ``text``; ``ValueError`` naming it when it is none."""
    match = _DURATION.fullmatch(text)
    if match is None or not text:
        raise ValueError(
            f"{text!r} is not a duration: digits and a unit (ms, s, m, h, d, w, y), "
            "largest unit first, like 30s, 5m, 1h30m or 7d"
        )
    counts = zip(match.groups(), _UNIT_SECONDS.values(), strict=True)
    return float(sum(int(count) * seconds for count, seconds in counts if count))


def _checked(text: str) -> str:
    parse_duration(text)
    return text


Duration = Annotated[str, AfterValidator(_checked)]
"""A config value kept as written (it goes into PromQL) but checked against the grammar."""
