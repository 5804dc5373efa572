"""Training logs → ``training_runs`` (one row per run) and ``train_log`` (one row per logged step).

Formats: Hugging Face ``trainer_state.json`` (:class:`HfTrainerState`), LLaMA-Factory ``trainer_log.jsonl``
(:class:`LlamaFactoryLog`) and PyTorch Lightning CSVLogger ``metrics.csv`` (+ ``hparams.yaml`` beside it)
(:class:`LightningMetrics`). W&B run files live in collectors/wandb.py.

How a log is tied to a job (docs/formats-jobs.md says the same for users):

- ``--job ID`` names the job (a scheduler job ingested before or after); nothing is written to ``jobs`` then.
- otherwise the run gets its own job, ``<source>:<run>`` where ``<run>`` is the directory holding the file
  (the file's stem when it was renamed, e.g. ``slm_training_version_0_metrics``), with kind ``training``,
  ``gpu_count`` 0 (these logs do not say how many GPUs ran them: tie them with ``--job`` to get cost), no
  start/end (they carry no wall-clock time), and state ``COMPLETED`` when the log has its final summary
  (``train_runtime``), else ``UNKNOWN``.
  The two Hugging Face formats get different prefixes (``hf:`` and ``llamafactory:``) so one never replaces
  the other's run record.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from collectors.base import IngestOptions, Sniff, quote
from collectors.checkpoints import after_hf_stage, after_lightning_stage, after_llamafactory_stage
from collectors.json_lines import JsonLines, json_lines
from collectors.lines import csv_layout_problem, file_lines, reader_error_line
from collectors.row_checks import Check, first_violation
from collectors.sql_text import json_object_limit, sql_path
from collectors.validate import find_violations, name_columns
from gpuledger.ledger.errors import FormatError


def run_name(path: Path, canonical: str) -> str:
    """The run a log belongs to: its directory for a file with the tool's own name, else the file's stem."""
    return path.parent.name if path.name == canonical else path.stem


def run_job_id(path: Path, canonical: str, prefix: str, opts: IngestOptions) -> str:
    return opts.job_id or f"{prefix}:{run_name(path, canonical)}"


def stage_own_job(con: duckdb.DuckDBPyConnection, job_id: str, source: str, finished: bool) -> None:
    """The job row of a run that no scheduler record was named for (see the module docstring)."""
    con.execute(
        """CREATE TEMP TABLE stage_jobs AS SELECT ? AS job_id, ? AS source, 'training' AS kind,
               0.0::DOUBLE AS gpu_count, ? AS state, ? AS name,
               NULL::TIMESTAMP AS start_ts, NULL::TIMESTAMP AS end_ts""",
        [job_id, source, "COMPLETED" if finished else "UNKNOWN", job_id.split(":", 1)[-1]],
    )


def _duckdb_failure(path: Path, exc: duckdb.Error, what: str) -> FormatError:
    text = str(exc).split("\n")[0]
    if what == "CSV" and "sniffing" in text:
        # DuckDB's sniffer says only that it could not lay the file out; the line that breaks the layout
        # (an empty line, a stray \r, an unclosed quote, a record of another width) is found by a scan
        found = csv_layout_problem(path)
        if found:
            return FormatError(path, found[0], f"not valid CSV: {found[1]}")
    # a whole JSON document's messages name a byte, which reading() turns into a line
    line = None if what == "JSON" else reader_error_line(path, str(exc), csv=what == "CSV")
    return FormatError(path, line, f"not valid {what}: {text[:250]}")


def _num(expr: str, key: str) -> str:
    return f"TRY_CAST(json_extract_string({expr}, '$.{key}') AS DOUBLE)"


# The rules every training-log reader shares (HF trainer_state.json, LLaMA-Factory, Lightning):
# - an entry without a step (a script's predict_* metrics appended after training, an epoch summary with no
#   step) is no point of the training curve: it is skipped and counted in the report under STEPLESS_NOTE,
#   never a reason to refuse the file;
# - a run's token count is the latest one logged, by a train or an eval entry (latest_tokens).
STEPLESS_NOTE = "log entries without a step (skipped)"
HF_HAS_STEP = f"(json_type(e) = 'OBJECT' AND {_num('e', 'step')} IS NOT NULL)"
HF_TOKEN_KEYS = ("num_input_tokens_seen", "num_tokens", "eval_num_tokens")


def latest_tokens(value: str, tokens: str = "tokens_seen") -> str:
    """SQL aggregate over a staged train log: ``value`` of the row with the latest token count, the count
    at the highest step, the larger at one step (a train and an eval entry of one step). Token counts are
    cumulative, so this is the run's count whichever kind of entry logged it last."""
    return f"arg_max({value}, (step, {tokens})) FILTER (WHERE {tokens} IS NOT NULL)"


