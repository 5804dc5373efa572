"""Sign-in settings, team scoping and the dashboard's safe-output helpers, in process.

The settings keys ([auth], [access], [dashboard]) are parsed with their error sentences pinned; who sees what
is checked by rule; then every page runs under AppTest (``at.user`` is the simulated ``st.user``) as a lead,
an admin, a visitor and a person with no team, against tests/fixtures/dashboard/jobs.csv, whose per-team
spend is worked out by hand below. The real sign-in through an OIDC provider is tests/browser/test_auth.py.
"""

from __future__ import annotations

import csv
import io
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from streamlit.testing.v1 import AppTest

from collectors.ingest import ingest_file
from gpuledger.ledger.access import AccessSettings, resolve_scope, streamlit_auth_section
from gpuledger.ledger.db import writer
from gpuledger.ledger.errors import SettingsError
from gpuledger.ledger.settings import Settings, load_settings
from pages._ui import code, csv_bytes, csv_safe, md
from tests.conftest import ROOT

JOBS = ROOT / "tests" / "fixtures" / "dashboard" / "jobs.csv"
AUTH = """
[auth]
server_metadata_url = "http://127.0.0.1:9/.well-known/openid-configuration"
client_id = "gpuledger"
"""
ACCESS = """
[access]
admins = ["boss@example.com", "group:gpu-platform"]
[access.teams]
nlp = ["ana@example.com", "@nlp.example.com"]
vision = ["group:vision-leads", "ana@example.com"]
speech = ["sam@example.com"]
"""
# tests/fixtures/dashboard/jobs.csv at the shipped on-demand prices (the arithmetic of test_pages_apptest.py):
# nlp: dash-1 8 × 10 h + dash-2 1 × 12 h = 92 H100-hours × $2.99 = $275.08
# vision: dash-3 2 × 6 h L4 at $0.71 = $8.52, dash-4 12 h A10G at $1.006 = $12.072: $20.592
# speech: dash-5 4 × 24 h = 96 H100-hours × $2.99 = $287.04; all: $582.712
SPEND = {"nlp": "$275.08", "vision": "$20.59", "speech": "$287.04", None: "$582.71"}


def _settings(tmp_path: Path, text: str) -> Settings:
    p = tmp_path / "settings.toml"
    p.write_text(text)
    return load_settings(p)


# ---------------------------------------------------------------- settings


def test_defaults_keep_sign_in_off_and_limit_uploads(tmp_path: Path) -> None:
    s = _settings(tmp_path, "")
    assert s.auth is None and s.access == AccessSettings()
    assert s.max_upload_mb == 100 and s.upload_memory_mb == 1024


def test_auth_and_access_are_read(tmp_path: Path) -> None:
    s = _settings(tmp_path, AUTH + ACCESS + "[dashboard]\nmax_upload_mb = 20\nupload_memory_mb = 256\n")
    assert s.auth is not None and s.auth.client_id == "gpuledger"
    assert s.auth.client_secret_env == "GPULEDGER_OIDC_CLIENT_SECRET"
    assert dict(s.access.teams)["nlp"] == ("ana@example.com", "@nlp.example.com")
    assert (s.max_upload_mb, s.upload_memory_mb) == (20, 256)


