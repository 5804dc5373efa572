"""Settings → Save edits the file with tomlkit (gpuledger/ledger/settings_edit.py): for every TOML shape a user
may write (dotted keys, inline tables, spaced headers, quoted keys, names holding quotes), the saved file parses,
says what it said plus the one change (checked against data written here by hand), and keeps every comment.

Before issue 48 the page edited the file with regular expressions: ``clusters.a.tier = "spot"`` got a second
``[clusters.a]`` table (a file that no longer parses), and a name holding ``"`` broke its header."""

from __future__ import annotations

import datetime as dt
import tomllib
from pathlib import Path

import pytest

from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.settings_edit import add_price, set_key

SHAPES = {
    "dotted keys": (
        '# my cluster settings\nclusters.a.tier = "spot"  # cheap nodes\nthresholds.idle_util_pct = 5.0\n',
        {"clusters": {"a": {"tier": "spot"}}, "thresholds": {"idle_util_pct": 5.0}},
    ),
    "dotted keys under a header": (
        '[clusters]\n# per cluster\na.tier = "spot"\n\n[pricing]  # the sheet\ndefault_tier = "on_demand"\n',
        {"clusters": {"a": {"tier": "spot"}}, "pricing": {"default_tier": "on_demand"}},
    ),
    "inline tables": (
        'clusters = { a = { tier = "spot" } }  # inline\n\n[thresholds]\nidle_util_pct = 5.0  # %\n',
        {"clusters": {"a": {"tier": "spot"}}, "thresholds": {"idle_util_pct": 5.0}},
    ),
    "spaced headers": (
        '[ clusters . a ]\ntier = "spot"\n\n# thresholds next\n[ thresholds ]\nidle_util_pct = 5.0\n',
        {"clusters": {"a": {"tier": "spot"}}, "thresholds": {"idle_util_pct": 5.0}},
    ),
    "quoted keys": (
        '[clusters."gpu farm"]\ntier = "spot"\n# a dot inside a name\n[clusters.\'x.y\']\ntier = "on_demand"\n',
        {"clusters": {"gpu farm": {"tier": "spot"}, "x.y": {"tier": "on_demand"}}},
    ),
    "names holding quotes": (
        '# quotes and a backslash\n[clusters."he said \\"hi\\""]\ntier = "spot"\n[clusters."c:\\\\d"]\ntier = "spot"\n',
        {"clusters": {'he said "hi"': {"tier": "spot"}, "c:\\d": {"tier": "spot"}}},
    ),
    "empty file": ("", {}),
}
EDITS = [  # (table, key, value): an existing key, a new key, a new table whose name needs quoting
    (("clusters", "a"), "tier", "reserved"),
    (("clusters", "a"), "billing", "per_job"),
    (("thresholds",), "idle_util_pct", 7.5),
    (("thresholds",), "max_job_days", 30.0),
    (("clusters", 'he said "hi"'), "tier", "reserved"),
    (("clusters", "gpu farm"), "billing", "per_job"),
    (("clusters", "x.y"), "tier", "reserved"),
    (("clusters", "new [one]"), "tier", "on_demand"),
]


def _with(data: dict, table: tuple[str, ...], key: str, value: object) -> dict:
    import copy

    out = copy.deepcopy(data)
    node = out
    for name in table:
        node = node.setdefault(name, {})
    node[key] = value
    return out


def _comments(text: str) -> list[str]:
    return [line[line.index("#") :] for line in text.splitlines() if "#" in line and '"#' not in line]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("table", "key", "value"), EDITS, ids=lambda x: x if isinstance(x, str) else None)
def test_an_edit_parses_changes_one_value_and_keeps_the_comments(shape, table, key, value):
    text, data = SHAPES[shape]
    assert tomllib.loads(text) == data  # the shape is what this test says it is
    out = set_key(text, table, key, value)
    assert tomllib.loads(out) == _with(data, table, key, value)
    assert _comments(out) == _comments(text)


def test_a_replaced_value_stays_on_its_line_with_its_comment():
    text = SHAPES["dotted keys"][0]
    assert set_key(text, ("clusters", "a"), "tier", "reserved").splitlines() == [
        "# my cluster settings",
        'clusters.a.tier = "reserved"  # cheap nodes',
        "thresholds.idle_util_pct = 5.0",
    ]
    spaced = SHAPES["spaced headers"][0]
    assert set_key(spaced, ("thresholds",), "idle_util_pct", 7.5) == spaced.replace("5.0", "7.5")


def test_a_new_table_goes_at_the_end_where_it_cannot_take_the_keys_after_it():
    """The old editor put ``[clusters.b]`` after the last clusters line: the top-level dotted key below it
    became ``clusters.b.thresholds.idle_util_pct``."""
    text = SHAPES["dotted keys"][0]
    out = set_key(text, ("clusters", 'he said "hi"'), "tier", "reserved")
    assert out == text + '\n[clusters."he said \\"hi\\""]\ntier = "reserved"\n'


def test_a_price_row_is_added_after_the_rows_there_in_either_shape():
    row = {
        "gpu_model": "H100-SXM-80GB",
        "tier": "on_demand",
        "cluster": None,
        "usd_per_gpu_hour": 2.5,
        "effective_from": dt.date(2026, 1, 1),
        "source": 'quote "Q1"',
        "source_date": dt.date(2026, 1, 2),
    }
    entry = {k: v for k, v in row.items() if v is not None}
    old = {"gpu_model": "A100-80GB", "tier": "spot", "usd_per_gpu_hour": 1.0}
    tables = '# prices\n[[price]]\ngpu_model = "A100-80GB"\ntier = "spot"\nusd_per_gpu_hour = 1.0  # Q4\n'
    inline = 'price = [{ gpu_model = "A100-80GB", tier = "spot", usd_per_gpu_hour = 1.0 }]  # Q4\n'
    for text, before in ((tables, [old]), (inline, [old]), ("", []), ("[pricing]\n", None)):
        out = add_price(text, row)
        expected = tomllib.loads(text) | {"price": [*(before or []), entry]}
        assert tomllib.loads(out) == expected, text
        assert _comments(out) == _comments(text)


def test_a_table_that_is_a_value_is_refused_and_nothing_changes():
    with pytest.raises(LedgerError, match="clusters is a value, not a table"):
        set_key('clusters = "none"\n', ("clusters", "a"), "tier", "spot")


# ---------------------------------------------------------------- through the page


@pytest.mark.parametrize("shape", ["dotted keys", "inline tables", "names holding quotes"])
def test_save_cluster_on_the_page_writes_a_file_that_parses_and_keeps_its_comments(
    shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_pages_apptest import run_page, staged_ledger

    staged_ledger(tmp_path, monkeypatch)
    text, data = SHAPES[shape]
    settings = tmp_path / "edit.toml"
    settings.write_text(text, encoding="utf-8")
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(settings))
    name = next(iter(data["clusters"]))
    at = run_page("pages/settings.py")
    assert not at.exception, at.exception
    at.selectbox(key="cluster_name").set_value(name)
    at.selectbox(key="cluster_tier").set_value("reserved")
    next(b for b in at.button if b.label == "Save cluster").click()
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    saved = settings.read_text(encoding="utf-8")
    expected = _with(
        _with(data, ("clusters", name), "tier", "reserved"), ("clusters", name), "billing", "always_on"
    )
    assert tomllib.loads(saved) == expected
    assert _comments(saved) == _comments(text)
