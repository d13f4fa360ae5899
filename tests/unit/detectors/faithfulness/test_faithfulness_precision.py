"""precision: auto (measured choice against fp32), explicit precision, and torch's threads
following the CPU affinity and the cgroup CPU quota."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from structlog.testing import capture_logs

from detectors.faithfulness import FaithfulnessDetector
from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.cores import allowed_cores, cgroup_cpu_quota
from detectors.faithfulness.hhem import HhemScorer, read_checkpoint
from detectors.faithfulness.precision import (
    Measurement,
    PrecisionChoice,
    calibrate,
    choose,
    read_calibration_pairs,
)
from monitor.contract.sidecar_registry import SidecarRegistry
from tests.conftest import REPO, sample, wait_until
from tests.hhem_checkpoint import Tiny, build_checkpoint


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    return build_checkpoint(tmp_path_factory.mktemp("hhem"))


@pytest.fixture(scope="module")
def fp32(tiny: Tiny) -> HhemScorer:
    return HhemScorer(read_checkpoint(str(tiny[0])))


# --- the choice ------------------------------------------------------------------------

FIGURES = [  # precision, pairs/s, max change, flips
    Measurement("fp32", 1.0, 0.0, 0),
    Measurement("bf16_autocast", 3.0, 0.004, 0),
    Measurement("bf16", 5.0, 0.02, 0),
    Measurement("int8", 8.0, 0.3, 2),
]


@pytest.mark.parametrize(
    ("tolerance", "expected"),
    [
        (0.0, "fp32"),
        (0.005, "bf16_autocast"),
        (0.01, "bf16_autocast"),
        (0.05, "bf16"),
        (1.0, "bf16"),
    ],
    ids=["zero-keeps-fp32", "autocast-within", "default-tolerance", "bf16-within", "int8-flips"],
)
def test_choose_takes_the_fastest_within_tolerance_that_flips_nothing(
    tolerance: float, expected: str
) -> None:
    """Fastest qualifying candidate; a verdict flip disqualifies whatever the tolerance."""
    assert choose(FIGURES, tolerance) == expected


def test_choose_keeps_fp32_when_no_candidate_is_faster() -> None:
    """Candidates within tolerance but slower than fp32 (a CPU without bf16) lose to it."""
    slower = [Measurement("fp32", 2.0, 0.0, 0), Measurement("bf16", 0.5, 0.001, 0)]
    assert choose(slower, 0.01) == "fp32"


# --- calibration on a real (tiny) model -----------------------------------------------


def test_the_calibration_set_has_short_and_long_premises() -> None:
    """The shipped set: 30-60 pairs, one- and multi-paragraph premises, short and long."""
    pairs = read_calibration_pairs()
    premises = {premise for premise, _ in pairs}
    assert 30 <= len(pairs) <= 60
    assert min(len(p) for p in premises) < 100
    assert max(len(p) for p in premises) > 600
    assert any("\n\n" in p for p in premises)
    assert all(hypothesis for _, hypothesis in pairs)


def test_a_malformed_calibration_line_names_its_line(tmp_path: Path) -> None:
    """A line that is neither premise nor hypothesis is refused with file and line number."""
    path = tmp_path / "pairs.txt"
    path.write_text("# header\npremise: a\nhypothesis: b\nanswer: c\n")
    with pytest.raises(ValueError, match=r"pairs\.txt:4"):
        read_calibration_pairs(path)


@pytest.fixture(scope="module")
def no_flips(fp32: HhemScorer) -> tuple[HhemScorer, PrecisionChoice]:
    """One calibration with threshold 0 (no verdict can flip) and tolerance 1."""
    return calibrate(fp32, threshold=0.0, tolerance=1.0, batch_size=1)


def test_a_large_tolerance_picks_the_fastest_measured(
    fp32: HhemScorer, no_flips: tuple[HhemScorer, PrecisionChoice]
) -> None:
    """Tolerance 1, nothing to flip: the fastest precision measured is chosen, and it scores
    the set within its measured change of fp32."""
    chosen, choice = no_flips
    assert [m.precision for m in choice.measurements] == [
        "fp32",
        "bf16_autocast",
        "bf16",
        "int8",
        "onnx",
        "onnx_int8",
    ]
    fastest = max(choice.measurements, key=lambda m: m.pairs_per_second)
    assert choice.precision == fastest.precision == chosen.precision
    pairs = read_calibration_pairs()
    changes = [abs(a - b) for a, b in zip(chosen.score(pairs), fp32.score(pairs), strict=True)]
    assert max(changes) == pytest.approx(fastest.max_change, abs=1e-6)


def test_tolerance_zero_keeps_fp32(no_flips: tuple[HhemScorer, PrecisionChoice]) -> None:
    """Every candidate moves some score on the set, if only by rounding, so tolerance 0 keeps
    fp32 on the same measurements."""
    _, choice = no_flips
    assert all(m.max_change > 0 for m in choice.measurements[1:])
    assert choose(choice.measurements, 0.0) == "fp32"


def test_a_candidate_that_flips_a_verdict_is_never_chosen(fp32: HhemScorer) -> None:
    """With the threshold between int8's and fp32's score of one pair, int8 flips that
    verdict and is not chosen, however large the tolerance; the choice flips nothing."""
    pairs = read_calibration_pairs()
    reference, quantized = fp32.score(pairs), fp32.converted("int8").score(pairs)
    a, b = max(zip(reference, quantized, strict=True), key=lambda s: abs(s[0] - s[1]))
    chosen, choice = calibrate(fp32, threshold=(a + b) / 2, tolerance=1.0, batch_size=1)
    int8 = next(m for m in choice.measurements if m.precision == "int8")
    picked = next(m for m in choice.measurements if m.precision == choice.precision)
    assert int8.flips >= 1
    assert chosen.precision == choice.precision != "int8"
    assert picked.flips == 0


# --- onnx_int8: ONNX Runtime with dynamic int8 weights --------------------------------------


def test_onnx_int8_runs_int8_weights_in_integer_matrix_products(fp32: HhemScorer) -> None:
    """The quantized graph multiplies int8 weights (integer MatMul kernels), where the fp32
    export has none; its session scores the calibration set."""
    import onnx

    from detectors.faithfulness.onnx_runtime import FirstPositionLogits, quantized_int8

    exported = _export(FirstPositionLogits(fp32.model))
    quantized = onnx.load_from_string(quantized_int8(exported))
    plain = onnx.load_from_string(exported)
    int8 = onnx.TensorProto.INT8
    assert not any(t.data_type == int8 for t in plain.graph.initializer)
    assert any(t.data_type == int8 for t in quantized.graph.initializer)
    ops = {node.op_type for node in quantized.graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeMatMul"}
    scores = fp32.converted("onnx_int8").score(read_calibration_pairs())
    assert all(0.0 <= s <= 1.0 for s in scores)


def _export(module: torch.nn.Module) -> bytes:
    """The module exported as the onnx precision exports it (dynamic axes, opset 17)."""
    import io
    import warnings

    example = torch.ones((1, 16), dtype=torch.long)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (example, example),
            buffer,  # type: ignore[arg-type]
            input_names=["input_ids", "attention_mask"],
            output_names=["logits"],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in ("input_ids", "attention_mask")},
            opset_version=17,
            dynamo=False,
        )
    return buffer.getvalue()


def test_a_too_lossy_onnx_int8_is_refused(fp32: HhemScorer) -> None:
    """On the tiny model int8 weights move scores far (about 0.3): with a tolerance under its
    measured change onnx_int8 is measured but never kept, whatever its speed."""
    pairs = read_calibration_pairs()
    reference = fp32.score(pairs)
    quantized = fp32.converted("onnx_int8").score(pairs)
    change = max(abs(a - b) for a, b in zip(reference, quantized, strict=True))
    assert change > 0.05  # the tiny random model: far outside the default tolerance 0.01
    chosen, choice = calibrate(fp32, threshold=0.0, tolerance=change / 2, batch_size=1)
    measured = next(m for m in choice.measurements if m.precision == "onnx_int8")
    assert measured.max_change == pytest.approx(change, abs=1e-6)
    assert choice.precision != "onnx_int8"
    assert chosen.precision == choice.precision
    fastest = replace(measured, pairs_per_second=1e9)
    others = [m for m in choice.measurements if m.precision != "onnx_int8"]
    assert choose([*others, fastest], change / 2) != "onnx_int8"


@pytest.mark.parametrize(
    ("speed", "tolerance", "kept"),
    [(1e9, 1.0, True), (1e9, 0.0, False), (1e-9, 1.0, False)],
    ids=["fastest-within-tolerance", "fastest-beyond-tolerance", "within-but-slowest"],
)
def test_onnx_int8_is_kept_only_within_tolerance_and_faster(
    no_flips: tuple[HhemScorer, PrecisionChoice], speed: float, tolerance: float, kept: bool
) -> None:
    """On the tiny model's measurements with onnx_int8's speed set: kept when it is the
    fastest within tolerance, refused beyond it or when slower than the others."""
    _, choice = no_flips
    figures = [
        replace(m, pairs_per_second=speed) if m.precision == "onnx_int8" else m
        for m in choice.measurements
    ]
    assert (choose(figures, tolerance) == "onnx_int8") is kept


def test_a_stop_cancels_the_calibration(fp32: HhemScorer) -> None:
    """A stop seen between forward passes ends the calibration with CalibrationCancelled."""
    from detectors.faithfulness.precision import CalibrationCancelled

    calls = iter(range(5))
    with pytest.raises(CalibrationCancelled):
        calibrate(
            fp32,
            threshold=0.5,
            tolerance=0.01,
            batch_size=1,
            cancelled=lambda: next(calls, None) is None,
        )


def test_the_log_fields_name_every_candidate() -> None:
    """One log line carries the choice and each candidate's speed, change and flips."""
    fields = PrecisionChoice("bf16_autocast", tuple(FIGURES)).log_fields()
    assert fields["precision"] == "bf16_autocast"
    assert fields["candidates"]["int8"] == {"pairs_per_s": 8.0, "max_change": 0.3, "flips": 2}
    assert set(fields["candidates"]) == {"fp32", "bf16_autocast", "bf16", "int8"}