def test_sign_in_settings_do_not_change_the_numbers(tmp_path: Path) -> None:
    """The fingerprint keys the page caches and the synced price tables: who may look changes no figure."""
    plain = _settings(tmp_path, "")
    assert _settings(tmp_path, AUTH + ACCESS).fingerprint() == plain.fingerprint()
    assert _settings(tmp_path, "[energy]\nusd_per_kwh = 0.2\n").fingerprint() != plain.fingerprint()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            AUTH + 'client_secret = "s3cret"\n',
            "setting 'auth.client_secret': does not belong in the settings file: put it in the environment "
            "variable named by auth.client_secret_env, or under [auth] in .streamlit/secrets.toml",
        ),
        (
            "[auth]\nclient_id = 'x'\n",
            "setting 'auth.server_metadata_url': is required when [auth] is present",
        ),
        (
            "[auth]\nclient_id = 'x'\nserver_metadata_url = 'accounts.example.com'\n",
            "setting 'auth.server_metadata_url': must be an absolute http(s) URL, got 'accounts.example.com'",
        ),
        (
            AUTH + 'redirect_uri = "http://localhost:8501/"\n',
            "setting 'auth.redirect_uri': must end with /oauth2callback",
        ),
        (
            "[access.teams]\nnlp = ['ana']\n",
            "setting 'access.teams.nlp[0]': must be an email, @domain or group:NAME, got 'ana'",
        ),
        ("[access]\nadmins = 'boss@example.com'\n", "setting 'access.admins': must be a list of emails"),
        ("[access]\nadmins = ['group:']\n", "setting 'access.admins[0]': names no group after 'group:'"),
        ("[access]\nleads = []\n", "setting 'access.leads': is not a known setting"),
        (
            "[dashboard]\nmax_upload_mb = 0\n",
            "setting 'dashboard.max_upload_mb': must be between 1 and 10000",
        ),
        ("[dashboard]\nport = 1\n", "setting 'dashboard.port': is not a known setting"),
    ],
)
def test_bad_sign_in_settings_name_their_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SettingsError) as err:
        _settings(tmp_path, text)
    assert message in str(err.value)


# ---------------------------------------------------------------- who sees what


OK = {"email_verified": True}


@pytest.mark.parametrize(
    ("claims", "admin", "teams"),
    [
        ({"email": "boss@example.com", **OK}, True, ()),
        ({"email": "someone@example.com", "groups": ["gpu-platform"]}, True, ()),  # a group needs no email
        ({"email": "Ana@Example.com", **OK}, False, ("nlp", "vision")),  # emails compare case-insensitively
        ({"email": "new.hire@nlp.example.com", **OK}, False, ("nlp",)),  # by domain
        ({"email": "x@evil-nlp.example.com", **OK}, False, ()),  # a domain is matched whole, after the @
        ({"email": "lee@example.com", "groups": "vision-leads"}, False, ("vision",)),  # a one-group claim
        # an email counts only when email_verified is the boolean true (issue 43: "nOAuth")
        ({"email": "ana@example.com", "email_verified": False}, False, ()),
        ({"email": "ana@example.com", "email_verified": "false"}, False, ()),
        ({"email": "ana@example.com", "email_verified": "true"}, False, ()),
        ({"email": "ana@example.com", "email_verified": 1}, False, ()),
        ({"email": "ana@example.com", "email_verified": None}, False, ()),
        ({"email": "ana@example.com"}, False, ()),  # missing: not vouched for
        ({"email": "boss@example.com", "email_verified": "True"}, False, ()),
        ({"sub": "u-17"}, False, ()),
    ],
)
def test_resolve_scope(
    tmp_path: Path, claims: dict[str, object], admin: bool, teams: tuple[str, ...]
) -> None:
    scope = resolve_scope(_settings(tmp_path, ACCESS).access, claims)
    assert (scope.admin, scope.teams) == (admin, teams)
    assert scope.sees_anything == (admin or bool(teams))


def test_streamlit_secrets_come_from_the_environment_or_secrets_toml(tmp_path: Path) -> None:
    auth = _settings(tmp_path, AUTH).auth
    assert auth is not None
    section = streamlit_auth_section(
        auth, port=8600, root=tmp_path, settings_path="s.toml", env={"GPULEDGER_OIDC_CLIENT_SECRET": "env-s"}
    )
    assert section["client_secret"] == "env-s"
    assert section["redirect_uri"] == "http://localhost:8600/oauth2callback"
    assert len(section["cookie_secret"]) >= 32  # random per run when none is given
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "secrets.toml").write_text(
        '[auth]\nclient_secret = "file-s"\ncookie_secret = "c" \n'
    )
    section = streamlit_auth_section(auth, port=8600, root=tmp_path, settings_path="s.toml", env={})
    assert (section["client_secret"], section["cookie_secret"]) == ("file-s", "c")
    (tmp_path / ".streamlit" / "secrets.toml").write_text("")
    with pytest.raises(SettingsError) as err:
        streamlit_auth_section(auth, port=8600, root=tmp_path, settings_path="s.toml", env={})
    assert "no client secret: set $GPULEDGER_OIDC_CLIENT_SECRET, or client_secret under [auth]" in str(
        err.value
    )