class HfTrainerState:
    name = "hf_trainer_state"
    description = "Hugging Face Trainer trainer_state.json (log_history; old and new schemas)"

    def sniff(self, path: Path, head: str) -> Sniff:
        text = head.lstrip("\ufeff").lstrip()
        if text.startswith("{") and '"log_history"' in text and '"global_step"' in text:
            return Sniff(0.95)
        if path.name == "trainer_state.json":
            return Sniff(0, "hf_trainer_state: no log_history/global_step keys")
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        src = sql_path(path)[1:-1]
        try:
            con.execute(
                f"""CREATE TEMP TABLE hf_state AS SELECT json AS s
                    FROM read_json_objects('{src}', format='unstructured', maximum_object_size={json_object_limit(path)})"""
            )
        except duckdb.Error as exc:
            raise _duckdb_failure(path, exc, "JSON") from None
        ok = con.execute(
            "SELECT count(*) FROM hf_state WHERE json_type(s, '$.log_history') = 'ARRAY'"
        ).fetchall()[0][0]
        if ok != 1:
            raise FormatError(path, None, 'no "log_history" list: not a Hugging Face trainer_state.json')
        con.execute(
            """CREATE TEMP TABLE hf_log AS
               SELECT generate_subscripts(h, 1) AS idx, unnest(h) AS e
               FROM (SELECT json_extract(s, '$.log_history[*]') AS h FROM hf_state)"""
        )
        try:
            first_violation(
                con,
                path,
                "hf_log",
                [
                    Check(
                        f"NOT isfinite({_num('e', 'step')})",
                        "step is {value}, not a finite number",
                        _num("e", "step"),
                    ),
                    Check(
                        f"NOT abs({_num('e', 'step')}) < 9.2e18",
                        "step is {value}, too large for a step count",
                        _num("e", "step"),
                    ),
                ],
                line_col="idx",
                where=HF_HAS_STEP,
            )
        except FormatError as exc:  # idx is the entry's position in log_history: its line, from a scan
            n = (exc.line or 1) - 1
            lines = _hf_lines(con, path)
            at = (lines.items[n][1].get("step", lines.items[n][0])) if lines else None
            raise FormatError(path, at, f"log_history[{n}] {exc.reason}") from None
        job_id = run_job_id(path, "trainer_state.json", "hf", opts)
        con.execute(
            f"""
            CREATE TEMP TABLE stage_train_log AS
            SELECT {quote(job_id)} AS job_id, CAST({_num("e", "step")} AS BIGINT) AS step,
                   {_num("e", "epoch")} AS epoch, {_num("e", "loss")} AS loss,
                   {_num("e", "eval_loss")} AS eval_loss, {_num("e", "learning_rate")} AS learning_rate,
                   -- num_input_tokens_seen 0 means token counting was off, not zero tokens; TRL's
                   -- SFTTrainer logs its own cumulative count as num_tokens, and on eval entries as
                   -- eval_num_tokens (the training tokens seen by then)
                   coalesce({", ".join(f"nullif({_num('e', k)}, 0)" for k in HF_TOKEN_KEYS)}) AS tokens_seen,
                   'log_history[' || (idx - 1) || ']' AS row_label, idx
            FROM hf_log
            WHERE json_type(e, '$.train_runtime') IS NULL AND {HF_HAS_STEP}
            ORDER BY idx
            """
        )
        # The final summary entry (train_runtime, train_samples_per_second, total_flos) describes the run.
        con.execute(
            f"""
            CREATE TEMP TABLE stage_training_runs AS
            WITH summary AS (SELECT e FROM hf_log WHERE json_type(e, '$.train_runtime') IS NOT NULL
                             ORDER BY idx DESC LIMIT 1),
                 tokens AS (SELECT {latest_tokens("tokens_seen")} AS t FROM stage_train_log)
            SELECT {quote(job_id)} AS job_id, 'hf_trainer' AS source,
                   TRY_CAST({_num("s", "train_batch_size")} AS INTEGER) AS batch_size,
                   coalesce(nullif({_num("s", "num_input_tokens_seen")}, 0), (SELECT t FROM tokens)) AS tokens,
                   coalesce({_num("s", "epoch")}, {_num("(SELECT e FROM summary)", "epoch")}) AS epochs,
                   TRY_CAST(coalesce({_num("s", "global_step")}, {_num("(SELECT e FROM summary)", "step")}) AS BIGINT) AS steps,
                   {_num("(SELECT e FROM summary)", "train_runtime")} AS runtime_s,
                   {_num("(SELECT e FROM summary)", "train_samples_per_second")} AS samples_per_s,
                   {_num("(SELECT e FROM summary)", "train_tokens_per_second")} AS tokens_per_s,
                   coalesce({_num("s", "total_flos")}, {_num("(SELECT e FROM summary)", "total_flos")}) AS total_flos
            FROM hf_state
            """
        )
        name_columns(
            con,
            "training_runs",
            {
                "runtime_s": "train_runtime",
                "samples_per_s": "train_samples_per_second",
                "tokens_per_s": "train_tokens_per_second",
                "total_flos": "total_flos",
                "steps": "global_step",
                "batch_size": "train_batch_size",
            },
        )
        if _implausible(con, opts):  # only then is the file scanned for the lines the messages name
            _stage_hf_lines(con, path)
        stepless = con.execute(f"SELECT count(*) FROM hf_log WHERE NOT {HF_HAS_STEP}").fetchall()[0][0]
        finished = con.execute("SELECT runtime_s IS NOT NULL FROM stage_training_runs").fetchall()[0][0]
        if not opts.job_id:
            stage_own_job(con, job_id, "hf_trainer", bool(finished))
        notes = after_hf_stage(con, path, opts.job_id)  # the newest checkpoint → the job's (checkpoints.py)
        if stepless:
            notes = {STEPLESS_NOTE: int(stepless), **notes}
        con.execute("DROP TABLE temp.hf_log")
        con.execute("DROP TABLE temp.hf_state")
        return notes


