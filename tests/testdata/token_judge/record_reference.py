"""Record what lettucedetect's TransformerDetector makes of the cases below, on the
checkpoint ``tests/token_checkpoint.py`` builds, into ``lettucedetect_reference.json``
(read by tests/unit/detectors/faithfulness/test_token_judge.py).

lettucedetect cannot be installed beside rag-monitor (it needs numpy >= 2.2.2; the core
pins numpy < 2), so it runs from a scratch environment that sees this project's torch and
transformers and has its own numpy 2:

    REF=$(mktemp -d)/ldref
    python3.11 -m venv "$REF"
    echo "$PWD/.venv/lib/python3.11/site-packages" \
        > "$REF/lib/python3.11/site-packages/zz_rag_monitor.pth"
    "$REF/bin/pip" install torch==2.13.0 lettucedetect==0.2.3   # torch: already there
    PYTHONPATH=. "$REF/bin/python" tests/testdata/token_judge/record_reference.py

Recorded per case: each chunk's input ids and answer start (lettucedetect's own grouping,
prompt and ``prepare_tokenized_input``), the answer tokens' offsets as its span builder
computes them, its per-token hallucination probabilities (``output_format="tokens"``,
maxed over chunks; its trailing [SEP] left out) and its spans (``output_format="spans"``).
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy
import tokenizers
import torch
import transformers
from lettucedetect import __version__ as lettucedetect_version
from lettucedetect.datasets.hallucination_dataset import HallucinationDataset
from lettucedetect.detectors.prompt_utils import PromptUtils
from lettucedetect.detectors.transformer import TransformerDetector

from tests.token_checkpoint import build_checkpoint

OUT = Path(__file__).with_name("lettucedetect_reference.json")
SEED = 0

RETURNS = "Customers can return items within 14 days of purchase with the original receipt."
SHIPPING = "Shipping is free above 50 euros; below that it costs 5 euros."
HOURS = "The store opens at 9 on weekdays and closes at 6; on the weekend it opens at 10."
SUPPORT = "Support answers email within two days and phone calls on weekdays."
PARIS = "Paris is the capital of France, and the river Seine flows through the city."

CASES: list[dict[str, Any]] = [
    {
        "name": "one_chunk_qa",
        "contexts": [RETURNS, SHIPPING],
        "question": "How long do customers have to return items?",
        "answer": "Customers have 30 days to return items, and shipping is free above 50 euros.",
        "max_length": 512,
    },
    {
        "name": "summary_without_question",
        "contexts": [PARIS, HOURS],
        "question": None,
        "answer": "Paris is the capital of Germany. The store opens at 9 on weekdays.",
        "max_length": 512,
    },
    {
        "name": "unicode_answer",
        "contexts": [PARIS],
        "question": "Which river flows through Paris?",
        "answer": "The Seine \u2014 a river \u00e9l\u00e9gant \u2019n calm \U0001f30a flows through Paris.",
        "max_length": 512,
    },
    {
        "name": "chunked_qa",
        "contexts": [RETURNS, SHIPPING, HOURS, SUPPORT, PARIS],
        "question": "When does the store open?",
        "answer": "The store opens at 9 on weekdays and at 10 on the weekend; returns take 30 days.",
        "max_length": 230,
    },
    {
        "name": "chunked_summary",
        "contexts": [HOURS, SUPPORT, RETURNS, SHIPPING],
        "question": None,
        "answer": "Support answers phone calls on the weekend and email within two days.",
        "max_length": 128,
    },
]


def record(case: dict[str, Any], directory: Path) -> dict[str, Any]:
    detector = TransformerDetector(str(directory), max_length=case["max_length"], device="cpu")
    contexts, question, answer = case["contexts"], case["question"], case["answer"]
    groups = detector._group_passages_into_chunks(contexts, question, answer)
    chunks = []
    offsets_of_first: list[list[int]] = []
    for group in groups:
        prompt = PromptUtils.format_context(group, question, "en")
        encoding, _, offsets, answer_start = HallucinationDataset.prepare_tokenized_input(
            detector.tokenizer, prompt, answer, case["max_length"]
        )
        # Only cases lettucedetect does not truncate: where it would, the judge under test
        # splits the passage instead (a deliberate difference, tested on its own).
        whole = detector.tokenizer(prompt, answer)["input_ids"]
        assert len(whole) <= case["max_length"], f"{case['name']}: lettucedetect truncates"
        chunks.append(
            {"input_ids": encoding["input_ids"][0].tolist(), "answer_start": int(answer_start)}
        )
        if not offsets_of_first:
            base = offsets[answer_start][0].item()
            offsets_of_first = [
                [s - base, e - base] for s, e in offsets[answer_start:].tolist() if s != e
            ]
    tokens = detector.predict(contexts, answer, question, output_format="tokens")
    assert len(tokens) == len(offsets_of_first) + 1, "an answer token of zero width"
    spans = detector.predict(contexts, answer, question, output_format="spans")
    return {
        **case,
        "chunks": chunks,
        "answer_offsets": offsets_of_first,
        "token_probabilities": [t["prob"] for t in tokens[:-1]],
        "spans": [[s["start"], s["end"]] for s in spans],
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        directory = build_checkpoint(Path(scratch) / "checkpoint", seed=SEED)
        cases = [record(case, directory) for case in CASES]
    document = {
        "about": "lettucedetect TransformerDetector outputs on tests/token_checkpoint.py's "
        f"checkpoint (seed {SEED}); written by {Path(__file__).name}",
        "versions": {
            "lettucedetect": lettucedetect_version,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "numpy": numpy.__version__,
            "python": platform.python_version(),
        },
        "seed": SEED,
        "cases": cases,
    }
    OUT.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for case in cases:
        print(case["name"], len(case["chunks"]), "chunks", case["spans"], file=sys.stderr)


if __name__ == "__main__":
    main()
