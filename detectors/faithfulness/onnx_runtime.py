"""The ``onnx`` precision: HHEM's encoder and classifier exported at start-up and run by
ONNX Runtime in fp32 on the CPU.

The export goes to memory, never to disk, with the batch and sequence axes
dynamic so one session takes every micro-batch. ONNX Runtime fuses the
attention and layer-norm steps and runs its own thread pool, sized like torch's
(``set_threads``). The numbers stay fp32, so scores match torch's fp32 to
rounding; what changes is the speed, which ``precision: auto`` measures.
Imported only when that precision is tried (torch, onnx and onnxruntime load here).
"""

from __future__ import annotations

import io
import warnings
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


def onnx_session(model: torch.nn.Module) -> Any:
    """An ONNX Runtime CPU session computing ``FirstPositionLogits(model)``."""
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
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(
        buffer.getvalue(), options, providers=["CPUExecutionProvider"]
    )


def session_logits(session: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The session's first-position logits for one padded micro-batch."""
    feed = {"input_ids": ids.cpu().numpy(), "attention_mask": mask.cpu().numpy()}
    [logits] = session.run(["logits"], feed)
    return torch.from_numpy(logits)
