"""Recommendations as items that live across weeks: a stable key, a status with an append-only history, and
the saving measured after an item was done (docs/recommendations.md, "Items across weeks"; the measurement in
docs/metrics.md, "Measured saving").

- ``key.py``: the one identity of a problem (kind + target), and its short id;
- ``scan.py``: each ISO week's listed problems and each key's targeted waste, from analytics.recommend;
- ``measure.py``: pure functions, the before/after measurement and when a done item's waste has returned;
- ``store.py``: the ledger's ``action_items`` and ``action_history`` tables, and who may change what;
- ``tracker.py``: the items with their status as of a time, and the week's groups (new, still open, done).
"""