# --- the worker -------------------------------------------------------------------------


@pytest.fixture
def started() -> Iterator[list[FaithfulnessDetector]]:
    detectors: list[FaithfulnessDetector] = []
    yield detectors
    for detector in detectors:
        detector.shutdown()


def start(
    model: Path, detectors: list[FaithfulnessDetector], **settings: object
) -> FaithfulnessDetector:
    config = FaithfulnessConfig.model_validate({"model": str(model), **settings})
    detector = FaithfulnessDetector(config, SidecarRegistry())
    detectors.append(detector)
    detector.start()
    return detector


def test_auto_is_the_default_and_exports_its_choice(
    tiny: Tiny, started: list[FaithfulnessDetector]
) -> None:
    """Default config: calibration runs before scoring starts; the chosen precision is in
    rag_faithfulness_precision_info and in one log line with every candidate's figures."""
    assert FaithfulnessConfig().precision == "auto"
    with capture_logs() as logs:
        detector = start(tiny[0], started)
        wait_until(lambda: detector.worker.state == "ready", timeout=120)
    [line] = [e for e in logs if e["event"] == "faithfulness_precision_chosen"]
    assert set(line["candidates"]) == {
        "fp32",
        "bf16_autocast",
        "bf16",
        "int8",
        "onnx",
        "onnx_int8",
    }
    assert all(
        {"pairs_per_s", "max_change", "flips"} <= set(c) for c in line["candidates"].values()
    )
    figures = line["candidates"][line["precision"]]
    assert figures["max_change"] <= 0.01
    assert figures["flips"] == 0
    registry = detector.registry
    assert sample(registry, "rag_faithfulness_precision_info", precision=line["precision"]) == 1
    assert sample(registry, "rag_faithfulness_precision_info") == 1  # one series only


