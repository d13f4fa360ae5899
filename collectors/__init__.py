"""Collectors: how traced requests reach the sidecar.

``spans`` turns spans into RAG traces (the mapping and the assembly), ``otlp`` receives
them over OTLP/HTTP and gRPC, ``kafka`` reads them from topics, and ``intake`` is the one
step every transport shares. ``inspect`` is the onboarding command that reads a service's
spans and proposes mapping settings.
"""
