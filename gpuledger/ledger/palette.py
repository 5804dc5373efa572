"""The one colour palette of gpuledger: one colour per waste part, one per team, the same on every dashboard
page and in the report (pages/ and gpuledger/reports/ both import it; it imports nothing).

Waste parts use Okabe & Ito's colour-blind-safe set, productive in the quiet sky blue so the waste parts
show. Teams use Paul Tol's "muted" set, which shares no colour with the waste parts, so a team never looks
like a waste part ("search" red on one page and "idle" red on the next). A team keeps its colour whatever
the filters: its slot comes from a hash of its name (probing to the next free slot when two teams of the
same set want one). The pseudo-rows "unallocated" (capacity no job held) and "unattributed" (telemetry no
job claims) are not teams: they are drawn in grey with a hatch (:data:`NOT_A_TEAM`), never a team colour.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

PART_COLOURS: dict[str, str] = {
    "productive_usd": "#56B4E9",
    "idle_allocated_usd": "#E69F00",
    "underused_usd": "#F0E442",
    "failed_usd": "#D55E00",
    "unallocated_usd": "#CC79A7",
    "unmeasured_usd": "#BBBBBB",
}
PART_LABELS: dict[str, str] = {
    "productive_usd": "productive",
    "idle_allocated_usd": "idle while allocated",
    "underused_usd": "under-used",
    "failed_usd": "failed runs (badput)",
    "unallocated_usd": "capacity no job held",
    "unmeasured_usd": "unmeasured (no telemetry)",
}
SPEND_COLOUR = "#0072B2"  # a total (spend), Okabe–Ito blue
# a total (waste): near-black, no waste part's or team's colour (it was the failed-runs vermillion, so a
# team's waste read as its failed runs)
WASTE_COLOUR = "#3A3A3A"
TEAM_COLOURS: tuple[str, ...] = (
    "#332288",  # indigo
    "#117733",  # green
    "#44AA99",  # teal
    "#88CCEE",  # cyan
    "#DDCC77",  # sand
    "#CC6677",  # rose
    "#AA4499",  # purple
    "#882255",  # wine
    "#999933",  # olive
)
# The Fleet heatmap: utilization in one blue hue (light = low, dark = high), so that the two kinds of unused
# time stand apart in the waste parts' own colours: idle while a job held the GPU (orange) and capacity no
# job held (reddish purple). The light end is not white: a cell with no telemetry stays blank (background).
UTIL_SCALE: list[list[float | str]] = [[0.0, "#DCEAF7"], [1.0, "#08306B"]]
HEATMAP_STATE_COLOURS: dict[str, str] = {
    "idle_held": PART_COLOURS["idle_allocated_usd"],
    "unallocated": PART_COLOURS["unallocated_usd"],
}
HEATMAP_STATE_LABELS: dict[str, str] = {
    "idle_held": "idle while held",
    "unallocated": "unallocated (no job held it)",
}
NOT_A_TEAM: dict[str, str] = {"unallocated": "#9E9E9E", "unattributed": "#D0D0D0"}
NOT_A_TEAM_LABELS: dict[str, str] = {
    "unallocated": "capacity no job held (no team)",
    "unattributed": "unattributed telemetry (no team)",
}


def is_team(name: str | None) -> bool:
    """False for the pseudo-rows (unallocated, unattributed) and for a missing team."""
    return name is not None and name not in NOT_A_TEAM


def team_colours(teams: Iterable[str | None]) -> dict[str, str]:
    """A colour for each name in ``teams``: real teams from :data:`TEAM_COLOURS` (stable by name), the
    pseudo-rows from :data:`NOT_A_TEAM`. Past nine teams colours repeat (in hash order)."""
    names = sorted({t for t in teams if t is not None})
    out: dict[str, str] = {}
    taken: set[int] = set()
    for name in names:
        if name in NOT_A_TEAM:
            out[name] = NOT_A_TEAM[name]
            continue
        slot = zlib.crc32(name.encode("utf-8")) % len(TEAM_COLOURS)
        if len(taken) < len(TEAM_COLOURS):
            while slot in taken:
                slot = (slot + 1) % len(TEAM_COLOURS)
        taken.add(slot)
        out[name] = TEAM_COLOURS[slot]
    return out
