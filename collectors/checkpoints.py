"""Checkpoints found in training logs → the tied job's ``jobs.last_checkpoint_ts`` (failed waste).

A failed run loses only the work after its last checkpoint (analytics/waste.py). A jobs table can say when
that was (``last_checkpoint``); this module finds it in the training logs themselves, so a run tied with
``--job ID`` to its scheduler job gets a checkpoint without anyone writing one down. docs/metrics.md
("Waste taxonomy", failed runs) and docs/formats-jobs.md ("Checkpoints in training logs") state the rule.

**Which step** (the newest checkpoint, first rule that gives one):

- Hugging Face ``trainer_state.json`` and LLaMA-Factory ``trainer_log.jsonl``: the ``checkpoint-N`` folders
  of the run's output directory (the file's folder, or the folder above when the file is itself inside a
  ``checkpoint-N``; HF's own ``get_last_checkpoint`` pattern ``^checkpoint-(\\d+)$``, directories only): the
  largest N, or the ``global_step`` of that folder's ``trainer_state.json`` when it has one. Else the
  ``save_steps`` the Trainer recorded (the HF file itself; for LLaMA-Factory a ``trainer_state.json`` beside
  the log) with ``save_strategy`` absent or ``steps``: S = ⌊last step ÷ save_steps⌋ × save_steps (a
  ``save_steps`` below 1 is a fraction of ``max_steps``, as in TrainingArguments).
- PyTorch Lightning ``metrics.csv``: the ModelCheckpoint files ``*.ckpt`` beside it or in its
  ``checkpoints/`` folder (``lightning_logs/version_N/checkpoints/epoch=3-step=1200.ckpt``): the largest
  ``step=`` in a name; a name with only ``epoch=E`` stands for the last step the log shows for epoch E.
  ``last.ckpt`` names no step and is not used.

Folders and files count only beside a file with the tool's own name (``trainer_state.json``,
``trainer_log.jsonl``, ``metrics.csv``): a renamed copy has left its run directory.

**When** (first rule that applies; the job's ``start_ts`` must be known):

1. the newest checkpoint's own file time (mtime of its folder's ``trainer_state.json``, the folder, or the
   ``.ckpt``) when it lies inside the job's span: the files are where training wrote them;
2. job start + the log's elapsed time at step S (LLaMA-Factory ``elapsed_time``, also read from a
   ``trainer_log.jsonl`` in an HF file's output directory; linear between the logged steps around S, from
   (0, 0) before the first);
3. job start + S × step time, step time = job span ÷ the last step known (the log's last step), only when the
   job has an end and the log reaches past S (a log that stops at its checkpoint cannot say how long the run
   went on after it).

Worked example: a job of 10 h, ``save_steps`` 500, last logged step 1,250 → S = 1,000 → step time
36,000 s ÷ 1,250 = 28.8 s → checkpoint at start + 28,800 s = hour 8 → failed waste = 2/10 of its cost.

**Never twice, never later than a jobs table:** a job whose record comes from a source with a checkpoint
field of its own (:data:`EXPLICIT_SOURCES`) keeps the earlier of its given checkpoint and the log's; any
other job's value can only have come from a log and is replaced by the log's answer, so re-ingesting a log
gives the same value again. A checkpoint that cannot be placed (the job is not in the ledger yet, has no
start, ...) is reported as a note of the ingest and nothing is written.

**Taken back with its log:** each placement is kept in ``checkpoint_placements`` (the log's ingest, the time
it placed, and the job's value before any log placed one). Removing the log's ingest (``--replace``, also
with ``--job`` naming another job) gives the job what the remaining logs place on that value, or the value
itself when none is left (:func:`withdraw`); a job whose row a newer record with a checkpoint of its own has
replaced since is left alone.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb

# Job sources whose records carry a checkpoint of their own (jobs_table.py's last_checkpoint, the demo).
# analytics/waste.py names the same sources to tell a given checkpoint from one found in a training log.
EXPLICIT_SOURCES = ("jobs_csv", "jobs_jsonl", "demo")

HF_DIR = re.compile(r"^checkpoint-(\d+)$")
CKPT_STEP = re.compile(r"(?:^|[-_])step=(\d+)")
CKPT_EPOCH = re.compile(r"(?:^|[-_])epoch=(\d+)")
HMS = re.compile(r"^(?:(\d+) days?, )?(\d+):(\d{2}):(\d{2}(?:\.\d+)?)$")  # Python timedelta text
SIBLING_LOG_MAX_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Checkpoint:
    """The newest checkpoint a log shows: its step, the evidence in words, and its file time if any."""

    step: int
    evidence: str  # "checkpoint-1000 folder", "save_steps 500", "epoch=3-step=1200.ckpt"
    saved_at: dt.datetime | None = None  # UTC, naive (the file's mtime)


def _mtime(*candidates: Path) -> dt.datetime | None:
    for p in candidates:
        try:
            ts = p.stat().st_mtime
        except OSError:
            continue
        return dt.datetime.fromtimestamp(ts, dt.UTC).replace(tzinfo=None)
    return None


def _global_step(state: Path) -> int | None:
    try:
        value = json.loads(state.read_text(encoding="utf-8")).get("global_step")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def hf_folder_checkpoint(run_dir: Path) -> Checkpoint | None:
    """The newest ``checkpoint-N`` directory of an HF output directory, or None."""
    try:
        found = [
            (int(m.group(1)), p) for p in run_dir.iterdir() if (m := HF_DIR.match(p.name)) and p.is_dir()
        ]
    except OSError:
        return None
    if not found:
        return None
    n, folder = max(found)
    state = folder / "trainer_state.json"
    step = _global_step(state)
    return Checkpoint(n if step is None else step, f"{folder.name} folder", _mtime(state, folder))


def save_steps_checkpoint(
    save_steps: float | None, save_strategy: str | None, max_steps: float | None, last_step: int
) -> Checkpoint | None:
    """The step of the last save a ``save_steps`` schedule made by ``last_step``, or None."""
    if (
        save_steps is None
        or not 0 < save_steps < 9.2e18
        or (save_strategy or "steps").lower().rsplit(".", 1)[-1] != "steps"
    ):
        return None
    every = save_steps
    if every < 1:  # TrainingArguments: a float below 1 is a ratio of the total training steps
        if max_steps is None or not 0 < max_steps < 9.2e18:
            return None
        every = math.ceil(max_steps * every)
    step = int(last_step // every * every)
    return Checkpoint(step, f"save_steps {int(every)}") if step > 0 else None


def lightning_checkpoint(run_dir: Path, epoch_last_step: dict[int, int]) -> Checkpoint | None:
    """The newest ModelCheckpoint file beside a Lightning ``metrics.csv`` or in its ``checkpoints/``."""
    found: list[tuple[int, str, Path]] = []
    for folder in (run_dir, run_dir / "checkpoints"):
        try:
            files = [p for p in folder.iterdir() if p.suffix == ".ckpt" and p.is_file()]
        except OSError:
            continue
        for p in files:
            if m := CKPT_STEP.search(p.stem):
                found.append((int(m.group(1)), p.name, p))
            elif (m := CKPT_EPOCH.search(p.stem)) and int(m.group(1)) in epoch_last_step:
                found.append((epoch_last_step[int(m.group(1))], p.name, p))
    if not found:
        return None
    step, name, p = max(found)
    return Checkpoint(step, name, _mtime(p))


def llamafactory_elapsed(log: Path) -> list[tuple[int, float]]:
    """(step, elapsed_s) of a LLaMA-Factory ``trainer_log.jsonl`` that is not the file being ingested (the
    one beside an HF trainer_state.json), sorted by step; lines it cannot read are left out, never an error."""
    try:
        if not log.is_file() or log.stat().st_size > SIBLING_LOG_MAX_BYTES:
            return []
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    best: dict[int, float] = {}
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        step, text = (e.get("current_steps"), e.get("elapsed_time")) if isinstance(e, dict) else (None, None)
        m = HMS.match(text) if isinstance(text, str) else None
        if not isinstance(step, int) or isinstance(step, bool) or m is None:
            continue
        days, h, mi, sec = m.groups()
        seconds = int(days or 0) * 86400 + int(h) * 3600 + int(mi) * 60 + float(sec)
        best[step] = max(seconds, best.get(step, 0.0))
    return sorted(best.items())


def elapsed_at(step: int, elapsed: list[tuple[int, float]]) -> float | None:
    """Seconds since training started at ``step``, linear between the logged (step, elapsed_s) pairs
    around it (sorted by step), from (0, 0) before the first; None past the last logged step."""
    if not elapsed or step > elapsed[-1][0]:
        return None
    steps = [s for s, _ in elapsed]
    i = bisect.bisect_left(steps, step)
    s1, e1 = elapsed[i]
    if s1 == step:
        return e1
    s0, e0 = elapsed[i - 1] if i > 0 else (0, 0.0)
    return e0 + (e1 - e0) * (step - s0) / (s1 - s0)


def checkpoint_time(
    ckpt: Checkpoint,
    start: dt.datetime,
    end: dt.datetime | None,
    last_step: int,
    elapsed: list[tuple[int, float]],
) -> tuple[dt.datetime | None, str]:
    """When the checkpoint was written (module docstring, rules 1–3), or None and why not."""
    if ckpt.saved_at is not None and start <= ckpt.saved_at and (end is None or ckpt.saved_at <= end):
        return ckpt.saved_at, ""
    offset = elapsed_at(ckpt.step, elapsed)
    if offset is None:
        if end is None:
            return None, "the job has no end yet and the log no elapsed time at that step"
        if last_step <= ckpt.step:
            return None, "the log stops at that step, so it cannot say how long the run went on after it"
        offset = ckpt.step * (end - start).total_seconds() / last_step
    at = start + dt.timedelta(seconds=offset)
    if end is not None and at > end:
        return (
            None,
            f"the log's elapsed time there ({offset / 3600:,.2f} h) is past the job's end (is --job right?)",
        )
    return at, ""


def place(
    con: duckdb.DuckDBPyConnection,
    job_id: str | None,
    ckpt: Checkpoint | None,
    last_step: int,
    elapsed: list[tuple[int, float]] | None = None,
) -> dict[str, int]:
    """Write ``ckpt``'s time into ``jobs.last_checkpoint_ts`` of ``job_id`` (inside the ingest's transaction),
    and note it in TEMP ``stage_checkpoints`` for :func:`record_placements`.

    Returns the ingest's note when a checkpoint was found for a ``--job`` but cannot be placed; a run with no
    ``--job`` has its own job with no start, so nothing is placed and nothing is said.
    """
    if job_id is None or ckpt is None:
        return {}
    what = f"checkpoint at step {ckpt.step:,} ({ckpt.evidence}) not placed in time for job {job_id}"
    rows = con.execute("SELECT start_ts, end_ts FROM jobs WHERE job_id = ?", [job_id]).fetchall()
    if not rows:
        return {
            f"{what}: the job is not in the ledger yet (ingest its record, then this log with --replace)": 1
        }
    start, end = rows[0]
    if start is None:
        return {f"{what}: the job has no start time": 1}
    at, why = checkpoint_time(ckpt, start, end, last_step, elapsed or [])
    if at is None:
        return {f"{what}: {why}": 1}
    current, source = con.execute(
        "SELECT last_checkpoint_ts, source FROM jobs WHERE job_id = ?", [job_id]
    ).fetchall()[0]
    placed = _placements(con, job_id)
    if placed and _combined(source, placed[0][2], [ts for _, ts, _ in placed]) != current:
        # the job's row was replaced by a record with a checkpoint of its own since: those logs no longer
        # make its value, and removing them must not restore one from before that record
        con.execute("DELETE FROM checkpoint_placements WHERE job_id = ?", [job_id])
        placed = []
    base = placed[0][2] if placed else current
    con.execute(
        "UPDATE jobs SET last_checkpoint_ts = ? WHERE job_id = ?", [_combined(source, current, [at]), job_id]
    )
    # what this ingest placed, recorded under its id once it has landed (record_placements), so that
    # removing the ingest takes it back (withdraw)
    con.execute(
        "CREATE TEMP TABLE IF NOT EXISTS stage_checkpoints (job_id VARCHAR, checkpoint_ts TIMESTAMP, base_ts TIMESTAMP)"
    )
    con.execute("INSERT INTO stage_checkpoints VALUES (?, ?, ?)", [job_id, at, base])
    return {}


def _combined(source: str | None, base: dt.datetime | None, placed: list[dt.datetime]) -> dt.datetime | None:
    """A job's last_checkpoint_ts once logs placed ``placed`` (in ingest order) on its record's ``base``: for
    a job from a source with a checkpoint of its own, the earliest of them all; else the latest log's."""
    if source in EXPLICIT_SOURCES:
        return min([t for t in (base, *placed) if t is not None], default=None)
    return placed[-1] if placed else base


