"""The identity of a problem across weeks: its kind and its target.

Recommendations are recomputed every week, so the item a team acts on must be found again next week by
what it is about, not by the row it was. The key is ``kind:target_type:target`` where the target is the
one the rule names (analytics/advice_*.py), except that a **job's** item is its **run family's**
(``family``, ``user/stem`` with analytics.advice_common.family_stem, the target a family card already
has): a job id is new every week, while the family is the habit a team fixes. A user (``stop_idle_notebooks``),
a cluster and GPU model (capacity, ``cluster/model``) and a family keep the target the rule gives them.

The id is the first ``ID_CHARS`` hex digits of the key's SHA-1: short enough to type, the same on every
machine and every week.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import duckdb

from analytics.advice_common import family_stem

ID_CHARS = 8
SEP = ":"


@dataclass(frozen=True)
class ItemKey:
    """What a problem is about, the same every week."""

    kind: str
    target_type: str  # family | user | cluster
    target: str

    @property
    def text(self) -> str:
        return SEP.join((self.kind, self.target_type, self.target))

    @property
    def id(self) -> str:
        return item_id(self.text)


def item_id(key: str) -> str:
    """The short id of a key (``actions set ID``)."""
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:ID_CHARS]


def job_names(con: duckdb.DuckDBPyConnection, job_ids: Iterable[str]) -> dict[str, str | None]:
    """Job id → its name, for the job targets a week's list holds."""
    ids = sorted({str(j) for j in job_ids})
    if not ids:
        return {}
    rows = con.execute(
        "SELECT job_id, name FROM jobs WHERE job_id IN (SELECT unnest(?::VARCHAR[]))", [ids]
    ).fetchall()
    return {str(j): n for j, n in rows}


def key_of(row: Mapping[str, object], names: Mapping[str, str | None]) -> ItemKey:
    """The key of one recommendation row (analytics.recommend.RECOMMENDATION_COLUMNS); ``names``: job id →
    name (:func:`job_names`) for the rows whose target is a job."""
    kind, target_type, target = str(row["kind"]), str(row["target_type"]), str(row["target"])
    if target_type == "job":
        # the family card's own target: f"{user}/{stem}" (analytics/recommend.py _frame_families)
        stem = family_stem(names.get(target), target)
        return ItemKey(kind, "family", f"{row['user_name']}/{stem}")
    return ItemKey(kind, target_type, target)
