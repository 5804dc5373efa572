"""Local time zones: this machine's zone, the session zone DuckDB reads naive times in, and the hour a DST end
repeats (which pass through it a row belongs to)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from zoneinfo import ZoneInfo

import duckdb

from gpuledger.ledger.errors import FormatError


def utc_offset(zone: str, at: dt.datetime) -> dt.timedelta:
    """``zone``'s offset from UTC at the naive-UTC instant ``at``."""
    return at.replace(tzinfo=dt.UTC).astimezone(ZoneInfo(zone)).utcoffset() or dt.timedelta(0)


def fall_backs(zone: str, lo: dt.datetime, hi: dt.datetime) -> list[tuple[dt.datetime, dt.timedelta]]:
    """The instants from the day before ``lo`` to ``hi`` (naive UTC) at which ``zone``'s clocks go back (a DST
    end), with how far.

    Each day is compared at its two ends (a zone changes its offset at most once a day; starting the day
    before ``lo`` sees a change at a UTC midnight), and a day whose offset falls is bisected to the second:
    a few hundred zoneinfo calls a year of data."""
    found = []
    day = dt.datetime.combine(lo.date(), dt.time()) - dt.timedelta(days=1)
    while day <= hi:
        a, b = day, day + dt.timedelta(days=1)
        before = utc_offset(zone, a)
        if utc_offset(zone, b) < before:
            while b - a > dt.timedelta(seconds=1):
                mid = a + (b - a) / 2
                a, b = (mid, b) if utc_offset(zone, mid) == before else (a, mid)
            found.append((b.replace(microsecond=0), before - utc_offset(zone, b)))
        day += dt.timedelta(days=1)
    return found


def resolve_fall_back(
    con: duckdb.DuckDBPyConnection, table: str, zone: str, key: str, *, naive: str | None = None
) -> int:
    """Put the rows of ``table`` whose local time fell in the hour the clocks repeat (a DST end) on the
    right pass through it, by file order; returns how many rows fell in such an hour.

    ``ts`` holds naive-UTC times converted from naive local times in ``zone`` by ``timezone(zone, ts)``,
    which reads a repeated local time as one of its two instants (the later in most zones, the earlier in
    some: ICU's choice, not ours), so both passes land in [T - d, T + d) around the fall-back at T. There each
    row's local time is recovered (ts plus the offset of the side it landed on), and for each ``key`` (a GPU),
    in file order (``rowid``), the rows are the first pass until one goes back in time, the second from there
    on: local time less the summer offset, then less the winter one. A window with no row that goes back is
    one pass, read as the first (``fold=0``, Python's reading, which the XML and pmon parsers use). ``naive``:
    a boolean column of ``table``, true for rows whose time carried no offset (the others are left alone)."""
    if zone.upper() in ("UTC", "GMT", "ETC/UTC"):
        return 0
    lo, hi = con.execute(f"SELECT min(ts), max(ts) FROM {table}").fetchall()[0]
    if lo is None:
        return 0
    only = f"AND {naive}" if naive else ""
    placed = 0
    for at, back in fall_backs(zone, lo, hi):
        winter = utc_offset(zone, at)
        summer = winter + back
        to_us = 1_000_000
        con.execute(
            f"""CREATE OR REPLACE TEMP TABLE fall_back_rows AS
                WITH w AS (
                    SELECT rowid AS rid, {key} AS k,
                           ts + to_microseconds(CASE WHEN ts < $at THEN $summer ELSE $winter END) AS lt
                    FROM {table} WHERE ts >= $lo AND ts < $hi {only}
                ),
                stepped AS (
                    SELECT rid, k, lt, coalesce(lt < max(lt) OVER (PARTITION BY k ORDER BY rid
                                                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                                                false) AS went_back
                    FROM w
                )
                SELECT rid, lt - to_microseconds(CASE WHEN bool_or(went_back) OVER (PARTITION BY k ORDER BY rid
                                                           ROWS UNBOUNDED PRECEDING) THEN $winter ELSE $summer END) AS utc
                FROM stepped""",
            {
                "at": at,
                "lo": at - back,
                "hi": at + back,
                "summer": int(summer.total_seconds() * to_us),
                "winter": int(winter.total_seconds() * to_us),
            },
        )
        placed += con.execute("SELECT count(*) FROM fall_back_rows").fetchall()[0][0]
        con.execute(
            f"""UPDATE {table} SET ts = f.utc FROM fall_back_rows f
                WHERE {table}.rowid = f.rid AND {table}.ts IS DISTINCT FROM f.utc"""
        )
        con.execute("DROP TABLE temp.fall_back_rows")
    return int(placed)


