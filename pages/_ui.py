"""Small display helpers the pages share: number formats (n/a for unknown, never 0) and the empty state."""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import plotly.graph_objects as go
import polars as pl
import streamlit as st

from analytics.money import usd as money_usd

NA = "n/a"
# Five KPI cards; money with cents needs room ("$1,234,567.89"), so the first and last are wider.
KPI_WIDTHS = [1.45, 1.1, 1.0, 1.15, 1.3]


_ROUTER = threading.local()  # each session's script run has its own thread


@contextmanager
def routed() -> Iterator[None]:
    """app.py runs the chosen page inside this, so the page knows the router (and its sidebar) ran."""
    _ROUTER.on = True
    try:
        yield
    finally:
        _ROUTER.on = False


def require_router() -> None:
    """Rerun through app.py when Streamlit ran this page file on its own.

    Until the first ``st.navigation`` call in a server process, Streamlit treats a ``pages/`` folder next to
    the main script as its old directory-based navigation: if the first request after start is a deep link
    (``/fleet?team=nlp``, a shared URL), it runs pages/fleet.py *without* app.py, so the page has no sidebar
    filters (it would show the unfiltered view), the menu lists every module, and the server stays in that
    mode until someone opens the root URL. This switches the server to app.py's navigation (what
    ``st.navigation`` itself does) and reruns: the same URL path then resolves to the same page, routed
    and filtered. Only once per session: streamlit.testing's AppTest runs every page that way and resets
    the switch before each run, and must not loop.
    """
    if getattr(_ROUTER, "on", False) or st.session_state.get("_gpuledger_rerouted"):
        return
    # private API, guarded by tests/test_streamlit_private_api.py (fails when an upgrade changes it)
    from streamlit.runtime.pages_manager import PagesManager

    st.session_state["_gpuledger_rerouted"] = True
    PagesManager.uses_pages_directory = False
    st.rerun()


def usd(value: float | None, *, cents: bool = True) -> str:
    """``$12,345.67`` (or ``$12,346`` without cents), ``−$3.20`` for a negative amount; ``n/a`` for unknown
    (the one money format of pages, CLI and reports: analytics.money.usd)."""
    return money_usd(value, 2 if cents else 0, na=NA)


def saves(usd_per_week: float | None, saving_usd: float | None) -> str:
    """What an action saves, one text for one number on every page (Recommendations, a job's page, the
    Overview): ``$215.60/week`` for a recurring item, ``$1,506.96 once`` for a one-off (what it would have
    saved, a one-time $, never per week)."""
    if usd_per_week is not None:
        return f"{usd(usd_per_week)}/week"
    return f"{usd(saving_usd)} once"


def _unsigned_zero(value: float, digits: int) -> float:
    """0.0 for a value that rounds to zero at ``digits`` (no "-0.0" from float noise)."""
    return 0.0 if round(value, digits) == 0 else value


def pct(value: float | None, digits: int = 1) -> str:
    """The one percent format: ``12.3 %``; ``n/a`` for unknown."""
    return NA if value is None else f"{_unsigned_zero(value, digits):.{digits}f} %"


def na(reason: str) -> str:
    """``n/a (reason)``: an unknown figure with why it is unknown."""
    return f"{NA} ({reason})"


