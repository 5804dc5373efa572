"""The report's team chart and layout (issue 37 item 10): unallocated capacity drawn as no team, a waste total
in no part's colour, widths that follow the screen."""

from __future__ import annotations

import re

from gpuledger.ledger.palette import NOT_A_TEAM, NOT_A_TEAM_LABELS, PART_COLOURS, TEAM_COLOURS, WASTE_COLOUR
from tests.conftest import gpuledger


def test_waste_total_has_a_colour_of_its_own() -> None:
    assert WASTE_COLOUR not in {*PART_COLOURS.values(), *TEAM_COLOURS, *NOT_A_TEAM.values()}


def test_team_chart_draws_unallocated_as_no_team_and_fits_a_phone(demo_db: str) -> None:
    html = gpuledger("report", "--db", demo_db).stdout
    team = html.split("Spend and waste by team", 1)[1].split("<h2", 1)[0]
    label = NOT_A_TEAM_LABELS["unallocated"]
    assert f">{label}</td>" in team  # the bar's label (not only the table row)
    assert f'bgcolor="{NOT_A_TEAM["unallocated"]}" title="{label}"' in team
    assert "960px" not in html.replace("max-width:960px", "")
    assert not re.search(r'width="\d+"', html.split("<h1", 1)[1])  # no fixed pixel width after the title


def test_every_table_scrolls_in_its_own_box_and_nothing_is_fixed_wider_than_a_phone(demo_db: str) -> None:
    """At 390 px a table wider than the screen scrolls inside its box (the page itself does not), money cells
    wrap only between a figure's parts, and no width is fixed above 390 px (max-width:960px is a cap)."""
    html = gpuledger("report", "--db", demo_db).stdout
    data_tables = re.findall(r'(.{0,140})<table role="table"', html)
    assert len(data_tables) >= 6
    for before in data_tables:
        assert before.endswith(
            '<div class="scroll" style="overflow-x:auto;-webkit-overflow-scrolling:touch;max-width:100%;margin:6px 0 4px 0">'
        )
    # the page cell is as wide as the screen, not as its widest table
    assert 'style="width:100%;max-width:960px;table-layout:fixed"' in html
    fixed = [int(px) for px in re.findall(r"(?<![-\w])(?:min-)?width:\s*(\d+)px", html)]
    fixed += [int(px) for px in re.findall(r'\bwidth="(\d+)"', html)]
    assert not [px for px in fixed if px > 390], fixed
    # a money figure is never split: every $ amount in a table cell sits whole in one nowrap span
    cells = re.findall(r'<td align="right"[^>]*>(.*?)</td>', html)
    money = [c for c in cells if "$" in c]
    assert money
    for c in money:
        for amount in re.findall(r"[+-]?\$[\d,]+(?:\.\d+)?", c):
            assert re.search(rf'<span style="white-space:nowrap">[^<]*{re.escape(amount)}[^<]*</span>', c), c
