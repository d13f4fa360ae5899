"""Detectors: one module each; cheap ones observe every trace inline."""
