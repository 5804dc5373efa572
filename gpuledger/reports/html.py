"""The report as HTML that survives mail clients: every style inline on its element (Gmail and Outlook drop
``<style>`` blocks and SVG), charts drawn as table cells with a background colour and a width, no scripts,
no images, no external resources. Every string is HTML-escaped."""

from __future__ import annotations

import re
from html import escape

from gpuledger.reports.content import ReportData
from gpuledger.reports.sections import Bar, Section, Table, as_of_text, footer, scope, sections

FONT = "font-family:Segoe UI,Helvetica,Arial,sans-serif;"
TEXT = "#1d2330"
MUTED = "#5b6375"
BORDER = "#e1e5ee"
# Each table sits in its own horizontal scroll box: on a phone (390 px) a table wider than the screen scrolls
# inside the box instead of pushing the page sideways, and money cells never wrap (white-space:nowrap), so a
# figure is never broken mid-number. Inline, as mail clients drop <style> blocks.
SCROLL = "overflow-x:auto;-webkit-overflow-scrolling:touch;max-width:100%;margin:6px 0 4px 0"
# text cells may break a token longer than the cell (a GPU UUID) rather than widen the table
TEXT_CELL = "overflow-wrap:break-word;"
PROSE_CHARS = 60  # a cell longer than this is prose (_stacked)
# the page: as wide as the screen up to 960 px; table-layout:fixed makes the layout cell as wide as the screen,
# not as wide as its widest table (an auto-layout cell grows to its content's width, scroll box or not)
PAGE = "width:100%;max-width:960px;table-layout:fixed"


def _figure(text: str) -> str:
    """A figure cell's text, escaped, each of its parts unbreakable: "$16,237.66 (39.8 % of spend)" may wrap
    before "(" and before a word ("of", "once"), never inside a number or between a number and its unit."""
    parts = re.split(r" (?=[(A-Za-z])", text)
    return " ".join(f'<span style="white-space:nowrap">{escape(p)}</span>' for p in parts)


def _stacked(t: Table) -> bool:
    """True when the table's last column is prose (an action and its evidence) next to three or more short
    columns: it is then drawn as a full-width line under each row, so on a phone the row's figures fit the
    screen and the prose wraps at the screen's width instead of in a column a few words wide."""
    last = len(t.headers) - 1
    return last >= 3 and last not in t.numeric and any(len(r[last]) > PROSE_CHARS for r in t.rows)


