"""``rag-monitor inspect``: reads a service's spans (a file or a live OTLP port), says which
RAG fields the mapping fills and proposes the settings that fill the rest."""
