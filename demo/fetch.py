"""Before the board: the pinned models the demo's detectors need, fetched where missing.

The README's first command ends in ``rag-monitor demo`` on a machine that has never
seen the HHEM model. Rather than run without the faithfulness guardrail, the demo
fetches what ``rag-monitor models fetch`` would, through the same code
(``monitor.runtime.models.download``), into the Hugging Face cache: the hub client's progress
bars and one line saying where the models went appear on stderr before the board takes
over the terminal. Where the hub does not answer, or ``HF_HUB_OFFLINE`` is set, one line
says so and how to fetch the models later, and the demo runs on without those detectors.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from monitor.contract.components import ModelNeed
from monitor.contract.config import Config

FETCH_HOW = (
    "run `rag-monitor models fetch` (with the demo's --config, if any) on a machine that "
    "reaches huggingface.co, then start the demo again; it runs on without this detector"
)


def fetch_missing_models(config: Config, err: TextIO | None = None) -> bool:
    """Fetch into the Hugging Face cache the models ``config``'s detectors need and this
    machine lacks, when the hub answers; say in one line per detector where they went, or
    in one line why nothing was fetched. False when the user interrupted the fetch (the
    demo then stops), True to go on, with the models or without."""
    from monitor.runtime.models import FetchError, hub_unreachable, missing_needs

    err = err or sys.stderr
    try:
        plan = missing_needs(config)
    except FetchError:
        return True  # a setting that names no fetchable model: the sidecar's start says which
    if not plan:
        return True
    wanted = "; ".join(f"{detector} needs {_repos(needs)}" for detector, needs in plan)
    why = hub_unreachable()
    if why is not None:
        print(f"model missing: {wanted}; not fetched: {why}; {FETCH_HOW}", file=err, flush=True)
        return True
    try:
        for detector, needs in plan:
            _fetch(detector, needs, err)
    except KeyboardInterrupt:
        print("model fetch interrupted: the demo stops", file=err, flush=True)
        return False
    return True


def _fetch(detector: str, needs: Sequence[ModelNeed], err: TextIO) -> None:
    """Download one detector's models into the cache and say where they went; a failure
    is one line, and the demo runs on without that detector."""
    from huggingface_hub import constants

    from monitor.runtime.models import FetchError, download

    print(f"fetching the models detectors.{detector} reads: {_repos(needs)}", file=err, flush=True)
    try:
        for need in needs:
            download(need, None)  # the hub client draws its progress bars on stderr
    except FetchError as exc:
        print(
            f"model missing: {detector} needs {_repos(needs)}; not fetched: {exc}; {FETCH_HOW}",
            file=err,
            flush=True,
        )
        return
    print(
        f"fetched {_repos(needs)} into the Hugging Face cache {constants.HF_HUB_CACHE}",
        file=err,
        flush=True,
    )


def _repos(needs: Sequence[ModelNeed]) -> str:
    return ", ".join(need.repo for need in needs)
