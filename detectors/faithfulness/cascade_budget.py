"""The cascade's spend budget, its rate limit, and the bound of a pair's cost.

The budget (``SpendBudget``) never lets the spend counted in ``rag_judge_cost_usd_total``
exceed ``usd_per_hour`` over any window of an hour, also under far more uncertain
answers than it affords:

* The window slides. A fixed hour (reset on the hour) lets a full budget's spend fall
  just before the reset and another just after: twice the budget within an hour. Spend
  is kept in ``SLOTS`` slots of the window (10 s for an hour, so memory stays bounded at
  any traffic), and a slot leaves the window only once its latest possible charge is a
  whole window old: rounding keeps spend longer, never shorter.
* A pair's cost is known only from the replies' usage, after the requests. So a pair
  is admitted only when ``spent in the window + reserved + its bound <= budget``, its
  bound held as a reservation until its requests are done, and each reply's cost is
  charged when it arrives: exactly the amount the cost counter adds (``on_cost`` of
  ``JudgeMetrics``). A charge comes after its pair's admission and while its
  reservation is still held; so in any window, the charges of pairs settled before the
  last admission behind the window were in that admission's sum, and the rest were
  covered by their reservations: the window's spend is at most the budget.
* The bound is an upper bound of the pair's own cost, from its own text: each request's
  input tokens are at most the bytes of the request (a byte-level tokenizer's token
  covers one byte or more; the JSON of the request holds more bytes than the chat
  template adds tokens); its output at most ``max_tokens``, which the cascade always
  sends (``llm_judge.max_output_tokens``, else 64 per claim of ``max_claims`` plus 64);
  the verification request's claims are the extraction's output again (at most
  ``max_tokens``, plus ``CLAIM_ENTRY_TOKENS`` of numbering per claim). Only a reply
  with usage is charged, one per request at most (retries follow errors without usage),
  so two charges per pair. Should an endpoint not honour ``max_tokens``, a batch that
  costs more than its bounds raises every later bound by that ratio (the worst seen).
  A bound is held only while its pair is in flight, so it costs little of the budget:
  what stays in the window is the actual spend.

The budget is per process: N sidecar replicas (inline) or N scorers
(``judge_location: kafka``) spend up to N times ``usd_per_hour``: set the total / N.
A request that times out may still be billed by the provider: like the cost counter,
the budget counts only replies it read.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from detectors.faithfulness.config import LlmJudgeConfig
from detectors.faithfulness.judge_contract import JudgePair
from detectors.faithfulness.llm_prompts import (
    CLAIMS_SCHEMA,
    VERDICTS_SCHEMA,
    extraction_messages,
    verification_messages,
)
from detectors.faithfulness.openai_chat import request_body
from detectors.faithfulness.prices import Prices, Usage

WINDOW_S = 3600.0  # usd_per_hour: the budget's window is an hour
SLOTS = 360  # slots of the window the spend is kept in (10 s each for an hour)
# Output tokens a reply may use when llm_judge.max_output_tokens is unset: a claim is a
# short sentence (about 25 tokens with its JSON) and a verdict about 12; twice that leaves
# room, and a reply cut there is malformed, never a wrong score.
OUTPUT_TOKENS_PER_CLAIM = 64
OUTPUT_TOKENS_BASE = 64
# Tokens a claim's JSON entry adds in the verification request over its text in the
# extraction's reply ({"claim": n, "text": ...}).
CLAIM_ENTRY_TOKENS = 16


class SpendBudget:
    """USD over a sliding window: reserve before a pair is sent, charge each reply's cost,
    release the reservation after. Thread-safe: charges come from the LLM judge's pool."""

    def __init__(
        self,
        usd: float,
        window_s: float = WINDOW_S,
        *,
        slots: int = SLOTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if usd < 0 or window_s <= 0 or slots <= 0:
            raise ValueError("a budget needs usd >= 0, window_s > 0 and slots > 0")
        self.limit = usd
        self.window_s = window_s
        self._slot_s = window_s / slots
        self._clock = clock
        self._lock = threading.Lock()
        # [slot index, USD charged in it], oldest first: SLOTS + 1 at most, summed afresh
        # for each admission (a running total would drift with rounding).
        self._slots: deque[list[float]] = deque()
        self._reservations: dict[int, float] = {}  # id -> USD held, until released
        self._next_id = 0
        self.charged = 0.0  # every charge since the start (a batch's actual cost)

    def spent(self) -> float:
        """USD charged within the window (slots not yet a whole window old)."""
        with self._lock:
            return self._in_window(self._clock())

    def reserved(self) -> float:
        with self._lock:
            return sum(self._reservations.values())

    def reserve(self, usd: float) -> int | None:
        """Hold ``usd`` when the window's spend, what is held, and ``usd`` fit the budget:
        a reservation id to ``release``; None (nothing held) when they do not."""
        with self._lock:
            held = sum(self._reservations.values())
            if self._in_window(self._clock()) + held + usd > self.limit:
                return None
            self._next_id += 1
            self._reservations[self._next_id] = usd
            return self._next_id

    def release(self, reservation: int) -> None:
        """The pair's requests are done: its charges are in the window, its bound goes."""
        with self._lock:
            self._reservations.pop(reservation, None)

    def charge(self, usd: float) -> None:
        """One reply's cost, as the cost counter adds it, at the time it arrives."""
        with self._lock:
            slot = float(int(self._clock() // self._slot_s))
            if self._slots and self._slots[-1][0] == slot:
                self._slots[-1][1] += usd
            else:
                self._slots.append([slot, usd])
            self.charged += usd

    def _in_window(self, now: float) -> float:
        # A slot leaves when its end (the latest charge it can hold) is a window old.
        while self._slots and (self._slots[0][0] + 1) * self._slot_s <= now - self.window_s:
            self._slots.popleft()
        return sum(usd for _, usd in self._slots)


class RateLimit:
    """A token bucket: ``per_second`` on average, bursts of one second's worth (one at
    least)."""

    def __init__(self, per_second: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = per_second
        self._capacity = max(1.0, per_second)
        self._tokens = self._capacity
        self._clock = clock
        self._at = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


def reply_token_bound(llm: LlmJudgeConfig) -> int:
    """Output tokens a reply of the cascade's LLM judge may use (sent as max_tokens)."""
    if llm.max_output_tokens is not None:
        return llm.max_output_tokens
    return OUTPUT_TOKENS_PER_CLAIM * llm.max_claims + OUTPUT_TOKENS_BASE


class PairCostBound:
    """An upper bound of what the LLM judge's two requests for a pair can cost, from the
    requests' own bytes and the output bound (see the module's docstring)."""

    def __init__(self, model: str, max_claims: int, max_tokens: int, prices: Prices) -> None:
        self._model = model
        self._max_claims = max_claims
        self._max_tokens = max_tokens
        self._prices = prices

    def __call__(self, pair: JudgePair) -> float:
        extraction = request_body(
            self._model,
            extraction_messages(pair, self._max_claims),
            "claims",
            CLAIMS_SCHEMA,
            self._max_tokens,
        )
        # The verification request without its claims, then the claims: the extraction's
        # output again, plus each claim's numbering.
        verification = request_body(
            self._model,
            verification_messages(pair, ()),
            "verdicts",
            VERDICTS_SCHEMA,
            self._max_tokens,
        )
        claims = self._max_tokens + CLAIM_ENTRY_TOKENS * self._max_claims
        return self._prices.cost(Usage(len(extraction), self._max_tokens)) + self._prices.cost(
            Usage(len(verification) + claims, self._max_tokens)
        )
