"""Settings: the prices in force (with source and date), the thresholds and the clusters, and edits to them.

An edit is checked exactly as every command checks the file (gpuledger.ledger.settings.from_dict, then the
price rows against the GPU catalog): a bad value shows the CLI's own message and nothing is written. A good
one is written into the settings file in use (gpuledger.ledger.paths.choose_settings; with none, the user's
~/.config/gpuledger/settings.toml), keeping the file's other lines and comments, and every page uses it from
the next click: the figures' caches are keyed on the settings' fingerprint.

With sign-in on (``[auth]``) only an admin may write (gpuledger.ledger.access.may_change_settings): anyone
else sees the settings in force, read-only, and never the server's file path.
"""

from __future__ import annotations

import datetime as dt
import tomllib
from collections.abc import Callable
from pathlib import Path

import polars as pl
import streamlit as st

from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.reference import catalog, effective_prices
from gpuledger.ledger.settings import BILLING, TIERS, Settings, from_dict
from gpuledger.ledger.settings_edit import add_price, set_key
from pages import _data, _scope, _ui
from pages._ui import code, column_config, md

# (toml section, key, Settings field, what it means, step)
THRESHOLDS = [
    ("thresholds", "idle_util_pct", "idle_util_pct", "a GPU at or under this utilization is idle (%)", 1.0),
    (
        "thresholds",
        "idle_min_minutes",
        "idle_min_minutes",
        "an idle stretch counts from this long (min)",
        5.0,
    ),
    (
        "thresholds",
        "target_util_pct",
        "target_util_pct",
        "held time under this utilization is under-used (%)",
        5.0,
    ),
    (
        "thresholds",
        "notebook_idle_stop_minutes",
        "notebook_idle_stop_minutes",
        "stop an idle notebook after (min)",
        5.0,
    ),
    (
        "thresholds",
        "capacity_gap_minutes",
        "capacity_gap_minutes",
        "telemetry silence that ends capacity (min)",
        5.0,
    ),
    ("thresholds", "max_job_days", "max_job_days", "a longer job is implausible (days)", 1.0),
    ("energy", "usd_per_kwh", "usd_per_kwh", "electricity price ($/kWh)", 0.01),
    ("energy", "gco2e_per_kwh", "gco2e_per_kwh", "grid intensity (gCO2e/kWh)", 10.0),
    (
        "recommend",
        "batch_safety_fraction",
        "batch_safety_fraction",
        "share of GPU memory a batch may use",
        0.05,
    ),
]

# Each threshold's field label, in words (the file's key is in its help)
LABELS = {
    "idle_util_pct": "Idle below (% utilization)",
    "idle_min_minutes": "Idle stretch from (minutes)",
    "target_util_pct": "Under-used below (% utilization)",
    "notebook_idle_stop_minutes": "Stop idle notebooks after (minutes)",
    "capacity_gap_minutes": "Telemetry gap that ends capacity (minutes)",
    "max_job_days": "Longest plausible job (days)",
    "usd_per_kwh": "Electricity price ($ per kWh)",
    "gco2e_per_kwh": "Grid carbon intensity (gCO2e per kWh)",
    "batch_safety_fraction": "GPU memory a batch may use (share)",
}


def check(text: str, path: Path) -> Settings:
    """The settings ``text`` would give, checked as every command checks them; LedgerError when not."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LedgerError(f"{path}: setting '(syntax)': {exc}") from None
    s = from_dict(data, path)
    effective_prices(s)  # user price rows must name catalog models
    return s


def save(path: Path, edit: Callable[[], str], what: str) -> None:
    """Make the edit (gpuledger.ledger.settings_edit), check it, then write, then say so on the next run (the
    page reruns to show the new values); an edit that cannot keep the file's other settings writes nothing."""
    if not _scope.may_write():  # the forms are not drawn for them; this holds even if one were submitted
        st.session_state["settings_error"] = "error: only an admin may change the settings"
        return
    try:
        text = edit()
    except LedgerError as exc:
        st.session_state["settings_error"] = f"error: {path}: {exc}"
        return
    try:
        check(text, path)
    except LedgerError as exc:
        st.session_state["settings_error"] = f"error: {exc}"
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    st.session_state["settings_saved"] = what
    st.session_state.pop("settings_error", None)


