"""``[guard]`` and ``[[guard.policy]]`` in the settings: safe defaults, and every bad value one error naming its key."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from gpuledger.ledger.errors import SettingsError
from gpuledger.ledger.settings import Settings, from_dict
from tests.conftest import gpuledger

S = Path("s.toml")


def guard(**policy: Any) -> Any:
    return from_dict({"guard": {"policy": [{"name": "p", **policy}]}}, S).guard


def test_defaults_are_safe_notify_only_and_no_cancel_switch():
    g = guard()
    p = g.policies[0]
    assert g.allow_cancel is False
    assert p.cancel_minutes is None  # only notify
    assert p.util_pct is None  # the ledger's idle threshold
    assert p.gpu_fraction == 1.0 and p.window == "sliding" and p.memory_floor_pct is None
    assert Settings().guard.policies == ()


def test_a_full_policy_is_read():
    g = from_dict(
        {
            "guard": {
                "admins": ["ops@example.org"],
                "mail_domain": "example.org",
                "allow_cancel": True,
                "policy": [
                    {
                        "name": "idle",
                        "util_pct": 0,
                        "warn_minutes": 60,
                        "warn_again_minutes": 105,
                        "cancel_minutes": 120,
                        "checkpoint_signal": "USR1",
                        "quiet_hours": "22:00-07:00",
                        "scope": {"partitions": ["gpu"], "kinds": ["training"]},
                        "exemptions": {
                            "users": ["alice"],
                            "interactive_max_gpus": 1,
                            "interactive_max_hours": 8,
                        },
                    }
                ],
            }
        },
        S,
    ).guard
    p = g.policy("idle")
    assert p is not None
    assert (p.util_pct, p.warn_again_minutes, p.cancel_minutes, p.checkpoint_signal) == (
        0.0,
        105.0,
        120.0,
        "USR1",
    )
    assert p.quiet_hours == (dt.time(22), dt.time(7))
    assert p.scope.partitions == ("gpu",) and p.exemptions.users == ("alice",)
    assert p.exemptions.interactive_max_gpus == 1.0 and p.exemptions.interactive_max_hours == 8.0
    assert g.admins == ("ops@example.org",) and g.allow_cancel is True


@pytest.mark.parametrize(
    ("policy", "key", "reason"),
    [
        ({"util_pct": 120}, "guard.policy[0].util_pct", "must be between 0 and 100, got 120"),
        ({"gpu_fraction": 0}, "guard.policy[0].gpu_fraction", "must be above 0 and at most 1, got 0"),
        ({"window": "fixed"}, "guard.policy[0].window", "must be one of sliding, from_start, got 'fixed'"),
        ({"warn_minutes": "1h"}, "guard.policy[0].warn_minutes", "must be a number, got '1h'"),
        ({"warn_minutes": 60, "cancel_minutes": 30}, "guard.policy[0].cancel_minutes", "must be after the last warning (60 min), got 30"),
        ({"warn_minutes": 60, "warn_again_minutes": 50}, "guard.policy[0].warn_again_minutes", "must be after warn_minutes (60), got 50"),
        ({"checkpoint_signal": "USR1"}, "guard.policy[0].checkpoint_signal", "needs cancel_minutes"),
        ({"checkpoint_signal": "KILL", "cancel_minutes": 120}, "guard.policy[0].checkpoint_signal", "must be one of USR1"),
        ({"quiet_hours": "22-7"}, "guard.policy[0].quiet_hours", 'must be "HH:MM-HH:MM" in UTC'),
        ({"cancel_after": 3}, "guard.policy[0].cancel_after", "is not a known setting"),
        ({"scope": {"kinds": ["batch"]}}, "guard.policy[0].scope.kinds", "'batch' is not a job kind"),
        ({"exemptions": {"users": "alice"}}, "guard.policy[0].exemptions.users", "must be a list of names"),
        ({"exemptions": {"labels": ["off"]}}, "guard.policy[0].exemptions.labels", "'off' is not key=value"),
        ({"exemptions": {"interactive_max_gpus": 1}}, "guard.policy[0].exemptions.interactive_max_hours", "is required"),
        ({"name": "two words"}, "guard.policy[0].name", "is required: letters"),
    ],
)  # fmt: skip
def test_a_bad_policy_names_its_key(policy, key, reason):
    with pytest.raises(SettingsError) as err:
        from_dict({"guard": {"policy": [{"name": "p", **policy}]}}, S)
    assert err.value.key == key
    assert reason in str(err.value)


@pytest.mark.parametrize(
    ("guard_table", "key", "reason"),
    [
        ({"policy": [{"name": "a"}, {"name": "a"}]}, "guard.policy[1].name", "'a' names two policies"),
        ({"allow_cancel": "yes"}, "guard.allow_cancel", "must be true or false"),
        ({"admins": ["not an address"]}, "guard.admins", "is not a mail address"),
        ({"mail_domain": "a b"}, "guard.mail_domain", "must be a domain"),
        ({"polices": []}, "guard.polices", "is not a known setting"),
    ],
)
def test_a_bad_guard_table_names_its_key(guard_table, key, reason):
    with pytest.raises(SettingsError) as err:
        from_dict({"guard": guard_table}, S)
    assert err.value.key == key
    assert reason in str(err.value)


def test_the_guard_leaves_the_fingerprint_alone():
    assert from_dict({"guard": {"policy": [{"name": "p"}]}}, S).fingerprint() == Settings().fingerprint()


def test_a_bad_policy_file_is_one_error_line_from_any_command(tmp_path: Path):
    settings = tmp_path / "s.toml"
    settings.write_text('[[guard.policy]]\nname = "p"\ncancel_minutes = -5\n', encoding="utf-8")
    done = gpuledger(
        "guard",
        "replay",
        "--since",
        "7d",
        "--until",
        "1d",
        "--settings",
        str(settings),
        "--db",
        str(tmp_path / "l.duckdb"),
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"error: {settings}: setting 'guard.policy[0].cancel_minutes': must be above 0 and at most 525600, got -5"
    )