def _implausible(con: duckdb.DuckDBPyConnection, opts: IngestOptions) -> bool:
    """Would collectors/validate.py reject (or skip) a staged training row? (The same rules, asked early.)"""
    return any(
        find_violations(
            con, table, source=f"temp.stage_{table}", staged=True, max_job_days=opts.max_job_days, limit=1
        )
        for table in ("training_runs", "train_log")
    )


def _hf_lines(con: duckdb.DuckDBPyConnection, path: Path) -> JsonLines | None:
    """The lines of trainer_state.json's keys and log_history entries, when the scan found the same entries
    DuckDB did (else None: the messages then name the entry by its index)."""
    found = json_lines(path, "log_history")
    entries = con.execute("SELECT count(*) FROM hf_log").fetchall()[0][0]
    return found if found is not None and len(found.items) == entries else None


# stage_train_log column → the log_history keys its value comes from (first present wins)
_HF_ENTRY_KEYS = {
    "step": ("step",),
    "epoch": ("epoch",),
    "loss": ("loss",),
    "eval_loss": ("eval_loss",),
    "learning_rate": ("learning_rate",),
    "tokens_seen": ("num_input_tokens_seen", "num_tokens", "eval_num_tokens"),
}
# stage_training_runs column → (top-level key, key of the final summary entry) its value comes from
_HF_RUN_KEYS = {
    "batch_size": ("train_batch_size", None),
    "epochs": ("epoch", "epoch"),
    "steps": ("global_step", "step"),
    "runtime_s": (None, "train_runtime"),
    "samples_per_s": (None, "train_samples_per_second"),
    "tokens_per_s": (None, "train_tokens_per_second"),
    "total_flos": ("total_flos", "total_flos"),
}


