"""Small display helpers the pages share: number formats (n/a for unknown, never 0) and the empty state."""

from __future__ import annotations

from typing import NoReturn

import streamlit as st

NA = "n/a"
# Five KPI cards; money with cents needs room ("$1,234,567.89"), so the first and last are wider.
KPI_WIDTHS = [1.45, 1.1, 1.0, 1.15, 1.3]


def usd(value: float | None, *, cents: bool = True) -> str:
    """``$12,345.67`` (or ``$12,346`` without cents); ``n/a`` for unknown."""
    if value is None:
        return NA
    if abs(value) < 0.005:
        value = 0.0  # no "$-0.00" from float noise
    return f"${value:,.2f}" if cents else f"${value:,.0f}"


def pct(value: float | None, digits: int = 1) -> str:
    return NA if value is None else f"{value:.{digits}f} %"


def num(value: float | None, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return NA
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}".rstrip()


def empty_state(what: str = "the ledger") -> None:
    """Tell the user how to load data, instead of drawing empty charts."""
    st.info(
        f"No data in {what} yet. Load the demo fleet with `gpuledger demo`, or your own files with "
        "`gpuledger ingest FILE` (nvidia-smi CSV, dcgm-exporter scrapes, Slurm sacct, job tables, training "
        "logs), then reload this page. You can also try one file on the Upload page.",
        icon=":material/info:",
    )
    st.page_link("pages/upload.py", label="Analyse one file now", icon=":material/upload_file:")


def no_rows(message: str) -> None:
    """An empty result for the current filters: say so and what to change."""
    st.info(f"{message} Widen the date range or clear the team/cluster filters in the sidebar.")


def not_ready(exc: Exception) -> NoReturn:
    """An analysis this install lacks: say which, and stop the page (other pages still work)."""
    st.warning(f"This view is not available: {exc}.", icon=":material/construction:")
    st.stop()
    raise AssertionError("st.stop() returned")


def column_config(columns: list[str]) -> dict[str, object]:
    """Display formats chosen by the unit in a column's name: ``_usd`` dollars, ``_pct`` percent, hours."""
    config: dict[str, object] = {}
    for c in columns:
        if c.endswith("_usd") or c.startswith("usd_"):
            config[c] = st.column_config.NumberColumn(c, format="dollar")
        elif c.endswith("_pct"):
            config[c] = st.column_config.NumberColumn(c, format="%.1f %%")
        elif c.endswith(("_hours", "_h")) or c == "hours":
            config[c] = st.column_config.NumberColumn(c, format="%.2f")
    return config
