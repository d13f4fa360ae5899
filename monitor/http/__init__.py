"""HTTP serving: the bounded HTTP/1.1 server (``service``) with its bounds (``limits``)
and wire format (``wire``), the bytes-in-flight budget it shares with the gRPC receiver
(``inflight``), and the sidecar's own endpoints /metrics, /healthz and /readyz
(``endpoints``)."""