def test_the_upload_ledger_runs_under_its_memory_limit(tmp_path: Path) -> None:
    from gpuledger.ledger.db import memory_ledger
    from gpuledger.upload.analysis import limit_upload_memory

    con = memory_ledger()
    try:
        limit_upload_memory(con, _settings(tmp_path, "[dashboard]\nupload_memory_mb = 64\n"), str(tmp_path))
        limit, spill = con.execute(
            "SELECT current_setting('memory_limit'), current_setting('temp_directory')"
        ).fetchone()
    finally:
        con.close()
    assert limit == "61.0 MiB"  # DuckDB reports MiB: 64 MB = 64e6 B / 2**20 = 61.04 MiB
    assert spill == str(tmp_path)


# ---------------------------------------------------------------- the dashboard command


def test_the_dashboard_command_line_is_safe_by_default() -> None:
    from gpuledger.cli.commands.dashboard import streamlit_argv

    argv = streamlit_argv(8501)
    opts = dict(zip(argv[5::2], argv[6::2], strict=False))  # after: python -m streamlit run app.py
    assert opts["--server.address"] == "127.0.0.1"
    assert opts["--server.maxUploadSize"] == "100"
    assert opts["--client.showErrorDetails"] == "none"
    assert opts["--client.disableDataExport"] == "true"
    assert "--secrets.files" not in opts


@pytest.mark.parametrize(
    ("text", "host", "expected"),
    [
        ("", "127.0.0.1", []),
        (
            "",
            "0.0.0.0",
            [
                "listening on 0.0.0.0 without sign-in: anyone who can reach port 8501 sees every team's spend. "
                "Configure [auth] and [access] in the settings (docs/settings.md)."
            ],
        ),
        (
            ACCESS,
            "127.0.0.1",
            ["[access] is set but [auth] is not, so nobody signs in and everyone sees every team."],
        ),
        (AUTH + ACCESS, "127.0.0.1", []),
        (
            AUTH,
            "0.0.0.0",
            [
                "auth.redirect_uri is not set, so the provider sends people back to http://localhost:8501, which "
                "works on this machine only: set it to this server's public address + /oauth2callback."
            ],
        ),
        (
            AUTH.replace("[auth]", '[auth]\nredirect_uri = "https://gpu.example.com/oauth2callback"'),
            "0.0.0.0",
            [],
        ),
    ],
)
def test_exposure_warnings(tmp_path: Path, text: str, host: str, expected: list[str]) -> None:
    from gpuledger.cli.commands.dashboard import exposure_warnings

    assert exposure_warnings(_settings(tmp_path, text), host, 8501) == expected


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True), ("0.0.0.0", False),
     ("::", False), ("192.0.2.7", False), ("gpu.example.com", False)],
)  # fmt: skip
def test_loopback_hosts(host: str, loopback: bool) -> None:
    from gpuledger.cli.commands.dashboard import is_loopback

    assert is_loopback(host) is loopback


def test_the_secrets_file_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stat
    import tomllib

    from gpuledger.cli.commands.dashboard import write_streamlit_secrets

    monkeypatch.setenv("GPULEDGER_OIDC_CLIENT_SECRET", "s3cret")
    monkeypatch.chdir(tmp_path)
    path = write_streamlit_secrets(_settings(tmp_path, AUTH), 8502)
    assert path is not None
    assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(path).parent.stat().st_mode) == 0o700
    auth = tomllib.loads(Path(path).read_text())["auth"]
    assert auth["client_secret"] == "s3cret" and auth["client_id"] == "gpuledger"
    assert auth["redirect_uri"] == "http://localhost:8502/oauth2callback"
    assert write_streamlit_secrets(_settings(tmp_path, ""), 8502) is None
    Path(path).unlink()
    Path(path).parent.rmdir()


