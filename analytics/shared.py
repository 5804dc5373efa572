"""One view's intermediate results computed once per read-only batch instead of once per caller.

Many analytics functions recompute the same thing internally: the weekly report asks for the view's unallocated
capacity seven times and its per-job waste six times; the Overview's summary, capacity and savings each ask
again. Inside ``with sharing(con, key):`` each call of a function marked :func:`shared` with the same
arguments on ``con`` is computed once and the result handed out again (a copy). Outside such a block nothing
is kept, so a connection that writes between calls (the tests, an ingest) always reads fresh figures.

Only for batches during which the ledger cannot change: a reader (gpuledger.ledger.db.reader). ``key`` names
the ledger's state, e.g. (path, data_version): blocks with the same key share results (the last few keys are
kept), so the data functions of one page load, each with its own reader, compute a view's figures once; and
blocks with the same key on the same connection (a page run's data functions share one:
gpuledger.ledger.db.one_reader) share the temp tables of :func:`materialized` as well.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import inspect
import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

import duckdb
import polars as pl

from analytics.query import frame
from gpuledger.ledger.prices import PriceBook, price_book

F = TypeVar("F", bound=Callable[..., Any])

KEPT_STATES = 4  # ledger states (keys) whose results are kept; each holds at most ENTRIES results
ENTRIES = 64
_states: OrderedDict[Hashable, OrderedDict[Hashable, Any]] = OrderedDict()
_lock = threading.Lock()
_local = threading.local()  # per thread (Streamlit runs each session's script in its own thread)
_temp_names = itertools.count()  # process-unique: a name found on a connection was made there, by us
# A keyed state's temp tables, per connection (id) they live on: sub-query key -> temp table name. Temp tables
# belong to their connection and go with it; :func:`_kept_temps` checks that they are still there.
_state_temps: dict[Hashable, dict[int, dict[Hashable, str]]] = {}


def _store_for(key: Hashable | None) -> OrderedDict[Hashable, Any]:
    if key is None:
        return OrderedDict()
    with _lock:
        store = _states.pop(key, None) or OrderedDict()
        _states[key] = store
        while len(_states) > KEPT_STATES:
            _states.popitem(last=False)
        for gone in [k for k in _state_temps if k not in _states]:
            del _state_temps[gone]
        return store


def _kept_temps(con: duckdb.DuckDBPyConnection, key: Hashable) -> dict[Hashable, str]:
    """The temp tables earlier blocks under ``key`` made on ``con`` (and that it still has), to be reused.

    Why: a page run's data functions each open a block on the run's one connection; each used to create the
    view's per-job costs again (10-30 ms a statement on the 28-day demo, two or three per block). The names
    are checked against the connection's temp tables: a connection that was closed (a writer on this thread
    closes the batch's) and a new one that got its id() start with none."""
    with _lock:
        temps = _state_temps.setdefault(key, {}).setdefault(id(con), {})
        listed = dict(temps)
    if listed:
        try:
            there = {r[0] for r in con.execute(_TEMP_TABLES_SQL).fetchall()}
        except duckdb.Error:  # a closed connection
            there = set()
        gone = [k for k, name in listed.items() if name not in there]
        with _lock:
            for k in gone:
                temps.pop(k, None)
    return temps


_TEMP_TABLES_SQL = "SELECT table_name FROM duckdb_tables() WHERE database_name = 'temp'"


@contextlib.contextmanager
def sharing(con: duckdb.DuckDBPyConnection, key: Hashable | None = None) -> Iterator[None]:
    """Share results of :func:`shared` functions called on ``con`` inside the block (see the module).

    Without a ``key``, a block opened inside another block on ``con`` is that block (a report collected
    inside a page's data function shares the page's results)."""
    if key is None and _active(con) is not None:
        yield
        return
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    store = _store_for(key)
    # a keyed block leaves its temp tables on the connection for the next block under the key (they go with
    # the connection); a block without a key drops them at its end
    temps: dict[Hashable, str] = {} if key is None else _kept_temps(con, key)
    stack.append((con, store, temps))
    try:
        yield
    finally:
        stack.pop()
        if key is None:
            for name in temps.values():
                with contextlib.suppress(duckdb.Error):  # a connection closed inside the block has none left
                    con.execute(f"DROP TABLE IF EXISTS temp.{name}")