def num(value: float | None, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return NA
    text = f"{_unsigned_zero(value, digits):,.{digits}f}"
    return f"{text} {unit}".rstrip()


def delta(now: float | None, before: float | None, kind: str = "usd") -> str | None:
    """The change vs the previous period for ``st.metric(delta=...)``: ``+$1,234.56 (+12.3 %)``,
    ``+4.2 pts`` for percentages (``kind="pct"``), ``+12.0`` for counts; None when either figure is unknown
    (the caller says why). The percentage is left out when the previous figure is 0."""
    if now is None or before is None:
        return None
    diff = now - before
    if kind == "pct":
        d = _unsigned_zero(diff, 1)
        return f"{d:+.1f} pts"
    if kind == "usd":
        d = 0.0 if abs(diff) < 0.005 else diff
        text = f"{'-' if d < 0 else '+'}${abs(d):,.2f}"
    else:
        d = _unsigned_zero(diff, 1)
        text = f"{d:+,.1f}"
    if abs(before) >= 0.005:
        text += f" ({_unsigned_zero(100.0 * diff / abs(before), 1):+,.1f} %)"
    return text


DIAGNOSIS_LABELS = {
    "busy_but_unproductive": "Busy but unproductive",
    "input_bound": "Waiting on input (data loading)",
    "poor_scaling": "Scales poorly across GPUs",
    "throttling": "Thermal or power throttling",
    "idle_gpus": "Half or more of its GPUs idle",
    "oversized_gpu": "GPU bigger than needed",
}


def diagnosis_label(code: str) -> str:
    """A diagnosis code in words (analytics/diagnoses.py's codes)."""
    return DIAGNOSIS_LABELS.get(code, code.replace("_", " ").capitalize())


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


def open_group(keys: pl.Series, by: str, key: str, label: str) -> tuple[str, str | None] | None:
    """A select box of a grouped chart's groups (``keys``: host or cluster names, None for GPUs whose
    ledger names none, shown as "unknown host"); the one picked as (its label, its key)."""
    unknown = f"unknown {by}"
    names = keys.unique().to_list()
    choices = sorted(k for k in names if k is not None) + ([unknown] if None in names else [])
    pick = st.selectbox(label, choices, index=None, key=key, placeholder=f"choose a {by}")
    return None if pick is None else (pick, None if pick == unknown else pick)


def pooled_name(name: pl.Expr, what: str) -> pl.Expr:
    """A chart row's or line's name: ``name``, or "N other {what}s" on the one that pools the rest
    (``others`` > 0: analytics.timeline's charts past their readable number of rows or lines)."""
    return (
        pl.when(pl.col("others") > 0).then(pl.format(f"{{}} other {what}s", pl.col("others"))).otherwise(name)
    )


def label(column: str) -> str:
    """A column name as a header a person reads: units spelled out, e.g. ``cost_usd`` → "cost ($)",
    ``usd_per_mtok`` → "$ per 1M tokens", ``mean_util_pct`` → "mean util (%)", ``peak_mem_mib`` →
    "peak mem (MiB)", ``gpu_hours`` → "GPU-hours"."""
    special = {
        "gpu_hours": "GPU-hours",
        "gpu_count": "GPUs",
        "user_name": "user",
        "job_id": "job",
        "usd_per_mtok": "$ per 1M tokens",
        "knee_batch_size": "gentler batch (90 % of the gain)",
        "usd_per_mtok_generated": "$ per 1M generated tokens",
        "usd_per_krequests": "$ per 1k requests",
        "usd_per_ksamples": "$ per 1k samples",
        "usd_per_epoch": "$ per epoch",
        "usd_per_week": "$ / week",
        "tokens_per_s_per_gpu": "tokens/s per GPU",
        "mfu": "MFU",
        "mfu_basis": "MFU basis",
        "mfu_reason": "why no MFU",
        "unit_cost_reason": "why no $ per token",
        "lr_rule": "learning-rate rule",
        "card_mem_mib": "card memory (MiB)",
        "predicted_peak_mem_mib": "predicted peak memory (MiB)",
        "key": "",
        "team_waste_usd": "waste teams control ($)",
        "top_job_id": "costliest wasteful job",
        "top_job_name": "its name",
        "top_job_waste_usd": "its waste ($)",
    }
    if column in special:
        return special[column]
    for suffix, unit in (
        ("_usd", "$"),
        ("_pct", "%"),
        ("_mib", "MiB"),
        ("_hours", "h"),
        ("_h", "h"),
        ("_kwh", "kWh"),
    ):
        if column.endswith(suffix):
            base = column.removesuffix(suffix).replace("_", " ").replace("gpu", "GPU")
            return f"{base} ({unit})"
    return column.replace("_", " ").replace("gpu", "GPU")


def column_config(columns: list[str]) -> dict[str, object]:
    """Display formats and headers chosen by the unit in a column's name: ``_usd`` dollars, ``_pct``
    percent, ``_mib`` whole MiB, hours with two decimals, shares (0–1) as percent."""
    config: dict[str, object] = {}
    for c in columns:
        name = label(c) or c
        if c.endswith("_usd") or c.startswith("usd_"):
            config[c] = st.column_config.NumberColumn(name, format="dollar")
        elif c.endswith("_pct"):
            config[c] = st.column_config.NumberColumn(name, format="%.1f %%")
        elif c.endswith("_mib"):
            config[c] = st.column_config.NumberColumn(name, format="%,.0f")
        elif c.endswith(("_hours", "_h")) or c == "hours":
            config[c] = st.column_config.NumberColumn(name, format="%,.2f")
        elif c.endswith(("_share", "_frac")) or c == "mfu":
            config[c] = st.column_config.NumberColumn(name, format="percent")
        elif c.endswith("_ts"):
            config[c] = st.column_config.DatetimeColumn(name, format="YYYY-MM-DD HH:mm")
        else:
            config[c] = st.column_config.Column(name)
    return config


def _text(column: str, value: object) -> str:
    """One cell as :func:`column_config` would draw it, ``n/a`` for unknown."""
    if value is None or (isinstance(value, float) and value != value):
        return NA
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if column.endswith("_usd") or column.startswith("usd_"):
        return usd(value)
    if column.endswith("_pct"):
        return pct(value)
    if column.endswith(("_share", "_frac")) or column == "mfu":
        return pct(100.0 * value)
    if column.endswith("_mib"):
        return num(value, 0)
    if column.endswith(("_hours", "_h")) or column == "hours":
        return num(value, 2)
    if column.startswith(("tokens", "samples")):  # counts and rates of tokens: whole numbers
        return num(value, 0)
    return num(value, 0) if float(value).is_integer() else num(value, 2)


def shown(frame: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, object]]:
    """``frame`` ready for ``st.dataframe`` and its column config: a column with unknown (null) cells
    becomes text in its unit's format with ``n/a`` in those cells (the grid would print "None"); the other
    columns stay numbers (sortable) with :func:`column_config`'s formats."""
    config = column_config(frame.columns)
    out = []
    for name in frame.columns:
        col = frame[name]
        numeric = col.dtype.is_numeric()
        share = name.endswith(("_share", "_frac")) or name == "mfu"  # one percent format: "12.3 %"
        if numeric and (share or col.null_count() or (col.dtype.is_float() and col.is_nan().any())):
            out.append(pl.Series(name, [_text(name, v) for v in col.to_list()], dtype=pl.String))
            config[name] = st.column_config.TextColumn(label(name) or name)
        elif col.null_count() and col.dtype == pl.String:
            out.append(col.fill_null(NA))
        else:
            if numeric and "type_config" not in config[name]:
                # a count or other plain number: thousands separators (1,234 steps, 27,877 MiB)
                config[name] = st.column_config.NumberColumn(label(name) or name, format="localized")
            out.append(col)
    return pl.DataFrame(out), config