def test_an_explicit_precision_wins(tiny: Tiny, started: list[FaithfulnessDetector]) -> None:
    """precision: bf16 is used as given: no calibration, bf16 exported."""
    with capture_logs() as logs:
        detector = start(tiny[0], started, precision="bf16")
        wait_until(lambda: detector.worker.state == "ready", timeout=60)
    assert not [e for e in logs if e["event"] == "faithfulness_precision_chosen"]
    [loaded] = [e for e in logs if e["event"] == "faithfulness_model_loaded"]
    assert loaded["precision"] == "bf16"
    assert sample(detector.registry, "rag_faithfulness_precision_info", precision="bf16") == 1
    assert sample(detector.registry, "rag_faithfulness_precision_info") == 1


def test_a_shutdown_during_calibration_stops_the_worker(
    tiny: Tiny, started: list[FaithfulnessDetector]
) -> None:
    """Shut down right after start: the calibration is cut short, the worker ends stopped
    (not failed), and no precision is exported."""
    detector = start(tiny[0], started)
    detector.shutdown()
    assert detector.worker.state == "stopped"
    assert sample(detector.registry, "rag_faithfulness_precision_info") == 0


@pytest.mark.parametrize("precision", ["int8", "onnx", "onnx_int8"])
def test_cpu_only_precisions_are_refused_on_cuda(precision: str) -> None:
    """int8 and the ONNX precisions run on the CPU only: with device cuda the config says so."""
    with pytest.raises(ValueError, match=f"{precision} runs on cpu only"):
        FaithfulnessConfig.model_validate({"device": "cuda", "precision": precision})


