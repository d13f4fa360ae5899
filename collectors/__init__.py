"""Trace sources: OTLP receivers, the Kafka consumer, span assembly."""
