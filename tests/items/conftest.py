"""One scan per ledger state for the items tests.

A scan (gpuledger/items/scan.py) runs two recommendations() per complete week: about 15 s on the six-week
ledger of weeks_ledger.py on a loaded 2-core machine, and every `gpuledger actions` / `report` command scans
again. The scan is a function of the ledger's data tables and the settings only: it never reads the items'
own tables (action_items, action_history), which is all a test changes between its commands. So the scan
is memoized here under its whole input: a checksum of every other table's rows, and the settings'
fingerprint. Copies of one template, and one ledger before and after an `actions set`, share a scan; a
ledger whose data differ (the relapse, the second notebook) gets its own. Each caller gets its own deep copy,
so no test can change another's. Every assertion still runs on what the real commands print.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest

from analytics.filters import horizon
from gpuledger.items import scan as scan_module
from gpuledger.ledger.settings import Settings

ITEMS_TABLES = ("action_items", "action_history")  # what the items write; the scan never reads them
_real_scan = scan_module.scan
_MEMO: dict[tuple[Any, ...], scan_module.WeekScan] = {}


def data_state(con: duckdb.DuckDBPyConnection) -> tuple[Any, ...]:
    """Every table's row count and order-free checksum, but the items' own tables."""
    tables = [
        t
        for (t,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = 'main' ORDER BY table_name"
        ).fetchall()
        if t not in ITEMS_TABLES
    ]
    return tuple(
        (t, *con.execute(f'SELECT count(*), coalesce(sum(hash(x)), 0) FROM "{t}" AS x').fetchone())
        for t in tables
    )


def memo_scan(con: duckdb.DuckDBPyConnection, *, settings: Settings | None = None) -> scan_module.WeekScan:
    key = (data_state(con), horizon(con), (settings or Settings()).fingerprint())
    if key not in _MEMO:
        _MEMO[key] = _real_scan(con, settings=settings)
    return copy.deepcopy(_MEMO[key])


@pytest.fixture(autouse=True, scope="module")
def _one_scan_per_state(request: pytest.FixtureRequest) -> Iterator[None]:
    import gpuledger.cli.commands.actions as actions_cli
    import gpuledger.items.tracker as tracker
    import gpuledger.reports.items_section as items_section

    with pytest.MonkeyPatch.context() as mp:
        for module in (scan_module, tracker, actions_cli, items_section):
            mp.setattr(module, "scan", memo_scan)
        if getattr(request.module, "scan", None) is _real_scan:  # a test module's own `from ... import scan`
            mp.setattr(request.module, "scan", memo_scan)
        yield
    _MEMO.clear()