_ui.require_router()
st.title("Settings")
file_name, origin = _scope.settings_file()
path = Path(file_name)
current = path.read_text(encoding="utf-8") if path.is_file() else ""
s = _scope.settings()
writable = _scope.may_write()
if writable:
    st.caption(
        f"Settings file in use: {code(file_name)} ({md(origin)}). Edits below are checked as `gpuledger` checks "
        "the file, written there, and used by every page and command from then on (docs/settings.md)."
    )
else:
    st.info(
        "The settings in force, read-only: only an admin ([access] admins) may change them.",
        icon=":material/lock:",
    )
if msg := st.session_state.pop("settings_saved", None):
    st.success(
        f"Saved to {code(file_name)}: {md(msg)}. Every page now uses it.", icon=":material/check_circle:"
    )
if err := st.session_state.pop("settings_error", None):
    st.error(f"{md(err)}\n\nNothing was written. Change the value and save again.", icon=":material/error:")

# ---------------------------------------------------------------- prices
st.subheader("Prices in force")
try:
    effective_prices(s)  # the settings' rows must name catalog models
    prices = list(_data.prices_in_force().rows)
except LedgerError as exc:
    shown = str(exc) if writable else "the settings file's price rows cannot be read"  # no server path
    st.error(f"{md(shown)}\n\nFix the price rows in the settings file.", icon=":material/error:")
    prices = []
ORIGINS = {
    "settings": "your settings",
    "sheet": "shipped price sheet",
    "ingest": "declared by an ingested file",
}
table = pl.DataFrame(
    {
        "gpu_model": [r.gpu_model for r in prices],
        "tier": [r.tier for r in prices],
        "cluster": [r.cluster or "every cluster" for r in prices],
        "usd_per_gpu_hour": [r.usd_per_gpu_hour for r in prices],
        "effective_from": [r.effective_from for r in prices],
        "from": [ORIGINS.get(r.origin, r.origin) for r in prices],
        "source": [r.source for r in prices],
        "source_date": [r.source_date for r in prices],
    },
    schema_overrides={"effective_from": pl.Date, "source_date": pl.Date, "usd_per_gpu_hour": pl.Float64},
).sort("gpu_model", "tier", "cluster", "effective_from")
cfg = column_config(table.columns) | {
    "usd_per_gpu_hour": st.column_config.NumberColumn("$ per GPU-hour", format="dollar"),
    "source": st.column_config.TextColumn("source", width="large"),
    "effective_from": st.column_config.DateColumn("in force from", format="YYYY-MM-DD"),
    "source_date": st.column_config.DateColumn("source date", format="YYYY-MM-DD"),
}
st.dataframe(table, hide_index=True, column_config=cfg, height=300)
st.caption(
    "A row is in force from its date until the next row of the same model, tier and cluster; a cluster's own "
    "rows replace the every-cluster ones there. Your rows replace the shipped row (or a file's) of the same model, "
    f"tier, cluster and date. Jobs without a tier use {code(s.default_tier)}."
)
if writable:  # only for those who may write
    with st.form("add_price", border=True):
        st.markdown("**Add or replace a price**")
        c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
        models = sorted(m.model for m in catalog())
        model = c1.selectbox("GPU model", models, key="price_model")
        tier = c2.selectbox("Tier", TIERS, key="price_tier")
        usd = c3.number_input(
            "$ per GPU-hour", min_value=0.0, value=1.0, step=0.01, format="%.2f", key="price_usd"
        )
        since = c4.date_input("In force from", value=dt.date.today(), key="price_from", format="YYYY-MM-DD")
        c5, c6 = st.columns([3, 1])
        source = c5.text_input(
            "Source (where the price comes from)", key="price_source", placeholder="e.g. our contract"
        )
        cluster = c6.text_input("Cluster (empty: every cluster)", key="price_cluster")
        if st.form_submit_button("Save price", icon=":material/save:"):
            row = {
                "gpu_model": model,
                "tier": tier,
                "usd_per_gpu_hour": float(usd),
                "effective_from": since,
                "source": source.strip() or "entered on the Settings page",
                "source_date": dt.date.today(),
                "cluster": cluster.strip() or None,
            }
            save(path, lambda: add_price(current, row), f"{model} {tier} ${usd:,.2f}/GPU-h from {since}")
            st.rerun()

