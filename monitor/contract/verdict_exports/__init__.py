"""Where verdicts leave the process, besides /metrics: the exporters a detector hands its
verdicts to, with their settings (``config.py``).

- ``otlp_logs.py``: faithfulness scores and unscored outcomes, and labeled queries' false
  exclusions, as OpenTelemetry ``gen_ai.evaluation.result`` log records to an OTLP/HTTP
  logs endpoint (``detectors.evaluations.emit``; the evaluations detector sends them).
- ``phoenix.py``: faithfulness scores as Phoenix span annotations
  (``detectors.faithfulness.phoenix``; the faithfulness detector sends them).

Both export off the pipeline thread and drop, counted or after retries, rather than block.
"""
