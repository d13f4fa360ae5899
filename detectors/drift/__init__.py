"""Query-embedding drift: an MMD two-sample test of recent query vectors against a reference.

``detector`` is the front end (one result type, the worker thread, metrics);
``scipy_backend`` and ``alibi_backend`` compute the test; ``store`` persists the
reference and the history; ``report`` writes the weekly report. Importing this
package loads neither torch nor alibi-detect.
"""
