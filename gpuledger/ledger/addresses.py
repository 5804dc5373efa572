"""What a mail address must look like: the one check for every address gpuledger sends to."""

from __future__ import annotations


def address_problem(address: str) -> str | None:
    """Why ``address`` is not a mail address (None when it is one): ``local@domain``, nothing that would
    end a header or split a list (space, ``<>``, ``,;``, a control character such as CR or LF). The one check for every address gpuledger
    sends to (--mail-to, [reports.team_mail])."""
    local, at, domain = address.rpartition("@")
    if not at or not local or not domain:
        return "is not a mail address (local@domain)"
    if any(c in " <>,;" or ord(c) < 32 or 127 <= ord(c) < 160 for c in address):
        return "is not a mail address (it holds a space, <, >, a comma, a semicolon or a control character)"
    return None
