"""Spans to RAG traces: the span model every transport decodes into, the mapping of the
span conventions (OpenInference, OpenTelemetry GenAI, traceloop) and its readers, and the
assembly that gathers a trace's spans (config section ``collectors.spans``)."""
