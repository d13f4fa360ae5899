"""rag-monitor: an online production-monitoring sidecar for RAG services."""

__version__ = "0.1.0"
