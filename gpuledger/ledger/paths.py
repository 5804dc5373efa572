"""Where gpuledger finds its files, in a checkout and when installed from a wheel.

Two ways to run gpuledger, one set of rules:

- **In a checkout** (``pyproject.toml`` and ``app.py`` beside the ``gpuledger/`` package): the shipped data,
  ``app.py`` and ``pages/`` are read where they stand, and the ledger defaults to ``data/gpuledger.duckdb``.
- **Installed** (``pip install dist/gpuledger-*.whl``, ``pipx install .``): the wheel carries the same files as
  ``gpuledger/_bundle/`` (pyproject.toml maps them there), read through :mod:`importlib.resources`; the ledger
  defaults to the user's data dir (``$XDG_DATA_HOME/gpuledger`` or ``~/.local/share/gpuledger``).

Precedence, highest first, for the ledger: ``--db`` > ``$GPULEDGER_DB`` > the default above. For the settings:
``--settings`` > ``$GPULEDGER_SETTINGS`` > user (``$XDG_CONFIG_HOME/gpuledger/settings.toml`` or
``~/.config/gpuledger/settings.toml``) > system (``/etc/gpuledger/settings.toml``) > checkout
(``data/settings.toml``) > built-in defaults. ``gpuledger info`` prints what is in use and why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # .../gpuledger
CHECKOUT = PACKAGE_ROOT.parent
SYSTEM_SETTINGS = Path("/etc/gpuledger/settings.toml")


def in_checkout() -> bool:
    """True when gpuledger runs from a source tree (editable install or ``python -m`` in the repository)."""
    return (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / "app.py").is_file()


def shipped(relative: str) -> Path:
    """A file the project ships (``data/prices.toml``, ``app.py``, ``pages``), wherever it was installed."""
    if in_checkout():
        return CHECKOUT / relative
    bundle = resources.files("gpuledger") / "_bundle"
    return Path(str(bundle.joinpath(*relative.split("/"))))


def user_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpuledger"


def user_config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuledger"


@dataclass(frozen=True)
class Choice:
    """A path gpuledger uses and where the choice came from (``flag``, ``environment``, ``user``, ...)."""

    path: str | None
    origin: str


def choose_db(flag: str | os.PathLike[str] | None = None) -> Choice:
    if flag:
        return Choice(str(flag), "flag (--db)")
    if os.environ.get("GPULEDGER_DB"):
        return Choice(os.environ["GPULEDGER_DB"], "environment ($GPULEDGER_DB)")
    if in_checkout():
        return Choice(str(CHECKOUT / "data" / "gpuledger.duckdb"), "checkout (data/)")
    return Choice(str(user_data_dir() / "gpuledger.duckdb"), "user data dir")


def settings_candidates() -> list[tuple[Path, str]]:
    """The settings files looked for when neither ``--settings`` nor ``$GPULEDGER_SETTINGS`` names one."""
    found = [(user_config_dir() / "settings.toml", "user"), (SYSTEM_SETTINGS, "system")]
    if in_checkout():
        found.append((CHECKOUT / "data" / "settings.toml", "checkout (data/)"))
    return found


def choose_settings(flag: str | os.PathLike[str] | None = None) -> Choice:
    """The settings file in force; ``Choice(None, "built-in defaults")`` when there is none."""
    if flag:
        return Choice(str(flag), "flag (--settings)")
    if os.environ.get("GPULEDGER_SETTINGS"):
        return Choice(os.environ["GPULEDGER_SETTINGS"], "environment ($GPULEDGER_SETTINGS)")
    for path, origin in settings_candidates():
        if path.is_file():
            return Choice(str(path), origin)
    return Choice(None, "built-in defaults")
