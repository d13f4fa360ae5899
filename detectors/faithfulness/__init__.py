"""Sampled faithfulness with HHEM-2.1-Open (torch and transformers load on the worker)."""

from detectors.faithfulness.detector import FaithfulnessDetector

__all__ = ["FaithfulnessDetector"]