def _stage_hf_lines(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """``line_no`` (the entry's first line) and ``line_no__<column>`` (the line of the key the value came
    from) on the staged train log and run, so a rejection names a line of trainer_state.json."""
    lines = _hf_lines(con, path)
    if lines is None:
        return
    entries = [line for line, _ in lines.items]
    per_key = {
        col: [next((own[k] for k in keys if k in own), None) for _, own in lines.items]
        for col, keys in _HF_ENTRY_KEYS.items()
    }
    cols = ", ".join(f"unnest(${col}) AS line_no__{col}" for col in per_key)
    con.execute(
        f"""CREATE TEMP TABLE hf_lines AS
            SELECT unnest(range(1, len($entries) + 1)) AS idx, unnest($entries) AS line_no, {cols}""",
        {"entries": entries, **per_key},
    )
    picked = ", ".join(["l.line_no", *(f"l.line_no__{col}" for col in per_key)])
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE stage_train_log AS
            SELECT t.*, {picked} FROM stage_train_log t LEFT JOIN hf_lines l ON l.idx = t.idx ORDER BY t.idx"""
    )
    summary = con.execute(
        "SELECT max(idx) FROM hf_log WHERE json_type(e, '$.train_runtime') IS NOT NULL"
    ).fetchall()[0][0]
    line_of = {}
    for col, (top, inner) in _HF_RUN_KEYS.items():
        used_top = (
            top is not None
            and con.execute(f"SELECT {_num('s', top)} IS NOT NULL FROM hf_state").fetchall()[0][0]
        )
        if used_top:
            line_of[col] = lines.keys.get(top)
        elif inner is not None and summary is not None:
            line, own = lines.items[summary - 1]
            line_of[col] = own.get(inner, line)
    tokens_top = con.execute(
        f"SELECT nullif({_num('s', 'num_input_tokens_seen')}, 0) IS NOT NULL FROM hf_state"
    ).fetchall()[0][0]
    tokens_line = (
        str(lines.keys.get("num_input_tokens_seen", "NULL"))
        if tokens_top
        else f"(SELECT {latest_tokens('line_no__tokens_seen')} FROM stage_train_log)"
    )
    extra = "".join(f", {int(v)}::BIGINT AS line_no__{col}" for col, v in line_of.items() if v is not None)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE stage_training_runs AS
            SELECT *{extra}, {tokens_line}::BIGINT AS line_no__tokens FROM stage_training_runs"""
    )
    con.execute("DROP TABLE temp.hf_lines")


def _hms_s(v: str) -> str:
    """Python timedelta text (``4 days, 7:18:24``, ``1 day, 0:00:01``, ``0:03:29``) → seconds."""
    pat = r"'^(?:(\d+) days?, )?(\d+):(\d{2}):(\d{2}(?:\.\d+)?)$'"

    def grp(i: int) -> str:
        return f"coalesce(TRY_CAST(nullif(regexp_extract({v}, {pat}, {i}), '') AS DOUBLE), 0)"

    return (
        f"(CASE WHEN regexp_matches({v}, {pat}) "
        f"THEN {grp(1)} * 86400 + {grp(2)} * 3600 + {grp(3)} * 60 + {grp(4)} END)"
    )


