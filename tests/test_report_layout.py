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