def dataframe(frame: pl.DataFrame, overrides: dict[str, object] | None = None, **kwargs: Any) -> Any:
    """``st.dataframe`` of :func:`shown` ``(frame)``: unit formats, ``n/a`` for unknown, human headers.
    ``overrides``: column configs for columns that stay numbers (a text column keeps its text config)."""
    data, config = shown(frame)
    for name, cfg in (overrides or {}).items():
        if name in data.columns and (data[name].dtype != pl.String or frame[name].dtype == pl.String):
            config[name] = cfg
    kwargs.setdefault("hide_index", True)
    return st.dataframe(data, column_config=config, **kwargs)


# ---------------------------------------------------------------- user strings and downloads, made safe

# Every ASCII punctuation character CommonMark lets a backslash escape: with all of them escaped, a team,
# user, job or file name can open no link, image, emphasis, HTML tag, code span, colour directive
# (``:red[...]``), icon (``:material/...:``), LaTeX ``$`` or autolink (``https://...``, ``a@b.c``).
_MD_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
WORD_JOINER = "\u2060"  # zero width, no line break: breaks an autolink without changing what one reads
_AUTOLINK = re.compile(r"@|:(?=//)|\bwww(?=\.)", re.IGNORECASE)
FORMULA_START = (
    "=",
    "+",
    "-",
    "@",
    "\t",
    "\r",
)  # what a spreadsheet reads as a formula (OWASP CSV injection)


def md(value: object) -> str:
    """A user-supplied string (team, user, job or file name, evidence text that quotes them) to put inside
    ``st.markdown`` / ``st.caption`` / ``st.info`` … text: shown literally, never as Markdown or HTML.

    Line breaks become spaces (a name cannot start a heading or a list). Backslash escapes are not enough
    for GitHub-style autolinks (Streamlit links ``https://…``, ``www.…`` and ``a@b.c`` found in the text
    *after* escapes are resolved), so an invisible word joiner (U+2060) goes after ``@``, inside ``://``
    and after ``www`` before a dot. Not for code spans (backslashes show there): use :func:`code` for
    those. ``None`` shows as ``n/a``."""
    if value is None:
        return NA
    text = " ".join(str(value).splitlines())
    text = _AUTOLINK.sub(lambda m: m.group(0) + WORD_JOINER, text)
    return "".join("\\" + c if c in _MD_PUNCT else c for c in text)


