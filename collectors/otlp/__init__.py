"""The OTLP receivers: OTLP/HTTP and gRPC, traces and logs, their decoding and their config
(section ``collectors.otlp``)."""
