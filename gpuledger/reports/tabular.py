"""The report as data: JSON (the headline is ``gpuledger summary --json`` for the period, ``previous`` the same
object for the period before) and CSV (one long table: section, name, figure, value, previous value, unit),
the mail's attachment. Neither holds NaN or Infinity (missing is null / an empty cell); CSV text cells that
a spreadsheet would run as a formula are neutralized."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
from typing import Any

import polars as pl

from analytics.money import clean_float
from gpuledger.reports.content import WASTE_PARTS, ReportData, definitions, kind_label, owner

GROUP_FIELDS = ("spend_usd", "team_waste_usd", *(k for k, _ in WASTE_PARTS))
JOB_FIELDS = (
    "job_id",
    "name",
    "user_name",
    "team",
    "cluster",
    "kind",
    "state",
    "gpu_model",
    "gpu_count",
    "gpu_hours",
    "cost_usd",
    "waste_usd",
    "mean_util_pct",
    "mfu",
    "mfu_basis",
)
ACTION_FIELDS = (
    "kind",
    "target_type",
    "target",
    "user_name",
    "team",
    "usd_per_week",
    "counted_usd_per_week",
    "confidence",
    "action",
    "evidence",
    "job_ids",
)
CHANGE_KEYS = (
    "spend_usd",
    "gpu_hours",
    "mean_util_pct",
    "idle_gpu_hours",
    "idle_usd",
    "team_waste_usd",
    "unheld_capacity_usd",
    "unmeasured_usd",
    "jobs",
    "unpriced_gpu_hours",
    "energy_kwh",
    "co2e_kg",
    "usd_per_mtok",
    "training_usd_per_mtok",
    "inference_usd_per_mtok_generated",
)


def _clean(value: Any) -> Any:
    """JSON-ready: floats as analytics.money.clean_float prints them (NaN/inf → None, no -0.0), dates → ISO strings, containers recursively."""
    if isinstance(value, float):
        return clean_float(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _records(frame: pl.DataFrame, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    cols = [f for f in fields if f in frame.columns]
    return frame.select(cols).to_dicts() if cols else []


def change(now: dict[str, Any], before: dict[str, Any] | None) -> dict[str, float | None]:
    """now − before for each numeric headline key (None when either is missing)."""
    out: dict[str, float | None] = {}
    for k in CHANGE_KEYS:
        if k not in now:
            continue
        a, b = now.get(k), (before or {}).get(k)
        out[k] = None if a is None or b is None else float(a) - float(b)
    return out


def report_dict(data: ReportData) -> dict[str, Any]:
    s = data.summary
    kwh = s.get("energy_kwh")
    prev_kwh = (data.previous or {}).get("energy_kwh")
    actions = []
    for r in data.recommendations.to_dicts():
        item = {f: r.get(f) for f in ACTION_FIELDS}
        item["label"] = kind_label(str(r["kind"]))
        item["owner"] = owner(r)
        actions.append(item)
    out = {
        "report": {
            "title": data.title,
            "filters": s["filters"],
            "as_of": s["as_of"],
            "generated_at": data.generated_at.isoformat(),
        },
        "headline": s,
        "previous": data.previous,
        "change": change(s, data.previous),
        "actions": {**data.savings, "coverage": data.coverage, "top": actions},
        "by_team": _records(data.by_team, ("team", *GROUP_FIELDS)),
        "by_user": _records(
            data.by_user, ("user_name", *GROUP_FIELDS, "top_job_id", "top_job_name", "top_job_waste_usd")
        ),
        "by_gpu_model": _records(data.by_gpu_model, ("gpu_model", *GROUP_FIELDS)),
        "costliest_jobs": _records(data.costliest_jobs, JOB_FIELDS),
        "trends": [
            {
                "family": t.family,
                "weeks": list(t.weeks),
                "usd_per_mtok": list(t.usd_per_mtok),
                "usd_per_epoch": list(t.usd_per_epoch),
                "jobs": list(t.jobs),
            }
            for t in data.trends
        ],
        "energy": {
            "energy_kwh": kwh,
            "co2e_kg": s.get("co2e_kg"),
            "energy_usd": None if kwh is None else kwh * data.settings.usd_per_kwh,
            "previous_energy_kwh": prev_kwh,
            "previous_co2e_kg": (data.previous or {}).get("co2e_kg"),
        },
        "budgets": [dict(b) for b in data.budgets],
        "notes": list(data.notes),
        "items": data.items,
        "definitions": dict(definitions(data.settings)),
    }
    if data.guard:  # the guard's line, only in a period where it took a step (analytics/guard_actions.py)
        out["guard"] = dict(data.guard)
    return _clean(out)


def render_json(data: ReportData) -> str:
    return json.dumps(report_dict(data), indent=2, allow_nan=False) + "\n"


def _cell(value: Any) -> Any:
    from gpuledger.reports.fmt import csv_cell

    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    return csv_cell(value)


def render_csv(data: ReportData) -> str:
    """One long table, one figure a row: section, name, figure, value, previous_value, unit."""
    d = report_dict(data)
    rows: list[tuple[Any, ...]] = []
    prev = d["previous"] or {}
    for k, v in d["headline"].items():
        if k not in ("filters", "waste", "as_of"):
            rows.append(("headline", "", k, v, prev.get(k), _unit(k)))
    for k, v in d["headline"]["waste"].items():
        rows.append(("waste", "", k, v, (prev.get("waste") or {}).get(k), "usd"))
    for section, key in (("team", "team"), ("user", "user_name"), ("gpu_model", "gpu_model")):
        for r in d[f"by_{section}" if section != "team" else "by_team"]:
            for f in GROUP_FIELDS:
                rows.append((section, r[key], f, r.get(f), None, "usd"))
    for i, a in enumerate(d["actions"]["top"], 1):
        for f in ("label", "owner", "usd_per_week", "confidence", "action", "evidence"):
            rows.append(("action", i, f, a.get(f), None, "usd/week" if f == "usd_per_week" else ""))
    for j in d["costliest_jobs"]:
        for f in JOB_FIELDS[1:]:
            rows.append(("job", j["job_id"], f, j.get(f), None, _unit(f)))
    for t in d["trends"]:
        for w, m, e in zip(t["weeks"], t["usd_per_mtok"], t["usd_per_epoch"], strict=True):
            rows.append(("trend", f"{t['family']} {w}", "usd_per_mtok", m, None, "usd"))
            rows.append(("trend", f"{t['family']} {w}", "usd_per_epoch", e, None, "usd"))
    for k, v in d["energy"].items():
        rows.append(("energy", "", k, v, None, _unit(k)))
    for n in d["notes"]:
        rows.append(("note", "", "text", n, None, ""))
    rows += _item_rows(d.get("items"))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["section", "name", "figure", "value", "previous_value", "unit"])
    for r in rows:
        w.writerow([_cell(c) for c in r])
    return buf.getvalue()


ITEM_CSV_FIELDS = (
    "key",
    "status",
    "team",
    "owner",
    "first_seen",
    "weeks_open",
    "cost_since_first_seen_usd",
    "predicted_usd_per_week",
    "measured_usd_per_week",
    "measured_weeks",
)


def _item_rows(items: dict[str, Any] | None) -> list[tuple[Any, ...]]:
    """The week's items (gpuledger/reports/items_section.py): section ``item_new``, ``item_still_open``,
    ``item_done``, named by item id; then the quarter's measured savings."""
    if not items:
        return []
    rows: list[tuple[Any, ...]] = []
    for group in ("new", "still_open", "done"):
        for it in items[group]:
            for f in ITEM_CSV_FIELDS:
                rows.append((f"item_{group}", it["id"], f, it.get(f), None, _unit(f)))
    rows.append(
        ("items", items["quarter"], "quarter_measured_usd", items["quarter_measured_usd"], None, "usd")
    )
    return rows


def _unit(key: str) -> str:
    for suffix, unit in (
        ("_usd", "usd"),
        ("_hours", "gpu_hours"),
        ("_pct", "%"),
        ("_kwh", "kWh"),
        ("_kg", "kg"),
    ):
        if key.endswith(suffix):
            return unit
    if "usd_per" in key:
        return "usd"
    return ""
