"""What every kind of advice shares: the item's shape, run families by name, and recurrence.

An item is a dict with RECOMMENDATION_COLUMNS' keys (analytics/recommend.py); the helpers here build the
common part so every advice module writes items the same way.
"""

from __future__ import annotations

import functools


def family_stem(name: str | None, job_id: str) -> str:
    """A job's run family by name: its name without the trailing parts that carry a digit (run numbers,
    week suffixes, ids): ``ft-valentina-3284`` → ``ft-valentina``, ``small-batch-gpt2-medium-b4-w1-0`` →
    ``small-batch-gpt2-medium``. A name made only of such parts is its own family."""
    return _stem(name or job_id)


# Cached by the name alone (the job id only stands in for a missing name): the failure kinds and the family
# cards ask for every job of the view (39 k on a 50 M-sample ledger, 0.25 s uncached) and names repeat (3.5 k
# distinct there). Bounded, since a dashboard runs for weeks.
@functools.lru_cache(maxsize=1 << 16)
def _stem(name: str) -> str:
    parts = name.split("-")
    while len(parts) > 1 and any(ch.isdigit() for ch in parts[-1]):
        parts.pop()
    return "-".join(parts)


def item(
    kind: str,
    *,
    target_type: str,
    target: str,
    user_name: str | None,
    team: str | None,
    evidence: str,
    action: str,
    saving_usd: float,
    confidence: str,
    job_ids: list[str],
    job_saving_usd: list[float],
    job_cost_usd: list[float | None],
    lever: str,
    addresses: list[str],
    recurring: bool,
    confidence_reasons: str | None = None,
) -> dict[str, object]:
    """One recommendation item (the keys every kind fills; batch fields are added by the batch kind)."""
    return {
        "kind": kind,
        "target_type": target_type,
        "target": target,
        "user_name": user_name,
        "team": team,
        "evidence": evidence,
        "action": action,
        "saving_usd": saving_usd,
        "confidence": confidence,
        "confidence_reasons": confidence_reasons,
        "job_ids": job_ids,
        "lever": lever,
        "job_saving_usd": job_saving_usd,
        "job_cost_usd": job_cost_usd,
        "addresses": addresses,
        "recurring": recurring,
    }


def plural(n: float, word: str) -> str:
    """``1 run``, ``2 runs``, ``1.5 GPUs``."""
    return f"{n:g} {word}" + ("" if n == 1 else "s")