def _active(con: duckdb.DuckDBPyConnection) -> OrderedDict[Hashable, Any] | None:
    for c, store, _ in reversed(getattr(_local, "stack", None) or ()):
        if c is con:
            return store
    return None


def active(con: duckdb.DuckDBPyConnection) -> bool:
    """True inside a sharing block on ``con`` (a caller that passes its own intermediate results outside
    one may instead ask for a shared result inside one)."""
    return _active(con) is not None


def materialized(key: Hashable, sql: str, params: list[object]) -> tuple[str, list[object]]:
    """``(sql, params)`` of a sub-query many statements of a batch embed, read from a temp table instead.

    DuckDB plans every statement anew, and planning is what our statements cost on ledgers of any size below
    a few million rows: the per-job costs (analytics/cost.py) are about 10 kB of SQL, and a page's statements
    embed them one to three times each (measured: 90-180 ms a statement, 10-15 ms of it executing). Inside a
    sharing block on this thread the sub-query runs once, into a temp table of the block's connection
    (dropped when a block without a key ends; a keyed block's stay for the next block under that key on the
    same connection, and go with it), and callers get a plain scan of it; ``key`` names the sub-query with
    everything its result depends on. Outside a block, the sub-query itself comes back. A statement run on
    another connection than the block's fails on the missing table, never reads another ledger's rows.
    """
    stack = getattr(_local, "stack", None)
    if not stack:
        return sql, params
    con, _, temps = stack[-1]
    name = temps.get(key)
    if name is None:
        name = f"gl_shared_{next(_temp_names)}"
        con.execute(f"CREATE TEMP TABLE {name} AS {sql}", params)
        temps[key] = name
    return f"SELECT * FROM temp.{name}", []


def _arg_key(value: Any) -> Hashable:
    fingerprint = getattr(value, "fingerprint", None)  # Settings: its content, not the object
    if callable(fingerprint):
        return ("settings", fingerprint())
    hash(value)  # Filters (frozen), datetimes, strings: a TypeError here means: do not share
    return value