def _placements(
    con: duckdb.DuckDBPyConnection, job_id: str
) -> list[tuple[int, dt.datetime, dt.datetime | None]]:
    """(ingest_id, checkpoint_ts, base_ts) of the placements on ``job_id`` in the ledger, in ingest order."""
    return [
        (int(r[0]), r[1], r[2])
        for r in con.execute(
            "SELECT ingest_id, checkpoint_ts, base_ts FROM checkpoint_placements WHERE job_id = ? ORDER BY ingest_id",
            [job_id],
        ).fetchall()
    ]


def record_placements(con: duckdb.DuckDBPyConnection, ingest_id: int) -> None:
    """Keep what :func:`place` did in this ingest (TEMP ``stage_checkpoints``) in ``checkpoint_placements``
    under ``ingest_id``; nothing to do (one catalog lookup) for an ingest that placed nothing."""
    try:
        con.table("temp.stage_checkpoints")
    except duckdb.CatalogException:
        return
    con.execute(
        "INSERT INTO checkpoint_placements SELECT job_id, ?, checkpoint_ts, base_ts FROM stage_checkpoints",
        [ingest_id],
    )
    con.execute("DROP TABLE temp.stage_checkpoints")


def withdraw(con: duckdb.DuckDBPyConnection, ingest_ids: list[int]) -> None:
    """Take back the checkpoints these (training log) ingests placed, before they are removed.

    Each job they placed one on gets the value the other logs' placements give on its record's own
    (``base_ts``): the latest remaining log's checkpoint, or the record's own when none is left (for a job
    from a source with a checkpoint field, the earliest of these). A job whose value is no longer the one
    the placements give (a newer record with its own checkpoint replaced it) is left as it is."""
    jobs = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT job_id FROM checkpoint_placements WHERE ingest_id IN (SELECT unnest(?::BIGINT[]))",
            [ingest_ids],
        ).fetchall()
    ]
    gone = set(ingest_ids)
    for job_id in jobs:
        row = con.execute("SELECT last_checkpoint_ts, source FROM jobs WHERE job_id = ?", [job_id]).fetchall()
        if not row:
            continue
        current, source = row[0]
        placed = _placements(con, job_id)
        base = placed[0][2]
        if _combined(source, base, [ts for _, ts, _ in placed]) != current:
            continue
        kept = _combined(source, base, [ts for i, ts, _ in placed if i not in gone])
        con.execute("UPDATE jobs SET last_checkpoint_ts = ? WHERE job_id = ?", [kept, job_id])


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> tuple:
    return con.execute(sql).fetchall()[0]


