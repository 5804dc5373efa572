"""Who may see what on the dashboard: the optional OIDC sign-in (``[auth]``) and team scoping (``[access]``).

Off by default: a settings file without ``[auth]`` leaves the dashboard open to whoever can reach it (it
binds 127.0.0.1 unless told otherwise). With ``[auth]``, Streamlit's own ``st.login`` signs people in
through the provider, and ``[access]`` decides what each signed-in person sees:

- an **admin** sees the whole fleet;
- a **lead** sees only the teams mapped to them (every page, download and report is filtered to them);
- anyone else sees a message that no team is mapped to them, and no data.

A principal in ``[access]`` is one of ``ana@example.com`` (that email), ``@example.com`` (every email of
that domain) or ``group:nlp-leads`` (everyone whose group claim, ``access.group_claim``, lists that group).
An email only counts when the provider vouches for it: the ID token's ``email_verified`` claim must be the
JSON boolean ``true``. A string (``"false"``, ``"true"``: some providers send strings), a number or a missing
claim does not count, so whoever can put any address on a provider account cannot borrow a lead's view (the
"nOAuth" hole known from Microsoft Entra ID, which sends no ``email_verified`` at all). The per-provider rule:
for a provider that never sends the claim (Entra ID, some SAML bridges), map people by ``group:NAME`` (their
group claim), not by email; docs/settings.md says so.

The client secret never sits in the settings file (which people commit): it comes from the environment
variable named by ``auth.client_secret_env`` or from ``client_secret`` under ``[auth]`` in
``.streamlit/secrets.toml``. :func:`streamlit_auth_section` assembles what Streamlit itself reads.
"""

from __future__ import annotations

import os
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuledger.ledger.errors import SettingsError

DEFAULT_SECRET_ENV = "GPULEDGER_OIDC_CLIENT_SECRET"
DEFAULT_COOKIE_ENV = "GPULEDGER_COOKIE_SECRET"
DEFAULT_GROUP_CLAIM = "groups"


@dataclass(frozen=True)
class AuthSettings:
    """``[auth]``: the OIDC provider the dashboard signs people in with."""

    server_metadata_url: str  # the provider's .well-known/openid-configuration URL
    client_id: str
    client_secret_env: str = DEFAULT_SECRET_ENV  # env var holding the client secret
    cookie_secret_env: str = DEFAULT_COOKIE_ENV  # env var holding the key that signs the sign-in cookie
    redirect_uri: str | None = None  # default http://localhost:PORT/oauth2callback


@dataclass(frozen=True)
class AccessSettings:
    """``[access]``: admins, and per team the principals who may see it (see the module docstring)."""

    admins: tuple[str, ...] = ()
    teams: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (team, principals), sorted by team
    group_claim: str = DEFAULT_GROUP_CLAIM


@dataclass(frozen=True)
class Scope:
    """What one signed-in person may see: everything (``admin``), the listed ``teams``, or nothing."""

    who: str
    admin: bool = False
    teams: tuple[str, ...] = ()
    # the email was not matched because the provider did not vouch for it: what its email_verified said
    # (repr, "missing" when absent), None when it did vouch or sent no email
    email_unverified: str | None = None

    @property
    def sees_anything(self) -> bool:
        return self.admin or bool(self.teams)


# ---------------------------------------------------------------- parsing the settings file


