"""The guard: idle-GPU policies replayed over the ledger's history in dollars (``replay``), and acted on live
(``live``: warn the owner, digest the admins, cancel only with ``--enforce`` and ``[guard] allow_cancel``).

Pure logic (``timeline``, ``steps``, ``replay``: a connection in, dicts out) is kept apart from the actions on the
outside world (``edge``: scancel, pod deletion), which are dry-run by default."""