def _last_step(con: duckdb.DuckDBPyConnection, *extra: int | None) -> int:
    logged = _one(con, "SELECT max(step) FROM stage_train_log")[0]
    return max([int(v) for v in (logged, *extra) if v is not None] or [0])


# --- the hooks, called by the stage functions of collectors/training_logs.py ------------------------------


def after_hf_stage(con: duckdb.DuckDBPyConnection, path: Path, job_id: str | None) -> dict[str, int]:
    """HF ``trainer_state.json``: needs the TEMP tables ``hf_state`` (s: the file) and ``stage_train_log``."""
    if job_id is None:
        return {}

    def num(key: str) -> str:
        return f"TRY_CAST(json_extract_string(s, '$.{key}') AS DOUBLE)"

    save_steps, strategy, max_steps, global_step = _one(
        con,
        f"""SELECT {num("save_steps")}, json_extract_string(s, '$.save_strategy'), {num("max_steps")},
                   {num("global_step")} FROM hf_state""",
    )
    last = _last_step(
        con, int(global_step) if global_step is not None and abs(global_step) < 9.2e18 else None
    )
    ckpt, elapsed = None, []
    if path.name == "trainer_state.json":
        run_dir = path.parent.parent if HF_DIR.match(path.parent.name) else path.parent
        ckpt = hf_folder_checkpoint(run_dir)
        elapsed = llamafactory_elapsed(run_dir / "trainer_log.jsonl")  # when LLaMA-Factory ran the Trainer
    ckpt = ckpt or save_steps_checkpoint(save_steps, strategy, max_steps, last)
    return place(con, job_id, ckpt, max(last, ckpt.step) if ckpt else last, elapsed)


