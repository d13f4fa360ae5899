"""The Kafka collector: a consumer group over the trace, label, feedback and logs topics,
its record formats, commits, dead letters and config (section ``collectors.kafka``)."""