class LlamaFactoryLog:
    name = "llamafactory_log"
    description = "LLaMA-Factory trainer_log.jsonl (current_steps, loss, elapsed_time per log line)"

    def sniff(self, path: Path, head: str) -> Sniff:
        first = head.lstrip("\ufeff").lstrip().split("\n", 1)[0]
        if first.startswith("{") and '"current_steps"' in first and '"elapsed_time"' in first:
            return Sniff(0.95)
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        src = sql_path(path)[1:-1]
        try:
            con.execute(
                f"""CREATE TEMP TABLE lf_log AS SELECT row_number() OVER () AS line_no, json AS e
                    FROM read_json_objects('{src}', format='newline_delimited')"""
            )
        except duckdb.Error as exc:
            raise _duckdb_failure(path, exc, "JSON Lines") from None
        file_lines(path, csv=False).renumber(con, "lf_log")
        elapsed_text = "json_extract_string(e, '$.elapsed_time')"
        steps_text = "json_extract_string(e, '$.current_steps')"
        has_step = f"({steps_text} IS NOT NULL)"  # no current_steps (or null): skipped, STEPLESS_NOTE
        first_violation(
            con,
            path,
            "lf_log",
            [
                Check(f"{_num('e', 'current_steps')} IS NULL", "current_steps is not a number: {value}", "e"),
                Check(
                    f"NOT isfinite({_num('e', 'current_steps')})",
                    "current_steps is {value}, not a finite number",
                    _num("e", "current_steps"),
                ),
                Check(
                    f"NOT abs({_num('e', 'current_steps')}) < 9.2e18",
                    "current_steps is {value}, too large for a step count",
                    _num("e", "current_steps"),
                ),
                Check(
                    f"{elapsed_text} IS NOT NULL AND {_hms_s(elapsed_text)} IS NULL",
                    'elapsed_time is not a duration: "{value}"',
                    elapsed_text,
                ),
            ],
            where=has_step,
        )
        job_id = run_job_id(path, "trainer_log.jsonl", "llamafactory", opts)
        elapsed = _hms_s(elapsed_text)
        con.execute(
            f"""
            CREATE TEMP TABLE stage_train_log AS
            SELECT {quote(job_id)} AS job_id, CAST({_num("e", "current_steps")} AS BIGINT) AS step,
                   {_num("e", "epoch")} AS epoch, {elapsed} AS elapsed_s, {_num("e", "loss")} AS loss,
                   {_num("e", "eval_loss")} AS eval_loss, {_num("e", "learning_rate")} AS learning_rate,
                   nullif({_num("e", "total_tokens")}, 0) AS tokens_seen, line_no
            FROM lf_log WHERE {has_step} ORDER BY line_no
            """
        )
        con.execute(
            f"""
            CREATE TEMP TABLE stage_training_runs AS
            SELECT {quote(job_id)} AS job_id, 'llamafactory' AS source,
                   max(epoch) AS epochs, max(step) AS steps, max(elapsed_s) AS runtime_s,
                   {latest_tokens("tokens_seen")} AS tokens,
                   {latest_tokens("tokens_seen")} / nullif(max(elapsed_s), 0) AS tokens_per_s,
                   -- the line each run figure came from (the largest value; NaN sorts above all numbers)
                   arg_max(line_no, epoch) AS line_no__epochs, arg_max(line_no, step) AS line_no__steps,
                   arg_max(line_no, elapsed_s) AS line_no__runtime_s,
                   {latest_tokens("line_no")} AS line_no__tokens,
                   coalesce({latest_tokens("line_no")}, arg_max(line_no, elapsed_s)) AS line_no__tokens_per_s
            FROM stage_train_log
            """
        )
        name_columns(
            con,
            "train_log",
            {"step": "current_steps", "elapsed_s": "elapsed_time", "tokens_seen": "total_tokens"},
        )
        name_columns(
            con,
            "training_runs",
            {"steps": "current_steps", "runtime_s": "elapsed_time", "tokens": "total_tokens"},
        )
        done = con.execute(
            f"SELECT bool_or({_num('e', 'current_steps')} >= {_num('e', 'total_steps')}) FROM lf_log"
        ).fetchall()[0][0]
        if not opts.job_id:
            stage_own_job(con, job_id, "llamafactory", bool(done))
        stepless = con.execute(f"SELECT count(*) FROM lf_log WHERE NOT {has_step}").fetchall()[0][0]
        con.execute("DROP TABLE temp.lf_log")
        notes = after_llamafactory_stage(con, path, opts.job_id)  # the newest checkpoint (checkpoints.py)
        return {STEPLESS_NOTE: int(stepless), **notes} if stepless else notes


# hparams.yaml keys (lower case) → training_runs columns; first present wins.
HPARAMS = {
    "hidden_size": ("hidden_size", "d_model", "n_embd", "dim", "embed_dim"),
    "n_layers": ("n_layers", "num_layers", "n_layer", "num_hidden_layers", "layers"),
    "seq_len": ("seq_len", "max_seq_len", "block_size", "max_length", "context_length", "seq_length"),
    "batch_size": ("batch_size", "train_batch_size", "per_device_train_batch_size", "micro_batch_size"),
    "grad_accum": ("accumulate_grad_batches", "gradient_accumulation_steps", "grad_accum"),
}
LOSS_COLS = ("train_loss_step", "train_loss", "loss", "train/loss")
EVAL_COLS = ("val_loss", "valid_loss", "eval_loss", "val/loss")
# A Lightning column logged by trainer.test() / trainer.predict() after training (``test_RMSE``, ``test/acc``,
# ``acc_test``): a row holding only such metrics is not an epoch trained, though Lightning writes it with the
# next epoch number (a run of epochs 0-99 ends with a test row at epoch 100).
TEST_COL = re.compile(r"^(test|predict)([_/.\-]|$)|[_/.\-](test|predict)$", re.IGNORECASE)
PL_INDEX_COLS = ("epoch", "step", "line_no")