def _copy(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return value.clone() if isinstance(value, pl.DataFrame) else value


def memo(con: duckdb.DuckDBPyConnection, key: Hashable, compute: Callable[[], Any]) -> Any:
    """``compute()`` once per sharing block on ``con`` under ``key`` (a small fact about the ledger many
    functions ask for); outside a block, every call computes."""
    store = _active(con)
    if store is None:
        return compute()
    key = ("memo", key)
    if key in store:
        return store[key]
    value = compute()
    with _lock:
        store[key] = value
    return value


def ledger_frame(con: duckdb.DuckDBPyConnection, sql: str, params: tuple[object, ...] = ()) -> pl.DataFrame:
    """``frame(con, sql, params)`` of a statement that reads the ledger whole (no view's dates or filters in
    it: every run of the ledger, each job's busy share over all its days), once per sharing block
    (:func:`memo`, keyed by the statement and its parameters); a copy each time.

    Why: the items scan (gpuledger/items/scan.py) runs the rules once a week, and each run read the same
    whole-ledger rows again (the runs the batch and scaling rules fit, the checkpoints, the failed runs'
    details): the same statement, the same rows, four times on the 28-day demo."""
    out = memo(con, ("ledger_frame", sql, params), lambda: frame(con, sql, list(params)))
    return out.clone()  # type: ignore[no-any-return]


def ledger_prices(con: duckdb.DuckDBPyConnection) -> PriceBook:
    """gpuledger.ledger.prices.price_book (the price rows in force), once per sharing block (:func:`memo`):
    the rules ask for it three times a run, and the items scan runs them once a week (12 reads, 5 ms each,
    on the 28-day demo). A PriceBook is frozen: the one object is handed out."""
    return memo(con, "price_book", lambda: price_book(con))  # type: ignore[no-any-return]


def horizon(con: duckdb.DuckDBPyConnection) -> dt.datetime | None:
    """The latest moment the ledger has data for: running jobs are costed up to here.

    Using the data's own horizon (not the wall clock) keeps every figure reproducible: the dashboard, the
    CLI and a report computed a minute apart agree to the cent. Asked once per sharing block
    (:func:`memo`): nearly every analytics function asks for it, 5-15 ms a time on the 28-day demo.
    """
    return memo(con, "horizon", lambda: _horizon(con))  # type: ignore[no-any-return]


def _horizon(con: duckdb.DuckDBPyConnection) -> dt.datetime | None:
    row = con.execute(
        """SELECT greatest(
               -- the end of the last sample (ts + interval_s), not its start: a running job holds its card
               -- through its last sample's interval, which is billed to it, not lost (per-day rollup: a few
               -- rows per GPU-day; isfinite as a range, which zone maps answer)
               (SELECT max(max_end_ts) FROM samples_day
                WHERE max_end_ts > '-infinity'::TIMESTAMP AND max_end_ts < 'infinity'::TIMESTAMP),
               (SELECT max(greatest(coalesce(end_ts, start_ts), start_ts)) FROM jobs
                WHERE isfinite(coalesce(end_ts, start_ts)) AND isfinite(start_ts)),
               (SELECT max(coalesce(end_ts, start_ts)) FROM allocations WHERE isfinite(coalesce(end_ts, start_ts))))"""
    ).fetchall()
    return row[0][0]


def shared(fn: F) -> F:
    """Mark ``fn(con, **keywords)`` as sharable (its result depends only on the ledger and the keywords).

    The key holds every keyword with its default filled in, and a function with an ``as_of`` keyword treats
    an omitted (None) ``as_of`` as the ledger's horizon: ``f(con)``, ``f(con, filters=Filters())`` and
    ``f(con, as_of=horizon(con))`` share one result."""
    signature = inspect.signature(fn)
    first = next(iter(signature.parameters))  # the connection
    takes_as_of = "as_of" in signature.parameters

    def key_of(
        con: duckdb.DuckDBPyConnection, kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], Hashable | None]:
        """The keywords with their defaults filled in, and the result's key (None: not sharable)."""
        bound = signature.bind(con, **kwargs)
        bound.apply_defaults()
        kwargs = {k: v for k, v in bound.arguments.items() if k != first}
        if takes_as_of and kwargs.get("as_of") is None:
            kwargs["as_of"] = horizon(con)
        try:
            return kwargs, (
                fn.__module__,
                fn.__qualname__,
                tuple(sorted((k, _arg_key(v)) for k, v in kwargs.items())),
            )
        except TypeError:
            return kwargs, None

    @functools.wraps(fn)
    def wrapper(con: duckdb.DuckDBPyConnection, *args: Any, **kwargs: Any) -> Any:
        store = _active(con)
        if store is None or args:
            return fn(con, *args, **kwargs)
        kwargs, key = key_of(con, kwargs)
        if key is None:
            return fn(con, **kwargs)
        if key in store:
            store.move_to_end(key)
            return _copy(store[key])
        out = fn(con, **kwargs)
        with _lock:
            store[key] = out
            while len(store) > ENTRIES:
                store.popitem(last=False)
        return _copy(out)

    wrapper.shared_key = key_of  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def kept(fn: Callable[..., Any], con: duckdb.DuckDBPyConnection, **kwargs: Any) -> Any:
    """What ``fn`` (a :func:`shared` function) returned for these keywords in this block's state, if it has
    been computed already; else None (nothing is computed). For a cheaper path that a result computed for
    another purpose contains (the view's capacity inside the per-week capacity: analytics.waste)."""
    store = _active(con)
    if store is None:
        return None
    _, key = fn.shared_key(con, kwargs)  # type: ignore[attr-defined]
    if key is None or key not in store:
        return None
    return _copy(store[key])


def keep(fn: Callable[..., Any], con: duckdb.DuckDBPyConnection, value: Any, **kwargs: Any) -> None:
    """Hand ``value`` out in this block's state as what ``fn`` (a :func:`shared` function) returns for these
    keywords: a result computed beside others in one statement, equal to what ``fn`` gives alone (each
    week's unallocated capacity: analytics.capacity.prefetch_unallocated). Nothing outside a block."""
    store = _active(con)
    if store is None:
        return
    _, key = fn.shared_key(con, kwargs)  # type: ignore[attr-defined]
    if key is None:
        return
    with _lock:
        store[key] = value
        while len(store) > ENTRIES:
            store.popitem(last=False)


def clear() -> None:
    """Forget every kept result (bench/pages.py's cold runs, like ``st.cache_data.clear``)."""
    with _lock:
        _states.clear()
        _state_temps.clear()