# ---------------------------------------------------------------- safe output


def test_md_escapes_links_html_and_directives() -> None:
    wj = "\u2060"  # the word joiner that breaks an autolink (invisible)
    assert md("[click me](https://evil.example)") == rf"\[click me\]\(https\:{wj}\/\/evil\.example\)"
    assert md("<script>alert(1)</script>") == r"\<script\>alert\(1\)\<\/script\>"
    assert md(":red[big] $x$ ana@example.com") == rf"\:red\[big\] \$x\$ ana\@{wj}example\.com"
    assert md("www.evil.example") == rf"www{wj}\.evil\.example"
    assert md("a\n# heading") == r"a \# heading"
    assert md("plain team 7") == "plain team 7" and md(None) == "n/a"
    assert code("a`b") == "``a`b``"


def test_charts_draw_names_as_text() -> None:
    """Plotly draws <a href>, <b> … found in labels; escaped, it draws them as typed (it decodes &lt; itself)."""
    import plotly.express as px

    from pages._ui import safe_figure

    frame = pl.DataFrame(
        {"week": ["2026-W47"] * 2, "team": ['<a href="https://evil.example">x</a>', "R&D"], "usd": [1.0, 2.0]}
    )
    fig = safe_figure(px.bar(frame, x="week", y="usd", color="team", hover_name="team"))
    assert [t.name for t in fig.data] == ['&lt;a href="https://evil.example"&gt;x&lt;/a&gt;', "R&amp;D"]
    assert list(fig.data[1].hovertext) == ["R&amp;D"]
    assert list(fig.data[0].y) == [1.0]  # numbers untouched


def test_stacked_bars_escape_the_axis_categories_too() -> None:
    """A categorical axis' own list of categories is drawn as its tick labels (found by the hostile-names
    browser check on the Waste page: an unescaped team name there became a link)."""
    from pages._ui import safe_figure, stacked_bars

    evil = '<a href="https://evil.example">x</a>'
    frame = pl.DataFrame(
        {"team": [evil, "R&D", evil], "part": ["idle", "idle", "failed"], "usd": [1.0, 2.0, 3.0]}
    )
    fig = stacked_bars(frame, x="usd", y="team", by="part", colours={"idle": "#111111"}, horizontal=True)
    # one trace per part, in first appearance; the axis lists the teams in first appearance
    assert [t.name for t in fig.data] == ["idle", "failed"]
    assert list(fig.data[0].y) == [evil, "R&D"] and list(fig.data[1].x) == [3.0]
    assert fig.data[0].marker.color == "#111111" and fig.data[0].orientation == "h"
    assert fig.layout.barmode == "stack" and list(fig.layout.yaxis.categoryarray) == [evil, "R&D"]
    safe = safe_figure(fig)
    escaped = '&lt;a href="https://evil.example"&gt;x&lt;/a&gt;'
    assert list(safe.layout.yaxis.categoryarray) == [escaped, "R&amp;D"]
    assert list(safe.data[0].y) == [escaped, "R&amp;D"]