def after_llamafactory_stage(
    con: duckdb.DuckDBPyConnection, path: Path, job_id: str | None
) -> dict[str, int]:
    """LLaMA-Factory ``trainer_log.jsonl``: needs ``stage_train_log`` (step, elapsed_s)."""
    if job_id is None or path.name != "trainer_log.jsonl":
        return {}
    last = _last_step(con)
    ckpt = hf_folder_checkpoint(path.parent)
    state = path.with_name("trainer_state.json")
    if ckpt is None and state.is_file():
        try:
            s = json.loads(state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            s = None
        if isinstance(s, dict):
            save, strategy, most = s.get("save_steps"), s.get("save_strategy"), s.get("max_steps")
            ckpt = save_steps_checkpoint(
                float(save) if isinstance(save, int | float) else None,
                strategy if isinstance(strategy, str) else None,
                float(most) if isinstance(most, int | float) else None,
                last,
            )
    elapsed = [
        (int(s), float(e))
        for s, e in con.execute(
            """SELECT step, max(elapsed_s) FROM stage_train_log
               WHERE step IS NOT NULL AND elapsed_s IS NOT NULL GROUP BY step ORDER BY step"""
        ).fetchall()
    ]
    return place(con, job_id, ckpt, max(last, ckpt.step) if ckpt else last, elapsed)


def after_lightning_stage(con: duckdb.DuckDBPyConnection, path: Path, job_id: str | None) -> dict[str, int]:
    """Lightning ``metrics.csv``: needs the TEMP table ``pl_raw`` (all rows, VARCHAR) and ``stage_training_runs``."""
    if job_id is None or path.name != "metrics.csv":
        return {}
    cols = {r[0] for r in con.execute("DESCRIBE pl_raw").fetchall()}
    epoch_last_step: dict[int, int] = {}
    if "epoch" in cols:
        epoch_last_step = {
            int(e): int(s)
            for e, s in con.execute(
                """SELECT TRY_CAST(TRY_CAST(epoch AS DOUBLE) AS BIGINT) AS e,
                          max(TRY_CAST(TRY_CAST(step AS DOUBLE) AS BIGINT)) AS s
                   FROM pl_raw GROUP BY e HAVING e IS NOT NULL AND s IS NOT NULL"""
            ).fetchall()
        }
    steps = _one(con, "SELECT max(steps) FROM stage_training_runs")[0]
    last = _last_step(con, steps)
    ckpt = lightning_checkpoint(path.parent, epoch_last_step)
    return place(con, job_id, ckpt, max(last, ckpt.step) if ckpt else last)
