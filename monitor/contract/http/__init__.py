"""HTTP serving: the bounded HTTP/1.1 server (``service``) with its bounds (``limits``)
and wire format (``wire``), and the sidecar's own endpoints /metrics, /healthz and /readyz
(``endpoints``). The bytes-in-flight budget it shares with the gRPC receiver is
``monitor.contract.inflight``."""
