"""Prometheus rules generated from the guardrail configuration."""
