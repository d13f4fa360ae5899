"""``rag-monitor demo``: the sidecar plus a synthetic RAG service with scripted incidents,
and a live view that evaluates the generated rules (``alerts.rules``) on its registry."""
