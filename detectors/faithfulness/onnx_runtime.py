"""The ONNX precisions: HHEM's encoder and classifier exported at start-up and run by
ONNX Runtime on the CPU, in fp32 (``onnx``) or with dynamic int8 weights (``onnx_int8``).

The export goes to memory, with the batch and sequence axes dynamic so one session
takes every micro-batch. ONNX Runtime fuses the attention and layer-norm steps and runs
its own thread pool, sized like torch's (``set_threads``). In fp32 the numbers match
torch's fp32 to rounding; what changes is the speed, which ``precision: auto`` measures.
``onnx_int8`` passes the exported graph through ONNX Runtime's dynamic quantization
(``quantize_dynamic``: int8 weights, activations quantized per call), which writes its
result to a file: a private temporary directory, removed once the bytes are read. Its
scores move further from fp32's, and ``auto`` keeps it only within
``precision_tolerance``. Imported only when an ONNX precision is tried (torch, onnx and
onnxruntime load here).
"""

from __future__ import annotations

import io
import logging
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

OPSET = 17
_INPUTS = ("input_ids", "attention_mask")


class FirstPositionLogits(torch.nn.Module):
    """A T5ForTokenClassification cut to what HHEM reads: the logits at position 0."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        model: Any = self.model
        states = model.transformer(input_ids=input_ids, attention_mask=attention_mask)
        logits: torch.Tensor = model.classifier(states.last_hidden_state[:, 0, :])
        return logits


def onnx_session(model: torch.nn.Module, *, int8: bool = False) -> Any:
    """An ONNX Runtime CPU session computing ``FirstPositionLogits(model)``, with dynamic
    int8 weights when ``int8``."""
    import onnxruntime

    example = torch.ones((1, 16), dtype=torch.long)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        # The TorchScript exporter (dynamo=False) warns that it is deprecated; the dynamo
        # one needs onnxscript, which is not a dependency. Tracing warns about Python
        # conditions on shapes, which hold for every input here.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            FirstPositionLogits(model),
            (example, example),
            buffer,  # type: ignore[arg-type]  # the TorchScript exporter writes to files too
            input_names=list(_INPUTS),
            output_names=["logits"],
            dynamic_axes={name: {0: "batch", 1: "sequence"} for name in _INPUTS},
            opset_version=OPSET,
            dynamo=False,
        )
    exported = quantized_int8(buffer.getvalue()) if int8 else buffer.getvalue()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(exported, options, providers=["CPUExecutionProvider"])


def quantized_int8(exported: bytes) -> bytes:
    """The exported model with its MatMul and Gather weights dynamically quantized to signed
    int8, per output channel (closer to fp32 than one scale per tensor: 0.29 against 0.37
    largest change on the tiny test model's calibration set)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quiet = _DropMessage("Please consider")  # its advice to pre-process, logged on the root
    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        with tempfile.TemporaryDirectory(prefix="rag-monitor-onnx-") as directory:
            target = Path(directory) / "hhem-int8.onnx"
            quantize_dynamic(
                onnx.load_from_string(exported),
                target,
                per_channel=True,
                weight_type=QuantType.QInt8,
            )
            return target.read_bytes()
    finally:
        root.removeFilter(quiet)


class _DropMessage(logging.Filter):
    """Drops root-logger records whose message starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self._prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self._prefix)


def session_logits(session: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The session's first-position logits for one padded micro-batch."""
    feed = {"input_ids": ids.cpu().numpy(), "attention_mask": mask.cpu().numpy()}
    [logits] = session.run(["logits"], feed)
    return torch.from_numpy(logits)
