"""The example guard policy (gpuledger/guard/example.py): one set of values, quoted alike by
data/settings.example.toml and docs/settings.md; ``guard replay --example`` and the Guard page of a ledger whose
settings hold no policy replay it, hand-worked on the five jobs of tests/guard/ledgers.py.

By hand, the example (util ≤ 5 %, warn at 60 idle minutes, cancel at 120, memory floor 50 %, alice exempt) on the
five jobs, all alice's but ``a/exempt`` (bob's, 1 H100 at $4.00/GPU-h, 0-300 min, 90 % for an hour then 0 %):
bob's job is idle from minute 60, warned at 120, cancelled at 180; saved 1 GPU × (300 − 180) min = 2 GPU-h = $8.
Alice's jobs that would have been warned (a/idle2, a/busy_again, a/burst; a/fullmem holds 97 % of its memory)
are listed exempt and counted in no total.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuledger.guard.example import EXAMPLE_TOML, example_policy, spelled_out
from gpuledger.ledger.settings import from_dict
from tests.analytics.build import T0
from tests.conftest import ROOT, app_page, filled_ledger, gpuledger
from tests.guard.ledgers import fill_five


def _commented_block(text: str) -> str:
    """settings.example.toml's commented ``[[guard.policy]]`` block, uncommented."""
    lines = text.splitlines()
    first = lines.index("# [[guard.policy]]")
    block = []
    for line in lines[first:]:
        if not line.startswith("# "):
            break
        block.append(line.removeprefix("# "))
    return "\n".join(block) + "\n"


def test_the_example_is_the_one_in_settings_example_and_the_docs() -> None:
    example = (ROOT / "data" / "settings.example.toml").read_text(encoding="utf-8")
    assert _commented_block(example) == EXAMPLE_TOML
    docs = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert f"```toml\n{EXAMPLE_TOML}```" in docs


def test_the_example_loads_as_pasted_settings_would() -> None:
    import tomllib

    pasted = from_dict(tomllib.loads(EXAMPLE_TOML), Path("settings.toml")).guard.policies
    assert pasted == (example_policy(),)
    p = example_policy()
    assert (p.name, p.util_pct, p.warn_minutes, p.cancel_minutes, p.memory_floor_pct, p.window) == (
        "idle", 5.0, 60.0, 120.0, 50.0, "sliding"
    )  # fmt: skip
    assert p.exemptions.users == ("alice",)
    assert spelled_out(p, 5.0) == (
        "a job is idle when all of its GPUs sit at or under 5 % utilization (a GPU holding 50 % of its memory "
        "or more is not idle); idle time counted over a sliding window (any unbroken idle run); warned after "
        "60 idle minutes, cancelled after 120 idle minutes; exempt: users alice."
    )


@pytest.fixture(scope="module")
def no_policy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with filled_ledger(tmp_path_factory.mktemp("guardexample"), fill_five) as db:
        yield db


def test_replay_example_by_hand(no_policy: str) -> None:
    out = gpuledger(
        "guard", "replay", "--since", "2025-03-03", "--until", "2025-03-03", "--example", "--json"
    )
    assert out.returncode == 0, out.stderr
    (p,) = json.loads(out.stdout)["policies"]
    assert p["policy"] == "idle" and p["cancels"] is True
    t = p["totals"]
    assert (t["jobs_warned"], t["jobs_cancelled"], t["saved_gpu_hours"], t["saved_usd"]) == (1, 1, 2.0, 8.0)
    assert (t["false_alarms"], t["jobs_exempt"]) == (0, 3)
    jobs = {j["job_id"]: j for j in p["jobs"]}
    assert sorted(jobs) == ["a/burst", "a/busy_again", "a/exempt", "a/idle2"]
    bob = jobs["a/exempt"]
    at = lambda m: (T0 + dt.timedelta(minutes=m)).isoformat(sep=" ")  # noqa: E731
    assert [(s["step"], s["at"]) for s in bob["steps"]] == [("warn", at(120)), ("cancel", at(180))]
    assert all(jobs[j]["exempt"] for j in ("a/burst", "a/busy_again", "a/idle2"))
    both = gpuledger("guard", "replay", "--since", "2025-03-03", "--until", "2025-03-03", "--example",
                     "--policy", "idle")  # fmt: skip
    assert both.returncode != 0


def test_the_guard_page_replays_the_example_labelled_not_configured(no_policy: str) -> None:
    at = app_page("pages/guard.py")
    assert "No `[[guard.policy]]` in the settings yet" in at.info[0].value
    head = next(m.value for m in at.markdown if "Example policy (not configured)" in m.value).replace(
        "\\", ""
    )
    assert "at or under 5 % utilization" in head and "cancelled after 120 idle minutes" in head
    assert {m.label: m.value for m in at.metric} == {
        "Jobs warned": "1",
        "Jobs cancelled": "1",
        "GPU-hours saved": "2.0",
        "$ saved": "$8.00",
        "False alarms": "0",
    }
    assert any("--until 2025-03-03 --example --json" in c.value for c in at.caption), [
        c.value for c in at.caption
    ]
    table = at.dataframe[0].value
    assert sorted(table["job_id"]) == ["a/burst", "a/busy_again", "a/exempt", "a/idle2"]
    assert [c.value for c in at.code] == [EXAMPLE_TOML.rstrip("\n")]