def test_the_precision_tolerance_is_bounded() -> None:
    """precision_tolerance outside [0, 1] is refused at start-up, naming the key."""
    with pytest.raises(ValueError, match="precision_tolerance"):
        FaithfulnessConfig.model_validate({"precision_tolerance": 2})


# --- threads: affinity and cgroup quota -------------------------------------------------

AFFINITY = len(os.sched_getaffinity(0))


def cgroup_tree(root: Path, proc_line: str, files: dict[str, str]) -> Path:
    """A sample cgroup mount under ``root`` and a /proc/self/cgroup file naming the process's
    cgroup; returns the latter."""
    for relative, text in files.items():
        path = root / "fs" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "fs").mkdir(exist_ok=True)
    proc = root / "proc-self-cgroup"
    proc.write_text(proc_line + "\n")
    return proc


@pytest.mark.parametrize(
    ("proc_line", "files", "quota"),
    [
        ("0::/", {"cpu.max": "150000 100000\n"}, 1.5),
        ("0::/", {"cpu.max": "max 100000\n"}, None),
        (
            "0::/kubepods/pod1/c1",
            {
                "kubepods/pod1/c1/cpu.max": "max 100000\n",
                "kubepods/pod1/cpu.max": "200000 100000\n",
                "kubepods/cpu.max": "800000 100000\n",
            },
            2.0,
        ),
        ("0::/not/visible/here", {"cpu.max": "300000 100000\n"}, 3.0),
        ("0::/", {"cpu.max": "garbage\n"}, None),
        (
            "4:cpu,cpuacct:/docker/abc",
            {
                "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "50000\n",
                "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
            },
            0.5,
        ),
        (
            "4:cpu,cpuacct:/",
            {"cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
            None,
        ),
        ("0::/", {}, None),
    ],
    ids=[
        "v2-quota",
        "v2-max",
        "v2-tightest-ancestor",
        "v2-namespaced",
        "v2-garbage",
        "v1-quota",
        "v1-unlimited",
        "no-files",
    ],
)
def test_the_cgroup_quota_caps_the_cores(
    tmp_path: Path, proc_line: str, files: dict[str, str], quota: float | None
) -> None:
    """cgroup v2 cpu.max and v1 cfs quota/period, tightest over the cgroup's ancestors; the
    cores are the affinity capped by the quota rounded down, at least 1."""
    proc = cgroup_tree(tmp_path, proc_line, files)
    root = tmp_path / "fs"
    assert cgroup_cpu_quota(root, proc) == quota
    expected = AFFINITY if quota is None else max(1, min(AFFINITY, math.floor(quota)))
    assert allowed_cores(root, proc) == expected


def test_no_proc_cgroup_file_means_the_affinity(tmp_path: Path) -> None:
    """Without /proc/self/cgroup (not Linux cgroups) the affinity alone counts."""
    assert allowed_cores(tmp_path, tmp_path / "missing") == AFFINITY


def test_torch_threads_follow_the_cpu_affinity() -> None:
    """threads: null in a process pinned to one core gives torch one thread."""
    probe = (
        "import os\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "import torch\n"
        "from detectors.faithfulness.hhem import set_threads\n"
        "print(set_threads(None), torch.get_num_threads())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert result.stdout.split() == ["1", "1"]