def trained_row_sql(cols: list[str]) -> str:
    """SQL: does a Lightning row hold a metric of training or validation — any non-empty cell but its epoch,
    its step and test/predict metrics? Only such rows count as epochs trained (the step count keeps every
    row: a test row's step is the global step training ended at)."""
    metric = [c for c in cols if c not in PL_INDEX_COLS and not TEST_COL.search(c)]
    if not metric:
        return "false"
    return "(" + " OR ".join(f"nullif(trim(\"{c}\"), '') IS NOT NULL" for c in metric) + ")"


def read_flat_yaml(path: Path) -> dict[str, str]:
    """Scalar ``key: value`` lines of a YAML file (what Lightning's save_hyperparameters writes), keyed by
    their dotted path: a nested config (``cfg:`` / ``  data:`` / ``    batch_size: 64``) gives
    ``cfg.data.batch_size``, the same key as a literal ``cfg.data.batch_size: 64`` line.

    Lists, flow collections, anchors and block scalars are skipped: gpuledger only reads scalar sizes.
    """
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # (indent, key) of the mappings the line is inside
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        body = line.lstrip(" ")
        if not body or body.startswith(("#", "- ", "---")) or body == "-":
            continue
        indent = len(line) - len(body)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        # ``key: value``; the value's ends stripped by str.strip (a lazy ``(\S.*?)\s*$`` took time growing
        # with the square of a run of spaces)
        m = re.match(r"([A-Za-z_][\w.-]*+):(.*)", body)
        rest = m.group(2) if m else ""
        if not m or (rest and not rest[0].isspace()):
            continue
        key, value = m.group(1).lower(), (rest.strip() or None)
        if value is None or value.startswith("#"):
            stack.append((indent, key))  # a nested mapping starts
        elif not value.startswith(("{", "[", "&", "!", "|", ">")):
            out[".".join([k for _, k in stack] + [key])] = value.split(" #")[0].strip().strip("'\"")
    return out


def hparam(raw: dict[str, str], names: tuple[str, ...]) -> int | None:
    """The first of ``names`` with an integer value: a top-level key, else the shallowest nested key whose
    last part is that name (``cfg.data.batch_size`` for ``batch_size``)."""
    for name in names:
        found = [k for k in raw if k == name or k.endswith("." + name)]
        found.sort(key=lambda k: k.count("."))  # stable: file order among equally deep keys
        for k in found:
            if re.fullmatch(r"\d+", raw[k]):
                return int(raw[k])
    return None


def _hparams_for(path: Path) -> dict[str, int]:
    prefix = path.name[: -len("metrics.csv")] if path.name.endswith("metrics.csv") else None
    candidates = [path.with_name("hparams.yaml")]
    if prefix:
        candidates.insert(0, path.with_name(prefix + "hparams.yaml"))
    found = next((c for c in candidates if c.is_file()), None)
    if not found:
        return {}
    raw = read_flat_yaml(found)
    values = {column: hparam(raw, keys) for column, keys in HPARAMS.items()}
    return {column: v for column, v in values.items() if v is not None}


def _head(path: Path) -> str:
    with path.open("rb") as fh:
        return fh.read(64 * 1024).decode("utf-8", "replace")