def _text(path: Path, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(path, key, f"must be a non-empty string, got {value!r}")
    return value.strip()


def _url(path: Path, key: str, value: Any) -> str:
    text = _text(path, key, value)
    if not text.startswith(("https://", "http://")):
        raise SettingsError(path, key, f"must be an absolute http(s) URL, got {text!r}")
    return text


def parse_auth(path: Path, raw: Any) -> AuthSettings | None:
    """``[auth]`` → AuthSettings (None when the section is absent: sign-in is off)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SettingsError(path, "auth", "must be a table")
    known = {"server_metadata_url", "client_id", "client_secret_env", "cookie_secret_env", "redirect_uri"}
    unknown = raw.keys() - known
    if "client_secret" in unknown or "cookie_secret" in unknown:
        name = "client_secret" if "client_secret" in unknown else "cookie_secret"
        raise SettingsError(
            path,
            f"auth.{name}",
            "does not belong in the settings file: put it in the environment variable named by "
            f"auth.{name}_env, or under [auth] in .streamlit/secrets.toml",
        )
    if unknown:
        raise SettingsError(path, f"auth.{sorted(unknown)[0]}", "is not a known setting")
    for required in ("server_metadata_url", "client_id"):
        if required not in raw:
            raise SettingsError(path, f"auth.{required}", "is required when [auth] is present")
    redirect = raw.get("redirect_uri")
    if redirect is not None:
        redirect = _url(path, "auth.redirect_uri", redirect)
        if not redirect.endswith("/oauth2callback"):
            raise SettingsError(path, "auth.redirect_uri", "must end with /oauth2callback")
    return AuthSettings(
        server_metadata_url=_url(path, "auth.server_metadata_url", raw["server_metadata_url"]),
        client_id=_text(path, "auth.client_id", raw["client_id"]),
        client_secret_env=_text(
            path, "auth.client_secret_env", raw.get("client_secret_env", DEFAULT_SECRET_ENV)
        ),
        cookie_secret_env=_text(
            path, "auth.cookie_secret_env", raw.get("cookie_secret_env", DEFAULT_COOKIE_ENV)
        ),
        redirect_uri=redirect,
    )


def _principal(path: Path, key: str, value: Any) -> str:
    text = _text(path, key, value)
    if text.startswith("group:"):
        if not text.removeprefix("group:").strip():
            raise SettingsError(path, key, "names no group after 'group:'")
        return text
    if text.startswith("@"):
        if "." not in text[1:] or "@" in text[1:]:
            raise SettingsError(path, key, f"must be a domain like @example.com, got {text!r}")
        return text.lower()
    local, at, domain = text.partition("@")
    if not (local and at and "." in domain):
        raise SettingsError(path, key, f"must be an email, @domain or group:NAME, got {text!r}")
    return text.lower()


def _principals(path: Path, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise SettingsError(path, key, "must be a list of emails, @domains or group:NAMEs")
    return tuple(_principal(path, f"{key}[{i}]", v) for i, v in enumerate(value))


def parse_access(path: Path, raw: Any) -> AccessSettings:
    """``[access]`` → AccessSettings (empty when absent)."""
    if raw is None:
        return AccessSettings()
    if not isinstance(raw, dict):
        raise SettingsError(path, "access", "must be a table")
    unknown = raw.keys() - {"admins", "teams", "group_claim"}
    if unknown:
        raise SettingsError(path, f"access.{sorted(unknown)[0]}", "is not a known setting")
    teams_raw = raw.get("teams", {})
    if not isinstance(teams_raw, dict):
        raise SettingsError(path, "access.teams", "must be a table: team = [principals]")
    teams = tuple(
        (str(team), _principals(path, f"access.teams.{team}", who)) for team, who in sorted(teams_raw.items())
    )
    return AccessSettings(
        admins=_principals(path, "access.admins", raw.get("admins", [])),
        teams=teams,
        group_claim=_text(path, "access.group_claim", raw.get("group_claim", DEFAULT_GROUP_CLAIM)),
    )


# ---------------------------------------------------------------- who sees what


def _claim_groups(claims: Mapping[str, Any], claim: str) -> set[str]:
    value = claims.get(claim)
    if isinstance(value, str):
        return {value}
    if isinstance(value, list | tuple):
        return {str(v) for v in value}
    return set()


def _matches(principal: str, email: str | None, groups: set[str]) -> bool:
    if principal.startswith("group:"):
        return principal.removeprefix("group:") in groups
    if email is None:
        return False
    if principal.startswith("@"):
        return email.endswith(principal)
    return email == principal


def may_change_settings(scope: Scope | None) -> bool:
    """Who may write what every figure rests on (the settings file: prices, thresholds, clusters): anyone
    who reaches the dashboard while sign-in is off (``scope`` None: as before, loopback by default), and
    with sign-in only an admin. A lead's price edit would change every team's spend, not only theirs (a
    lead once took fleet spend from $17,334.49 to $3,604.64). Every page that writes asks this."""
    return scope is None or scope.admin


def resolve_scope(access: AccessSettings, claims: Mapping[str, Any]) -> Scope:
    """The Scope of a signed-in person, from their identity-token claims (``st.user``)."""
    raw_email = claims.get("email")
    verified = email_verified(claims)
    email = raw_email.strip().lower() if isinstance(raw_email, str) and verified else None
    groups = _claim_groups(claims, access.group_claim)
    who = str(raw_email or claims.get("name") or claims.get("sub") or "unknown")
    if any(_matches(p, email, groups) for p in access.admins):
        return Scope(who=who, admin=True)
    teams = tuple(team for team, who_may in access.teams if any(_matches(p, email, groups) for p in who_may))
    unverified = None
    if isinstance(raw_email, str) and not verified:
        unverified = repr(claims["email_verified"]) if "email_verified" in claims else "missing"
    return Scope(who=who, teams=teams, email_unverified=unverified)


def email_verified(claims: Mapping[str, Any]) -> bool:
    """Whether the provider vouches for the email: ``email_verified`` is the boolean true, nothing else."""
    return claims.get("email_verified") is True


# ---------------------------------------------------------------- what Streamlit reads


def _secrets_toml(root: Path) -> dict[str, Any]:
    """``[auth]`` of ``.streamlit/secrets.toml`` in the working directory or beside app.py (empty if none)."""
    for folder in {Path.cwd(), root}:
        p = folder / ".streamlit" / "secrets.toml"
        if p.is_file():
            try:
                data = tomllib.loads(p.read_text(encoding="utf-8"))
            except tomllib.TOMLDecodeError as exc:
                raise SettingsError(p, "(syntax)", str(exc)) from None
            section = data.get("auth", {})
            return section if isinstance(section, dict) else {}
    return {}


def streamlit_auth_section(
    auth: AuthSettings, *, port: int, root: Path, settings_path: str, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The ``[auth]`` table Streamlit's ``st.login`` reads from its secrets file.

    The client secret comes from ``$<client_secret_env>``, else ``client_secret`` in
    ``.streamlit/secrets.toml``; without one this raises a SettingsError saying where to put it. The cookie
    key comes from ``$<cookie_secret_env>``, else ``cookie_secret`` in secrets.toml, else a random one for
    this server run (sign-ins then end when the server restarts).
    """
    env = os.environ if env is None else env
    stored = _secrets_toml(root)
    client_secret = env.get(auth.client_secret_env) or stored.get("client_secret")
    if not client_secret:
        raise SettingsError(
            settings_path,
            "auth.client_secret_env",
            f"no client secret: set ${auth.client_secret_env}, or client_secret under [auth] in "
            ".streamlit/secrets.toml",
        )
    cookie_secret = (
        env.get(auth.cookie_secret_env) or stored.get("cookie_secret") or secrets.token_urlsafe(32)
    )
    return {
        "redirect_uri": auth.redirect_uri or f"http://localhost:{port}/oauth2callback",
        "cookie_secret": str(cookie_secret),
        "client_id": auth.client_id,
        "client_secret": str(client_secret),
        "server_metadata_url": auth.server_metadata_url,
    }


def toml_table(name: str, values: Mapping[str, str]) -> str:
    """``[name]`` with string values, quoted for TOML (json's escapes are TOML basic-string escapes)."""
    import json

    lines = [f"[{name}]"] + [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"