def _table(t: Table) -> str:
    th = (
        f"padding:6px 5px;border-bottom:2px solid {BORDER};background:#f4f6fa;{FONT}font-size:13px;"
        f"color:{TEXT};"
    )
    stacked = _stacked(t)
    width = len(t.headers) - 1 if stacked else len(t.headers)
    head = "".join(
        f'<th align="{"right" if i in t.numeric else "left"}" style="{th}text-align:{"right" if i in t.numeric else "left"}'
        '">'
        f"{escape(h)}</th>"
        for i, h in enumerate(t.headers[:width])
    )
    if stacked:  # the prose column's header as a line of its own under the others
        head += f'</tr><tr><th colspan="{width}" align="left" style="{th}text-align:left;font-weight:normal">'
        head += f"{escape(t.headers[-1])}</th>"
    body = []
    for row in t.rows:
        cells = []
        for i, c in enumerate(row[:width]):
            right = i in t.numeric
            line = "none" if stacked else f"1px solid {BORDER}"
            style = (
                f"padding:5px 5px;border-bottom:{line};{FONT}font-size:13px;color:{TEXT};"
                f"vertical-align:top;text-align:{'right' if right else 'left'};"
                + ("" if right else TEXT_CELL)
            )
            cells.append(
                f'<td align="{"right" if right else "left"}" valign="top" style="{style}">'
                f"{_figure(c) if right else escape(c)}</td>"
            )
        body.append("<tr>" + "".join(cells) + "</tr>")
        if stacked:
            style = (
                f"padding:0 5px 8px 5px;border-bottom:1px solid {BORDER};{FONT}font-size:13px;color:{TEXT};"
                f"text-align:left;{TEXT_CELL}"
            )
            body.append(f'<tr><td colspan="{width}" align="left" style="{style}">{escape(row[-1])}</td></tr>')
    return (
        f'<div class="scroll" style="{SCROLL}">'
        '<table role="table" cellpadding="0" cellspacing="0" border="0" width="100%" '
        'style="border-collapse:collapse;width:100%">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def _bars(bars: list[Bar]) -> str:
    """A horizontal bar chart as a table: one row per bar, each bar a one-row table whose cells carry the
    segments' colours (bgcolor and style, for every client) and widths proportional to their values."""
    top = max((sum(v for v, _, _ in b.segments) for b in bars), default=0.0) or 1.0
    rows = []
    drawn: set[str] = set()
    for b in bars:
        cells = []
        total = sum(v for v, _, _ in b.segments)
        # widths in % of the chart's column, not pixels: the bars shrink with a phone's screen
        width = max(1, round(100 * total / top))
        for value, colour, name in b.segments:
            w = round(100 * value / total) if total else 0
            if w < 1:
                continue
            drawn.add(name)
            cells.append(
                f'<td width="{w}%" height="16" bgcolor="{colour}" title="{escape(name)}" '
                f'style="width:{w}%;height:16px;background:{colour};font-size:1px;line-height:1px">&nbsp;</td>'
            )
        bar = (
            f'<table role="presentation" cellpadding="0" cellspacing="0" border="0" width="{width}%" '
            f'style="border-collapse:collapse;width:{width}%">'
            f"<tr>{''.join(cells) or '<td></td>'}</tr></table>"
        )
        cell = f"{FONT}font-size:12px;color:{TEXT};padding:3px 8px 3px 0;white-space:nowrap"
        label = f"{FONT}font-size:12px;color:{TEXT};padding:3px 8px 3px 0;{TEXT_CELL}"
        rows.append(
            f'<tr><td align="right" style="{label};text-align:right;width:30%;max-width:180px">{escape(b.label)}</td>'
            f'<td style="padding:3px 0;width:100%">{bar}</td>'
            f'<td style="{cell};padding-left:8px">{escape(b.text)}</td></tr>'
        )
    # the legend in the segments' order (the same in every bar), only what some bar shows
    legend = {name: colour for b in bars for _, colour, name in b.segments if name in drawn}
    keys = "".join(
        f'<span style="display:inline-block;margin-right:14px"><span style="display:inline-block;width:10px;'
        f'height:10px;background:{colour};margin-right:4px">&nbsp;</span>{escape(name)}</span>'
        for name, colour in legend.items()
    )
    return (
        '<table role="presentation" cellpadding="0" cellspacing="0" border="0" width="100%" '
        f'style="border-collapse:collapse;width:100%;margin:6px 0">{"".join(rows)}</table>'
        f'<p style="{FONT}font-size:12px;color:{MUTED};margin:2px 0 8px 0">{keys}</p>'
    )


def _section(s: Section) -> str:
    out = [
        f'<h2 style="{FONT}font-size:16px;color:{TEXT};margin:28px 0 6px 0;padding-bottom:4px;'
        f'border-bottom:1px solid {BORDER}">{escape(s.title)}</h2>'
    ]
    out += [
        f'<p style="{FONT}font-size:13px;color:{TEXT};margin:4px 0">{escape(p)}</p>' for p in s.paragraphs
    ]
    if s.bars:
        out.append(_bars(s.bars))
    if s.table is not None and s.table.rows:
        out.append(_table(s.table))
    if s.bullets:
        out.append(
            f'<ul style="{FONT}font-size:13px;color:{TEXT};margin:4px 0 4px 18px;padding:0">'
            + "".join(f'<li style="margin:3px 0">{escape(b)}</li>' for b in s.bullets)
            + "</ul>"
        )
    elif s.table is None or not s.table.rows:
        out.append(f'<p style="{FONT}font-size:13px;color:{MUTED};margin:4px 0">{escape(s.empty)}</p>')
    return "\n".join(out)


def render_html(data: ReportData) -> str:
    """The whole report as one HTML document (inline styles only)."""
    body = "\n".join(_section(s) for s in sections(data))
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(data.title)}</title></head>\n"
        f'<body style="margin:0;padding:0;background:#ffffff">\n'
        '<table role="presentation" cellpadding="0" cellspacing="0" border="0" width="100%" '
        'style="width:100%;table-layout:fixed"><tr><td align="center">'
        '<table role="presentation" cellpadding="0" cellspacing="0" border="0" width="100%" '
        f'style="{PAGE}"><tr><td style="padding:8px">\n'
        f'<h1 style="{FONT}font-size:22px;color:{TEXT};margin:8px 0 4px 0">{escape(data.title)}</h1>\n'
        f'<p style="{FONT}font-size:13px;color:{MUTED};margin:0 0 8px 0">{escape(scope(data))}. '
        f"{escape(as_of_text(data))}</p>\n"
        f"{body}\n"
        f'<p style="{FONT}font-size:12px;color:{MUTED};margin-top:28px">{escape(footer(data))}</p>\n'
        "</td></tr></table></td></tr></table>\n</body></html>\n"
    )