def code(value: object) -> str:
    """``value`` as one inline code span that no backtick inside it can close early."""
    text = " ".join(str(value).splitlines())
    longest = run = 0
    for c in text:
        run = run + 1 if c == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def csv_safe(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with every text cell that starts with ``= + - @``, a tab or a carriage return prefixed by
    ``'``, so a spreadsheet shows it as text instead of running it as a formula. Numbers stay numbers (a
    negative cost is not text); nested columns (lists, structs) become text first."""
    out = []
    for name, dtype in frame.schema.items():
        col = pl.col(name)
        if isinstance(dtype, pl.List | pl.Array):
            col = col.cast(pl.List(pl.String)).list.join(", ")
        elif isinstance(dtype, pl.Struct):
            col = col.struct.json_encode()
        elif not (dtype == pl.String or dtype == pl.Categorical or isinstance(dtype, pl.Enum)):
            out.append(col)
            continue
        col = col.cast(pl.String)
        risky = pl.lit(False)
        for start in FORMULA_START:
            risky = risky | col.str.starts_with(start)
        out.append(pl.when(risky).then(pl.lit("'") + col).otherwise(col).alias(name))
    return frame.select(out)


def csv_bytes(frame: pl.DataFrame) -> bytes:
    """UTF-8 CSV (with a byte-order mark, so spreadsheets read accents right) of :func:`csv_safe` ``(frame)``."""
    return "\ufeff".encode() + csv_safe(frame).write_csv().encode("utf-8")


def download_csv(frame: pl.DataFrame, file_name: str, *, key: str, label: str = "Download CSV") -> None:
    """A download button for the table as CSV, formulas neutralized (:func:`csv_safe`). Streamlit's own table
    export is switched off (``client.disableDataExport``) because it writes cells as they are."""
    st.download_button(
        label,
        data=csv_bytes(frame),
        file_name=file_name,
        mime="text/csv",
        icon=":material/download:",
        key=key,
    )


# Plotly reads <a href>, <b>, <i>, <br>, <span style> in every label (trace names, categories, hover text)
# and draws them, links included; it also decodes &lt; &gt; &amp; for display. So each text value a chart
# shows is HTML-escaped: "<a href=…>" is drawn as typed.
_PLOT_TEXT = ("x", "y", "z", "text", "hovertext", "labels", "customdata", "ids")


def _escaped(value: object) -> object:
    if isinstance(value, str):
        return html.escape(value, quote=False)
    if isinstance(value, np.ndarray) and value.dtype.kind in "OUS":
        return np.vectorize(_escaped, otypes=[object])(value) if value.size else value
    if isinstance(value, list | tuple):
        return type(value)(_escaped(v) for v in value)
    return value


def safe_figure(fig: Any) -> Any:
    """The figure with every user string it draws (team, user, job, GPU and host names) HTML-escaped: the
    traces' values and names, and the axes' category lists."""
    for trace in fig.data:
        if isinstance(trace.name, str):
            trace.name = html.escape(trace.name, quote=False)
        for attr in _PLOT_TEXT:
            value = getattr(trace, attr, None) if attr in trace else None
            if value is not None:
                setattr(trace, attr, _escaped(value))
    # an axis' own list of categories is drawn as its tick labels, so it holds the same names
    fig.for_each_xaxis(_escape_categories)
    fig.for_each_yaxis(_escape_categories)
    return fig


def _escape_categories(axis: Any) -> None:
    if axis.categoryarray is not None:
        axis.categoryarray = _escaped(axis.categoryarray)


def stacked_bars(
    frame: pl.DataFrame,
    *,
    x: str,
    y: str,
    by: str,
    colours: dict[str, str],
    order: list[str] | None = None,
    horizontal: bool = False,
    titles: tuple[str, str, str] = ("", "", ""),
) -> go.Figure:
    """Stacked bars, one trace per value of ``by`` (in ``order``, else as they first appear) coloured by
    ``colours``, with axis and legend titles ``titles`` (x, y, legend): what ``plotly.express.bar(color=…)``
    draws, built directly. Express spent ~50 ms a figure preparing its data (measured on the Overview's two
    charts, warm); this takes ~10 ms. A categorical axis is ordered as the values first appear in ``frame``."""
    fig = go.Figure()
    names = order if order is not None else frame[by].unique(maintain_order=True).to_list()
    for name in names:
        part = frame.filter(pl.col(by) == name)
        if part.is_empty():
            continue
        fig.add_trace(
            go.Bar(
                x=part[x].to_list(),
                y=part[y].to_list(),
                name=name,
                legendgroup=name,
                marker_color=colours.get(name),
                orientation="h" if horizontal else "v",
            )
        )
    category = x if not horizontal else y
    axis = {"categoryorder": "array", "categoryarray": frame[category].unique(maintain_order=True).to_list()}
    fig.update_layout(
        barmode="stack",
        legend_title_text=titles[2],
        xaxis={"title": {"text": titles[0]}, **(axis if not horizontal else {})},
        yaxis={"title": {"text": titles[1]}, **(axis if horizontal else {})},
    )
    return fig


def plotly_chart(fig: Any, *, key: str) -> None:
    """``st.plotly_chart`` of :func:`safe_figure` ``(fig)``: what every page uses to draw a chart."""
    st.plotly_chart(safe_figure(fig), key=key)
