"""A toy detector, the worked example of "Adding a detector" in docs/pages/architecture.md.

It counts feedback events. Everything a detector brings is here: its config
model, its metric, its rule, its panel and its registration; the entry point
is declared in ``../rag_toy_detector-0.1.0.dist-info/entry_points.txt`` (what
``pip install`` writes from a ``[project.entry-points."rag_monitor.detectors"]``
table). tests/integration/test_toy_detector.py puts this folder on the path.
"""