def test_csv_download_neutralizes_formulas() -> None:
    frame = pl.DataFrame(
        {
            "name": [
                '=HYPERLINK("https://evil.example")',
                "+1",
                "-cmd",
                "@SUM(A1)",
                "\tx",
                "\ry",
                "ok",
                None,
            ],
            "cost_usd": [-1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],  # numbers stay numbers, minus and all
            "tags": [["=a"], [], ["b"], ["c"], ["d"], ["e"], ["f"], ["g"]],
        }
    )
    safe = csv_safe(frame)
    assert safe["name"].to_list() == [
        '\'=HYPERLINK("https://evil.example")',
        "'+1",
        "'-cmd",
        "'@SUM(A1)",
        "'\tx",
        "'\ry",
        "ok",
        None,
    ]
    assert safe["cost_usd"].to_list() == frame["cost_usd"].to_list()
    assert safe["tags"][0] == "'=a"
    data = csv_bytes(frame)
    assert data.startswith("\ufeff".encode())
    rows = list(csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")))
    assert rows[0] == ["name", "cost_usd", "tags"]
    assert [r[0][:1] for r in rows[1:8]] == ["'"] * 6 + ["o"]
    assert rows[1][1] == "-1.5"


# ---------------------------------------------------------------- every page, scoped (AppTest)

PAGES = [
    "pages/overview.py",
    "pages/waste.py",
    "pages/jobs.py",
    "pages/fleet.py",
    "pages/recommendations.py",
    "pages/training.py",
    "pages/reports.py",
]


@pytest.fixture(scope="module")
def signed_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("access")
    db = str(tmp / "ledger.duckdb")
    with writer(db) as con:
        ingest_file(con, JOBS)
    settings = tmp / "settings.toml"
    settings.write_text(AUTH + ACCESS)
    mp = pytest.MonkeyPatch()
    mp.setenv("GPULEDGER_DB", db)
    mp.setenv("GPULEDGER_SETTINGS", str(settings))
    yield db
    mp.undo()


def _run(page: str, user: dict[str, object], query: dict[str, list[str]] | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.user = user
    for key, values in (query or {}).items():
        at.query_params[key] = values
    at.run()
    if page != "pages/overview.py":
        at.switch_page(page)
        at.run()
    assert not at.exception, at.exception
    return at


def _spend(at: AppTest) -> str:
    return next(m for m in at.metric if m.label == "Spend").value


def _text(at: AppTest) -> str:
    parts = [
        e.value
        for kind in ("markdown", "caption", "title", "subheader", "info", "warning")
        for e in getattr(at, kind)
    ]
    for frame in at.dataframe:
        parts.append(frame.value.to_csv() if hasattr(frame.value, "to_csv") else str(frame.value))
    return "\n".join(str(p) for p in parts)


def test_a_visitor_sees_only_the_sign_in(signed_ledger: str) -> None:
    at = _run("pages/overview.py", {"is_logged_in": False})
    assert [b.label for b in at.button] == ["Sign in"]
    assert not at.metric and not at.dataframe and not at.sidebar.multiselect
    assert "$" not in _text(at)


def test_someone_without_a_team_sees_no_data(signed_ledger: str) -> None:
    at = _run(
        "pages/overview.py", {"is_logged_in": True, "email_verified": True, "email": "stranger@example.com"}
    )
    assert "no team is mapped to you" in at.warning[0].value
    assert not at.dataframe and not at.metric


@pytest.mark.parametrize("verified", ["false", "missing", "true"])
def test_an_unverified_email_is_refused_with_a_page_saying_why(signed_ledger: str, verified: str) -> None:
    """sam@example.com leads speech, but only when the provider vouches for the address (issue 43)."""
    user: dict[str, object] = {"is_logged_in": True, "email": "sam@example.com"}
    if verified != "missing":
        user["email_verified"] = verified  # a string, as some providers send it
    at = _run("pages/overview.py", user)
    shown = "'true'" if verified == "true" else ("'false'" if verified == "false" else "missing")
    said = at.error[0].value.replace("\\", "")  # markdown escapes, as the browser resolves them
    assert "did not confirm" in said and f"claim is {shown}, not true" in said
    assert not at.metric and not at.dataframe and not at.sidebar.multiselect
    assert "$" not in _text(at)


@pytest.mark.parametrize("page", PAGES)
def test_a_lead_sees_only_their_team_on_every_page(signed_ledger: str, page: str) -> None:
    at = _run(page, {"is_logged_in": True, "email_verified": True, "email": "sam@example.com"})
    text = _text(at)
    for other in ("nlp", "vision", "alice", "carol", "dash-1", "dash-3"):
        assert other not in text, (page, other)
    assert at.sidebar.multiselect(key="team").options == ["speech"]


def test_a_lead_sees_their_team_spend_and_cannot_widen_it_by_url(signed_ledger: str) -> None:
    lead = {"is_logged_in": True, "email_verified": True, "email": "sam@example.com"}
    assert _spend(_run("pages/overview.py", lead)) == SPEND["speech"]
    # a shared link naming another team does not show it: it is a team the lead's view does not have
    other = _run("pages/overview.py", lead, {"team": ["nlp"]})
    assert not other.metric and "no team 'nlp'" in other.warning[0].value.replace("\\", "")
    both = {"is_logged_in": True, "email_verified": True, "email": "ana@example.com"}  # nlp and vision
    assert _spend(_run("pages/overview.py", both)) == "$295.67"  # 275.08 + 20.592 = 295.672
    assert _spend(_run("pages/overview.py", both, {"team": ["vision"]})) == SPEND["vision"]


@pytest.mark.parametrize(
    ("key", "outside", "missing", "theirs"),
    [
        ("team", "nlp", "robotics", "speech"),  # another team / no team
        ("user", "alice", "zzz", "erin"),  # nlp's user / nobody
        ("cluster", "cirrus", "nowhere", "atlas"),  # a cluster only vision's jobs ran on / none
    ],
)
def test_a_name_outside_a_leads_teams_is_answered_as_one_that_does_not_exist(
    signed_ledger: str, key: str, outside: str, missing: str, theirs: str
) -> None:
    """Issue 43: ``?user=alice`` (nlp's) said "No jobs in this view" to speech's lead while ``?user=zzz`` said
    "no user 'zzz' in the ledger": the difference told which names exist elsewhere. Now both say the same,
    listing only the lead's own names, and show no figures."""
    lead = {"is_logged_in": True, "email_verified": True, "email": "sam@example.com"}
    said = {}
    for name in (outside, missing):
        at = _run("pages/overview.py", lead, {key: [name]})
        assert not at.metric and not at.dataframe, (key, name)
        said[name] = "\n".join(w.value for w in at.warning).replace("\\", "")
    assert said[outside] == said[missing].replace(missing, outside), said
    assert f"no {key} '{outside}' in the ledger ({key}s: {theirs})" in said[outside]
    for other in ("nlp", "vision", "alice", "bob", "carol", "dave", "cirrus"):
        assert other == outside or other not in said[outside], other
    admin = {"is_logged_in": True, "email_verified": True, "email": "boss@example.com"}
    assert _run("pages/overview.py", admin, {key: [outside]}).metric  # it does exist, for an admin


def test_an_admin_sees_the_fleet(signed_ledger: str) -> None:
    at = _run(
        "pages/overview.py", {"is_logged_in": True, "email_verified": True, "email": "boss@example.com"}
    )
    assert _spend(at) == SPEND[None]
    assert set(at.sidebar.multiselect(key="team").options) == {"nlp", "speech", "vision"}


# ---------------------------------------------------------------- who may write (issue 34)


@pytest.fixture()
def own_settings(signed_ledger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The signed-in dashboard with a settings file of this test's own (the test may change it)."""
    path = tmp_path / "server-settings.toml"
    path.write_text(AUTH + ACCESS)
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(path))
    return path


def _save_threshold(at: AppTest, value: float) -> AppTest:
    at.number_input(key="set_thresholds_target_util_pct").set_value(value)
    next(b for b in at.button if b.label == "Save thresholds").click()
    at.run()
    return at


def test_only_an_admin_may_change_the_settings_and_others_see_them_read_only(own_settings: Path) -> None:
    """A lead once saved target_util_pct 60 → 95 and an H100 price of $0.01 on the Settings page: fleet
    spend $17,334.49 → $3,604.64 for every team. Now a lead sees the settings in force, read-only, without
    the server's path; an admin still saves."""
    before = own_settings.read_bytes()
    for who in ("sam@example.com", "ana@example.com"):  # a lead of one team, of two (no team: no pages)
        at = _run("pages/settings.py", {"is_logged_in": True, "email_verified": True, "email": who})
        labels = [b.label for b in at.button]
        assert not {"Save price", "Save thresholds", "Save cluster"} & set(labels), (who, labels)
        assert not at.number_input and not at.text_input, who
        text = _text(at)
        assert str(own_settings) not in text and own_settings.name not in text, who
        assert "read-only" in text and "target_util_pct" in text, who  # the settings in force are shown
        assert own_settings.read_bytes() == before
    admin = _run(
        "pages/settings.py", {"is_logged_in": True, "email_verified": True, "email": "boss@example.com"}
    )
    assert str(own_settings) in _text(admin)
    _save_threshold(admin, 70.0)
    assert not admin.exception, admin.exception
    assert "target_util_pct = 70.0" in own_settings.read_text()
    assert load_settings(own_settings).target_util_pct == 70.0


def test_a_save_is_refused_for_a_lead_even_if_the_form_were_drawn(own_settings: Path, monkeypatch) -> None:
    # the write path asks again: a form submitted by a lead (drawn here by pretending it may write) writes
    # nothing, because save() asks the same rule when it runs
    import pages._scope as data

    calls = {"n": 0}
    real = data.may_write

    def first_yes() -> bool:  # the page's own question says yes, save()'s asks the real rule
        calls["n"] += 1
        return True if calls["n"] == 1 else real()

    monkeypatch.setattr(data, "may_write", first_yes)
    before = own_settings.read_bytes()
    at = _run("pages/settings.py", {"is_logged_in": True, "email_verified": True, "email": "sam@example.com"})
    calls["n"] = 0
    _save_threshold(at, 95.0)
    assert own_settings.read_bytes() == before
    assert any("only an admin may change the settings" in e.value for e in at.error), [
        e.value for e in at.error
    ]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_signed_in_dashboard_removes_its_secrets_when_stopped(tmp_path: Path, sig: int) -> None:
    """A real `gpuledger dashboard` with [auth]: its private secrets file exists while it serves and is gone
    after a SIGTERM or Ctrl-C (an exec'd Streamlit left it in /tmp after a SIGTERM)."""
    import socket
    import subprocess
    import sys
    import time

    settings = tmp_path / "settings.toml"
    settings.write_text(AUTH + ACCESS)
    temp = tmp_path / "tmp"
    temp.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, TMPDIR=str(temp), GPULEDGER_OIDC_CLIENT_SECRET="s3cret", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuledger", "dashboard", "--settings", str(settings), "--no-demo",
         "--db", str(tmp_path / "l.duckdb"), "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not list(temp.glob("gpuledger-dashboard-*/secrets.toml")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.2)
        [secrets] = list(temp.glob("gpuledger-dashboard-*/secrets.toml"))
        assert "s3cret" in secrets.read_text()
        time.sleep(2)  # Streamlit is starting (the child holds the file)
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert list(temp.iterdir()) == [], list(temp.rglob("*"))


def test_a_sign_out_is_remembered_for_that_sign_in_only(tmp_path: Path) -> None:
    """gpuledger/ledger/signouts.py: the ended sign-in's claims are refused, also by a restarted server (the
    file), while a new sign-in of the same person (new iat and nonce) is not."""
    from gpuledger.ledger import signouts

    ended = {"is_logged_in": True, "email": "sam@example.com", "sub": "s", "iat": 1000, "nonce": "a"}
    fresh = dict(ended, iat=2000, nonce="b")
    assert not signouts.signed_out(ended, tmp_path)
    signouts.record_sign_out(ended, tmp_path)
    assert signouts.signed_out(ended, tmp_path) and not signouts.signed_out(fresh, tmp_path)
    signouts._MEMORY.clear()  # a restarted server reads the file
    assert signouts.signed_out(ended, tmp_path) and not signouts.signed_out(fresh, tmp_path)
    assert len((tmp_path / signouts.FILE_NAME).read_text().splitlines()) == 1