# ---------------------------------------------------------------- thresholds
st.subheader("Thresholds")
if writable:  # only for those who may write
    with st.form("thresholds", border=True):
        cols = st.columns(3)
        values: dict[tuple[str, str], float] = {}
        for i, (section, key, fld, meaning, step) in enumerate(THRESHOLDS):
            values[(section, key)] = cols[i % 3].number_input(
                LABELS.get(key, key.replace("_", " ")),
                value=float(getattr(s, fld)),
                step=step,
                help=f"{meaning.capitalize()}. In the file: {code(f'{section}.{key}')}.",
                key=f"set_{section}_{key}",
                format="%.2f" if step < 1 else "%.1f",
            )
        if st.form_submit_button("Save thresholds", icon=":material/save:"):
            edits = [
                (section, key, float(value), f"{section}.{key} {getattr(s, fld):g} → {value:g}")
                for (section, key, fld, _, _), value in zip(THRESHOLDS, values.values(), strict=True)
                if abs(float(value) - float(getattr(s, fld))) > 1e-9
            ]

            def edit_thresholds() -> str:
                text = current
                for section, key, value, _ in edits:
                    text = set_key(text, (section,), key, value)
                return text

            if edits:
                save(path, edit_thresholds, "; ".join(e[3] for e in edits))
            else:
                st.session_state.pop("settings_error", None)
            st.rerun()
else:
    st.dataframe(
        pl.DataFrame(
            {
                "setting": [LABELS.get(key, key.replace("_", " ")) for _, key, _, _, _ in THRESHOLDS],
                "key": [f"{sec}.{key}" for sec, key, _, _, _ in THRESHOLDS],
                "value": [float(getattr(s, fld)) for _, _, fld, _, _ in THRESHOLDS],
                "meaning": [meaning for _, _, _, meaning, _ in THRESHOLDS],
            }
        ),
        hide_index=True,
    )
st.caption("Hover a field's ? for what it means and its key in the settings file.")

# ---------------------------------------------------------------- clusters
st.subheader("Clusters")
names = sorted(set(s.clusters) | set(_data.filter_choices().clusters))
rows = []
for name in names:
    c = s.clusters.get(name)
    rows.append(
        {
            "cluster": name,
            "tier": (c.tier if c and c.tier else f"{s.default_tier} (the default)"),
            "billing": (c.billing if c else "always_on"),
            "declared_capacity": (
                ", ".join(f"{cap.gpu_count:g} × {cap.gpu_model}" for cap in c.capacity)
                if c and c.capacity
                else "none declared: observed GPUs count"
            ),
        }
    )
if rows:
    st.dataframe(pl.DataFrame(rows), hide_index=True, column_config=column_config(list(rows[0])))
st.caption(
    "billing always_on: capacity nobody holds is paid for (unallocated waste); per_job: it is not (cloud jobs "
    "billed by the job). Declared capacity is set in the file ([clusters.NAME] capacity, docs/settings.md)."
)
if names and writable:  # only for those who may write
    with st.form("cluster", border=True):
        st.markdown("**Change a cluster's tier or billing**")
        c1, c2, c3 = st.columns(3)
        name = c1.selectbox("Cluster", names, key="cluster_name")
        old = s.clusters.get(name)
        new_tier = c2.selectbox(
            "Tier", TIERS, index=TIERS.index(old.tier) if old and old.tier else 0, key="cluster_tier"
        )
        new_billing = c3.selectbox(
            "Billing", BILLING, index=BILLING.index(old.billing) if old else 0, key="cluster_billing"
        )
        if st.form_submit_button("Save cluster", icon=":material/save:"):
            section = ("clusters", name)
            save(
                path,
                lambda: set_key(set_key(current, section, "tier", new_tier), section, "billing", new_billing),
                f"cluster {name}: tier {new_tier}, billing {new_billing}",
            )
            st.rerun()