class LocalClock:
    """One log's naive local times, met in file order, as naive UTC: :func:`resolve_fall_back`'s rule for
    parsers that read line by line. A time in the hour a DST end repeats is read on its first pass
    (``fold=0``) until the log goes back in time inside that hour, and on its second pass from there on."""

    def __init__(self, zone: ZoneInfo) -> None:
        self.zone = zone
        self._latest: dict[object, dt.datetime] = {}  # each repeated hour met: the latest local time in it
        self._second: set[object] = set()  # repeated hours whose second pass has begun

    def fold(self, local: dt.datetime) -> int:
        first, second = (local.replace(tzinfo=self.zone, fold=f).utcoffset() for f in (0, 1))
        if first is None or second is None or first <= second:  # not repeated (a gap's fold is no pass)
            return 0
        hour = (local.date(), first, second)
        if hour not in self._second:
            latest = self._latest.get(hour)
            if latest is None or local >= latest:
                self._latest[hour] = local
                return 0
            self._second.add(hour)
        return 1

    def utc(self, local: dt.datetime) -> dt.datetime:
        aware = local.replace(tzinfo=self.zone, fold=self.fold(local))
        return aware.astimezone(dt.UTC).replace(tzinfo=None)


def local_zone() -> str:
    """This machine's IANA zone (for nvidia-smi's naive local timestamps); UTC when it cannot be told.

    ``$TZ`` is read in every form the C library accepts for a zone file: ``Europe/Paris``, ``:Europe/Paris``,
    ``:/etc/localtime``, ``/usr/share/zoneinfo/Europe/Paris``. A POSIX rule string (``CET-1CEST``) or a name
    zoneinfo does not know falls back to /etc/localtime, then UTC.
    """
    import os

    tz = os.environ.get("TZ", "").strip().lstrip(":")
    if tz:
        name = _zone_from_path(Path(tz)) if tz.startswith("/") else tz
        if name and _known_zone(name):
            return name
    name = _zone_from_path(Path("/etc/localtime"))
    if name and _known_zone(name):
        return name
    utc = dt.datetime.now().astimezone().tzname()
    return utc if utc in ("UTC", "GMT") else "UTC"


def _zone_from_path(path: Path) -> str | None:
    """``/usr/share/zoneinfo/Europe/Paris`` (or a link to it, like /etc/localtime) → ``Europe/Paris``."""
    try:
        parts = path.resolve().parts
    except OSError:
        return None
    if "zoneinfo" in parts:
        return "/".join(parts[parts.index("zoneinfo") + 1 :]) or None
    return None


def _known_zone(name: str) -> bool:
    from zoneinfo import ZoneInfo

    try:
        ZoneInfo(name)
    except (ValueError, OSError, KeyError):  # ZoneInfoNotFoundError is a KeyError
        return False
    return True


@contextmanager
def session_zone(con: duckdb.DuckDBPyConnection, zone: str | None) -> Iterator[None]:
    """Interpret naive timestamps in ``zone`` while staging; the ledger itself always runs in UTC."""
    zone = zone or "UTC"
    try:
        con.execute(f"SET TimeZone = '{zone.replace(chr(39), '')}'")
    except duckdb.Error as exc:
        raise FormatError("--tz", None, f"unknown time zone {zone!r}") from exc
    try:
        yield
    finally:
        con.execute("SET TimeZone = 'UTC'")
