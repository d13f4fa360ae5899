"""Detectors: one package each, registered in the entry-point group ``rag_monitor.detectors``."""
