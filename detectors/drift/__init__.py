"""Query-embedding drift: an MMD two-sample test of recent query vectors against a reference,
one reference per representation (the embedding model of the vectors).

``detector`` is the front end (the worker thread, metrics); ``representations`` tracks
which embedding models the traffic comes in and when that changes; ``lane`` holds one
representation's reference, window and backend; ``scipy_backend`` and ``alibi_backend``
compute the test (one result type); ``store`` persists the versioned references and the
history; ``report`` and ``migration`` write the weekly report. Importing this package
loads neither torch nor alibi-detect.
"""