class LightningMetrics:
    name = "lightning_csv"
    description = "PyTorch Lightning CSVLogger metrics.csv (+ hparams.yaml beside it)"

    def sniff(self, path: Path, head: str) -> Sniff:
        first = head.lstrip("\ufeff").split("\n", 1)[0].strip()
        cols = [c.strip() for c in first.split(",")]
        if "step" in cols and "epoch" in cols and "job_id" not in cols:
            metric = any(c in LOSS_COLS or c in EVAL_COLS or "loss" in c or c.startswith("lr-") for c in cols)
            return Sniff(0.9 if metric else 0.4)
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        src = sql_path(path)[1:-1]
        try:
            con.execute(
                f"""CREATE TEMP TABLE pl_raw AS SELECT row_number() OVER () + 1 AS line_no, *
                    FROM read_csv('{src}', header=true, all_varchar=true, strict_mode=true, null_padding=false)"""
            )
        except duckdb.Error as exc:
            raise _duckdb_failure(path, exc, "CSV") from None
        file_lines(path, csv=True).renumber(con, "pl_raw")
        cols = [r[0] for r in con.execute("DESCRIBE pl_raw").fetchall()]
        if "step" not in cols:
            # a header with "step" that the reader did not take as one: a line breaks the layout
            found = csv_layout_problem(path) if self.sniff(path, _head(path)).score else None
            if found:
                raise FormatError(path, found[0], f"not valid CSV: {found[1]}")
            raise FormatError(path, 1, 'no "step" column: not a Lightning CSVLogger metrics.csv')

        def first_of(names: tuple[str, ...]) -> str:
            present = [f"TRY_CAST(nullif(\"{c}\", '') AS DOUBLE)" for c in names if c in cols]
            return f"coalesce({', '.join(present)})" if present else "NULL::DOUBLE"

        numeric = [c for c in cols if c != "line_no"]
        first_violation(
            con,
            path,
            "pl_raw",
            [
                Check(
                    f'nullif("{c}", \'\') IS NOT NULL AND TRY_CAST("{c}" AS DOUBLE) IS NULL',
                    f'column "{c}" is not a number: "{{value}}"',
                    f'"{c}"',
                )
                for c in numeric
            ]
            + [
                Check(
                    "NOT isfinite(TRY_CAST(step AS DOUBLE))",
                    'column "step" is {value}, not a finite number',
                    "step",
                ),
                Check(
                    "abs(TRY_CAST(step AS DOUBLE)) >= 9.2e18",
                    'column "step" is {value}, too large for a step count',
                    "step",
                ),
            ],
        )
        lr_cols = tuple(c for c in cols if c.startswith("lr-") or c in ("lr", "learning_rate"))
        has_step = "(nullif(trim(step), '') IS NOT NULL)"  # a row without a step: skipped, STEPLESS_NOTE
        loss, eval_loss = first_of(LOSS_COLS), first_of(EVAL_COLS)
        job_id = run_job_id(path, "metrics.csv", "lightning", opts)
        con.execute(
            f"""
            CREATE TEMP TABLE stage_train_log AS
            SELECT {quote(job_id)} AS job_id, CAST(TRY_CAST(step AS DOUBLE) AS BIGINT) AS step,
                   {first_of(("epoch",))} AS epoch, {loss} AS loss, {eval_loss} AS eval_loss,
                   {first_of(lr_cols)} AS learning_rate, line_no
            FROM pl_raw WHERE ({loss} IS NOT NULL OR {eval_loss} IS NOT NULL) AND {has_step} ORDER BY line_no
            """
        )
        hp = _hparams_for(path)
        hp_sql = "".join(f", {v}::INTEGER AS {k}" for k, v in hp.items())
        epoch_time = first_of(("epoch_time",))
        trained = trained_row_sql(cols)
        epoch_n = f"CASE WHEN {trained} THEN TRY_CAST(epoch AS DOUBLE) END"
        con.execute(
            f"""
            CREATE TEMP TABLE stage_training_runs AS
            SELECT {quote(job_id)} AS job_id, 'lightning' AS source,
                   max({epoch_n}) + 1 AS epochs,  -- Lightning counts epochs from 0; test rows are none
                   max(CAST(TRY_CAST(step AS DOUBLE) AS BIGINT)) AS steps,
                   sum({epoch_time}) AS runtime_s {hp_sql},
                   -- the line each run figure came from: the largest value (NaN sorts above all numbers),
                   -- the smallest epoch_time for a negative sum
                   arg_max(line_no, {epoch_n}) AS line_no__epochs,
                   arg_max(line_no, TRY_CAST(step AS DOUBLE)) AS line_no__steps,
                   CASE WHEN sum({epoch_time}) < 0 THEN arg_min(line_no, {epoch_time})
                        ELSE arg_max(line_no, {epoch_time}) END AS line_no__runtime_s
            FROM pl_raw
            """
        )
        other, tested = con.execute(
            f"""SELECT count(*) FILTER ({trained}), count(*) FILTER (NOT {trained})
                FROM pl_raw WHERE {loss} IS NULL AND {eval_loss} IS NULL AND {has_step}"""
        ).fetchall()[0]
        stepless = con.execute(f"SELECT count(*) FROM pl_raw WHERE NOT {has_step}").fetchall()[0][0]
        if not opts.job_id:
            stage_own_job(con, job_id, "lightning", False)
        notes = after_lightning_stage(con, path, opts.job_id)  # the newest .ckpt → the job's (checkpoints.py)
        con.execute("DROP TABLE temp.pl_raw")
        if stepless:
            notes = {STEPLESS_NOTE: int(stepless), **notes}
        if tested:
            notes = {
                "test/predict rows (no training or validation metric: not epochs trained)": int(tested),
                **notes,
            }
        return {**({"epoch-summary rows (folded into the run)": int(other)} if other else {}), **notes}
