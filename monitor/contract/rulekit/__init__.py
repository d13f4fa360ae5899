"""The rule kit: what a component's ``alerting.py`` builds its share of the rule file and
the dashboard from. ``fragments``: the pieces it returns (``RuleFragment``, ``Row``,
``Panel``, ``Annotation``); ``promql``: PromQL building blocks; ``evidence``: bounds whose
z comes from the false-alert budget; ``control_band``: the seasonal p-chart band."""
