"""The human review loop (issue 13): sampler, queue store, reviewer's page, reports."""
