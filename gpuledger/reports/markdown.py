"""The report as Markdown (and as plain text, the mail's alternative part). In Markdown every string —
figures, labels and user strings alike — goes through :func:`gpuledger.reports.fmt.md_escape`, so a team
called ``[click](https://evil.example)`` or ``<script>`` renders as those characters, never a link or a tag."""

from __future__ import annotations

import textwrap

from gpuledger.reports.content import ReportData
from gpuledger.reports.fmt import md_escape
from gpuledger.reports.sections import Bar, Section, Table, as_of_text, footer, scope, sections


def _md_table(t: Table) -> list[str]:
    lines = ["| " + " | ".join(md_escape(h) for h in t.headers) + " |"]
    lines.append("|" + "|".join("---:" if i in t.numeric else "---" for i in range(len(t.headers))) + "|")
    lines += ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in t.rows]
    return lines


def _md_section(s: Section) -> list[str]:
    lines = [f"## {md_escape(s.title)}", ""]
    for p in s.paragraphs:
        lines += [md_escape(p), ""]
    if s.table is not None and s.table.rows:
        lines += [*_md_table(s.table), ""]
    if s.bullets:
        lines += [f"- {md_escape(b)}" for b in s.bullets] + [""]
    elif s.table is None or not s.table.rows:
        lines += [md_escape(s.empty), ""]
    return lines


def render_markdown(data: ReportData) -> str:
    """The whole report as GitHub-flavoured Markdown (tables; no HTML, no links)."""
    lines = [
        f"# {md_escape(data.title)}",
        "",
        md_escape(f"{scope(data)}. {as_of_text(data)}"),
        "",
    ]
    for s in sections(data):
        lines += _md_section(s)
    lines.append(md_escape(footer(data)))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- plain text

WIDTH = 100


def _text_blocks(t: Table) -> list[str]:
    """A table whose last column is prose, as one block per row: the short cells on a line, the prose
    wrapped under them."""
    out = []
    for r in t.rows:
        head = " · ".join(
            f"{h}: {c}" if i else c for i, (h, c) in enumerate(zip(t.headers[:-1], r[:-1], strict=True))
        )
        out.append(head)
        out += textwrap.wrap(r[-1], WIDTH, initial_indent="   ", subsequent_indent="   ")
    return out


def _text_table(t: Table) -> list[str]:
    """Columns padded to their widest cell; a long last column wraps under itself."""
    if len(t.headers) > 3 and max(len(r[-1]) for r in t.rows) > 60:
        return _text_blocks(t)
    cols = len(t.headers)
    rows = [t.headers, *t.rows]
    widths = [max(len(r[i]) for r in rows) for i in range(cols)]
    fixed = sum(widths[:-1]) + 2 * (cols - 1)
    last = min(widths[-1], max(24, WIDTH - fixed))
    out = []
    for n, r in enumerate(rows):
        cells = [r[i].rjust(widths[i]) if i in t.numeric else r[i].ljust(widths[i]) for i in range(cols - 1)]
        wrapped = textwrap.wrap(r[-1], last) or [""]
        tail = wrapped[0].rjust(last) if cols - 1 in t.numeric else wrapped[0]
        out.append("  ".join([*cells, tail]).rstrip())
        out += [(" " * (fixed if cols > 1 else 0) + w).rstrip() for w in wrapped[1:]]
        if n == 0:
            out.append("  ".join("-" * w for w in [*widths[:-1], min(widths[-1], last)]))
    return out


def _text_bars(bars: list[Bar]) -> list[str]:
    top = max((sum(v for v, _, _ in b.segments) for b in bars), default=0.0) or 1.0
    label_w = max(len(b.label) for b in bars)
    return [
        f"{b.label.rjust(label_w)}  {'#' * max(1, round(40 * sum(v for v, _, _ in b.segments) / top))} {b.text}"
        for b in bars
    ]


def render_text(data: ReportData) -> str:
    """The report as plain text: the mail's text/plain alternative (same content, no markup)."""
    lines = [
        data.title,
        "=" * len(data.title),
        "",
        f"{scope(data)}. {as_of_text(data)}",
        "",
    ]
    for s in sections(data):
        lines += [s.title, "-" * len(s.title)]
        lines += [line for p in s.paragraphs for line in textwrap.wrap(p, WIDTH)]
        if s.bars and len(s.bars) > 1:
            lines += _text_bars(s.bars)
        if s.table is not None and s.table.rows:
            lines += _text_table(s.table)
        if s.bullets:
            lines += [
                line
                for b in s.bullets
                for line in textwrap.wrap(b, WIDTH, initial_indent="- ", subsequent_indent="  ")
            ]
        elif s.table is None or not s.table.rows:
            lines.append(s.empty)
        lines.append("")
    lines += textwrap.wrap(footer(data), WIDTH)
    return "\n".join(lines) + "\n"
