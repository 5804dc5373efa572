"""Feed ``ingest_file`` mutated real files, per parser family, and count what a bad day's input does.

    .venv/bin/python bench/fuzz.py                    # 10,000 inputs per family (hours on a small machine)
    .venv/bin/python bench/fuzz.py --count 200 --family dcgm --seed 3
    .venv/bin/python bench/fuzz.py --jobs 2 --step 250   # two processes; a running tally every 250 inputs

Each input is a real file from ../shared/datasets (the first ``BASE_LINES`` lines of a long line-oriented
one) with one to three mutations of the kinds real fleets produce: truncation, byte flips, dropped or
duplicated columns, huge numbers, NaN/inf, negative values, years far off, a BOM, CRLF line ends, stray
unicode and NUL bytes, duplicated or shuffled lines. Every input must end in one of two ways:

- it lands, and nothing in the ledger breaks a plausibility rule (collectors/validate.py);
- it is rejected with a ``FormatError`` naming the file (or the sibling file the parser read).

Printed per family: inputs, landed, rejected, **crashes** (any other exception: a traceback a user would
see), **out of range landed** (rows ``gpuledger check`` would list), **rejections without a line** (and how
many of those are file-level: no parser recognises the file, it is empty, a JSON document), and the slowest
input with its time. The families take turns (``--step`` inputs each, a running tally after each turn), so
a run stopped early still has figures for every family. After each landed input the ledger is held to the
same rules as ``gpuledger check``, over the tables whose rows changed (:class:`LedgerWatch`); a ledger that
took an out-of-range row, a crash or a hang is replaced, so one bad input is counted once.
tests/test_fuzz.py runs the same engine on a few dozen inputs per family.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402

from collectors.base import IngestOptions  # noqa: E402
from collectors.ingest import ingest_file  # noqa: E402
from collectors.validate import TABLES, find_violations  # noqa: E402
from gpuledger.ledger.db import memory_ledger  # noqa: E402
from gpuledger.ledger.errors import FormatError, UnknownFormatError  # noqa: E402

DATASETS = ROOT.parent / "shared" / "datasets"
BASE_LINES = 300  # long line-oriented files are cut to this many lines first (each input stays fast)
HANG_S = 30.0  # an input still running after this is interrupted and counted as a hang
FRESH_EVERY = 25  # a new ledger after this many inputs (a growing ledger slows the check)

# family → real files (relative to DATASETS); a file whose parser needs a sibling lists it after "+".
FAMILIES: dict[str, list[str]] = {
    "nvidia_smi": [
        "nvidia-smi-csv/eobo0530_vlm_optimization_gpu_log.csv",
        "nvidia-smi-csv/xypp3_gpu_glasses_nvidia_smi.csv",
        "nvidia-smi-csv/anjana5anand_gpu_usage_log_resnet_224.csv",
        "nvidia-smi-q-xml/telegraf_a100-sxm4-v12.xml",
        "nvidia-smi-q-xml/telegraf_tesla-t4.xml",
        "nvidia-smi-q-xml/telegraf_rtx-4000-sff-ada-v13.xml",
    ],
    "dcgm": [
        "dcgm-exporter/datadog_dcgm_fixture_metrics.txt",
        "dcgm-exporter/github_issue_excerpts_metrics.txt",
    ],
    # our own fixtures in the shape the tools write, where ../shared/datasets has none (absolute paths)
    "slurm": ["slurm-sacct/slurmdog_alpine_sacct.json", f"{ROOT}/tests/fixtures/sacct/steps_tres.txt"],
    "kubernetes": [
        f"{ROOT}/tests/fixtures/kubernetes/pods_nodes.json",
        f"{ROOT}/tests/fixtures/kubernetes/pods.json",
    ],
    "training_logs": [
        "hf-trainer/mistral7b-lora-translator/trainer_state.json",
        "hf-trainer/luojiu-7b-qlora-a10/trainer_log.jsonl",
        "lightning-csvlogger/slm_training_version_0_metrics.csv",
    ],
    "wandb": [
        "wandb/spaceinvaders-colab-T4/wandb-events.jsonl+wandb/spaceinvaders-colab-T4/wandb-metadata.json",
        "wandb/spaceinvaders-colab-T4/wandb-metadata.json",
    ],
    # hand-written shapes of issue 36 (tests/fixtures, "repo:" = from the repository root): a full-field
    # nvidia-smi log, cards told apart by bus id, step-less and eval-token trainer states
    "current_shapes": [
        "repo:tests/fixtures/nvidia_smi/full_fields_h200.csv",
        "repo:tests/fixtures/nvidia_smi/full_fields_h100_mig.csv",
        "repo:tests/fixtures/nvidia_smi/bus_id_4xa100.csv",
        "repo:tests/fixtures/rocm_smi/mi300x_time_lines.log",
        "repo:tests/fixtures/training/seq2seq/trainer_state.json",
        "repo:tests/fixtures/training/trl-sft/trainer_state.json",
        "repo:tests/fixtures/gpustat/gpustat_two_polls.json",
    ],
    # the shapes of issue 42 (tests/fixtures): Slurm 24.11's NO_VAL starts, older amd-smi names, a masked UUID
    # on two cards, a Lightning test row, single pods and spec-less CPU pods, real telegraf XML (DTD v10-v13)
    "readers_round3": [
        "repo:tests/fixtures/sacct/slurm_24_11_never_started.json",
        "repo:tests/fixtures/rocm_smi/amd_smi_metric_older_names.csv",
        "repo:tests/fixtures/nvidia_smi_xml/masked_uuid_2gpu_from_rtx-3060-v12.xml",
        "repo:tests/fixtures/nvidia_smi_xml/telegraf_gtx-1660-ti.xml",
        "repo:tests/fixtures/nvidia_smi_xml/telegraf_rtx-3080-v13.xml",
        "repo:tests/fixtures/training/lightning-test-row/metrics.csv",
        "repo:tests/fixtures/kubernetes/pod_failed_gpu_single.json",
        "repo:tests/fixtures/kubernetes/api_pod_without_kind.json",
        "repo:tests/fixtures/kubernetes/api_podlist_cpu_pods_without_spec.json",
    ],
    "traces": [
        "alibaba-gpu-v2023/openb_pod_list_default.csv",
        "alibaba-v2026-genai/pod_gpu_duty_cycle_anon.head30k.csv",
        "alibaba-v2026-genai/pod_gpu_memory_used_bytes_anon.head30k.csv",
    ],
}

# the hostile shapes (issue 34), a family of their own over files of every kind: each mutation is one of
# HOSTILE_MUTATIONS, never the everyday ones above
FAMILIES["hostile"] = [
    "nvidia-smi-csv/anjana5anand_gpu_usage_log_resnet_224.csv",
    "slurm-sacct/slurmdog_alpine_sacct.json",
    "hf-trainer/luojiu-7b-qlora-a10/trainer_log.jsonl",
    "lightning-csvlogger/slm_training_version_0_metrics.csv",
    "dcgm-exporter/datadog_dcgm_fixture_metrics.txt",
    "nvidia-smi-q-xml/telegraf_tesla-t4.xml",
    "alibaba-gpu-v2023/openb_pod_list_default.csv",
]

HUGE = ["1e30", "1e300", "99999999999999999999999", "-1e30", "1e400", "9223372036854775807", "1000000000"]
NONFINITE = ["NaN", "nan", "inf", "-inf", "Infinity", "-Infinity", "null"]
UNICODE = ["é", "\u202e", "💥", "\x00", "\ufffd", "ß", "\u200b", "Ω"]
_NUMBER = re.compile(rb"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
_YEAR = re.compile(rb"20[0-9]{2}(?=[-/])")


@dataclasses.dataclass
class Outcome:
    kind: str  # ok | rejected | crash | out_of_range | hang
    seconds: float
    mutations: list[str]
    message: str = ""
    line: int | None = None
    file_level: bool = False  # a rejection about the whole file (no line to name)


@dataclasses.dataclass
class Tally:
    family: str
    inputs: int = 0
    ok: int = 0
    rejected: int = 0
    crashes: int = 0
    out_of_range: int = 0
    hangs: int = 0
    no_line: int = 0
    no_line_file_level: int = 0
    slowest_s: float = 0.0
    slowest: str = ""
    examples: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def add(self, o: Outcome, label: str) -> None:
        self.inputs += 1
        if o.seconds > self.slowest_s:
            self.slowest_s, self.slowest = o.seconds, f"{label} [{', '.join(o.mutations)}]"
        if o.kind == "ok":
            self.ok += 1
        elif o.kind == "rejected":
            self.rejected += 1
            if o.line is None:
                self.no_line += 1
                self.no_line_file_level += o.file_level
                if not o.file_level:
                    self.examples.setdefault("no_line", []).append(f"{label}: {o.message}")
        else:
            attr = {"crash": "crashes", "out_of_range": "out_of_range", "hang": "hangs"}[o.kind]
            setattr(self, attr, getattr(self, attr) + 1)
            self.examples.setdefault(o.kind, []).append(f"{label} [{', '.join(o.mutations)}]: {o.message}")

    def line(self) -> str:
        line_rej = self.rejected - self.no_line_file_level
        named = (
            100.0 * (line_rej - (self.no_line - self.no_line_file_level)) / line_rej if line_rej else 100.0
        )
        return (
            f"{self.family:<14} inputs {self.inputs:>6,}  landed {self.ok:>6,}  rejected {self.rejected:>6,}  "
            f"crashes {self.crashes:>3}  hangs {self.hangs:>2}  out-of-range landed {self.out_of_range:>3}  "
            f"rejections without a line {self.no_line:>5,} ({self.no_line_file_level:,} file-level; "
            f"{named:.1f} % of line rejections name it)  slowest {self.slowest_s:.2f} s: {self.slowest}"
        )


# -- mutations -------------------------------------------------------------------------------------------


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _delim(data: bytes) -> bytes:
    first = data.split(b"\n", 1)[0]
    return b"|" if first.count(b"|") > first.count(b",") else b","


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(1, max(2, len(data)))]


def flip_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 5)):
        if b:
            b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


def drop_column(data: bytes, rng: random.Random) -> bytes:
    d = _delim(data)
    lines = _lines(data)
    k = rng.randrange(max(1, lines[0].count(d) + 1))
    only_header = rng.random() < 0.3
    out = []
    for i, ln in enumerate(lines):
        parts = ln.split(d)
        if (i == 0 or not only_header) and len(parts) > k:
            del parts[k]
        out.append(d.join(parts))
    return b"\n".join(out)


def duplicate_column(data: bytes, rng: random.Random) -> bytes:
    d = _delim(data)
    lines = _lines(data)
    k = rng.randrange(max(1, lines[0].count(d) + 1))
    out = []
    for ln in lines:
        parts = ln.split(d)
        if len(parts) > k:
            parts.insert(k, parts[k])
        out.append(d.join(parts))
    return b"\n".join(out)


@functools.lru_cache(maxsize=32)
def _number_spans(data: bytes) -> tuple[tuple[int, int], ...]:
    """Where the numbers are (cached: most inputs mutate one of a few base files first)."""
    return tuple(m.span() for m in _NUMBER.finditer(data))


def _replace_numbers(data: bytes, rng: random.Random, choices: list[str], n: int) -> bytes:
    spans = _number_spans(data)
    if not spans:
        return data
    picked = sorted(rng.sample(spans, min(n, len(spans))), reverse=True)
    for a, b in picked:
        data = data[:a] + rng.choice(choices).encode() + data[b:]
    return data


def huge_number(data: bytes, rng: random.Random) -> bytes:
    return _replace_numbers(data, rng, HUGE, rng.randint(1, 3))


def nonfinite(data: bytes, rng: random.Random) -> bytes:
    return _replace_numbers(data, rng, NONFINITE, rng.randint(1, 3))


def negative(data: bytes, rng: random.Random) -> bytes:
    spans = _number_spans(data)
    if not spans:
        return data
    a, b = rng.choice(spans)
    return data[:a] + b"-" + data[a:b].lstrip(b"-") + data[b:]


def far_year(data: bytes, rng: random.Random) -> bytes:
    spans = [m.span() for m in _YEAR.finditer(data)]
    if not spans:
        return huge_number(data, rng)
    a, b = rng.choice(spans)
    return data[:a] + rng.choice([b"2099", b"1970", b"9999", b"1900", b"0001"]) + data[b:]


def bom(data: bytes, rng: random.Random) -> bytes:
    return b"\xef\xbb\xbf" + data


def crlf(data: bytes, rng: random.Random) -> bytes:
    return data.replace(b"\n", b"\r\n")


def unicode(data: bytes, rng: random.Random) -> bytes:
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(max(1, len(data)))
        data = data[:i] + rng.choice(UNICODE).encode() + data[i:]
    return data


def duplicate_lines(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    return b"\n".join(lines[: i + 1] + [lines[i]] * rng.randint(1, 3) + lines[i + 1 :])


def shuffle_lines(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    head, body = lines[:1], lines[1:]
    rng.shuffle(body)
    return b"\n".join(head + body)


def empty_fields(data: bytes, rng: random.Random) -> bytes:
    return _replace_numbers(data, rng, [""], rng.randint(1, 5))


MUTATIONS = {
    f.__name__: f
    for f in (
        truncate,
        flip_bytes,
        drop_column,
        duplicate_column,
        huge_number,
        nonfinite,
        negative,
        far_year,
        bom,
        crlf,
        unicode,
        duplicate_lines,
        shuffle_lines,
        empty_fields,
    )
}


def source_path(spec: str, datasets: Path = DATASETS) -> Path:
    """A FAMILIES file: ``repo:`` names one in this repository (a hand-written fixture), else the datasets."""
    return ROOT / spec.removeprefix("repo:") if spec.startswith("repo:") else datasets / spec


# -- hostile shapes (the "hostile" family) -----------------------------------------------------------------

ESCAPES = ["\x1b[2J\x1b[H", "\x1b]0;owned\x07", "\r\n", "\r", "\u202e", "\x9b31m", "\x00", "\x7f", "\u2066"]
_WORD = re.compile(rb"[A-Za-z][A-Za-z0-9_]{2,}")


def long_cell(data: bytes, rng: random.Random) -> bytes:
    """A number or a word becomes 10,000 to 200,000 letters (one cell took 177.7 s to refuse)."""
    spans = [m.span() for m in _WORD.finditer(data)] + list(_number_spans(data))
    if not spans:
        return data
    a, b = rng.choice(spans)
    return data[:a] + bytes([rng.choice(b"ASZ")]) * rng.randint(10_000, 200_000) + data[b:]


def long_line(data: bytes, rng: random.Random) -> bytes:
    """A line of 1.5 to 3 MB, unterminated at the end of the file or inside it."""
    line = b"x" * rng.randint(1_500_000, 3_000_000)
    if rng.random() < 0.5:
        return data.rstrip(b"\n") + b"\n" + line  # an unterminated last line (landed as a silent prefix)
    lines = _lines(data)
    lines.insert(rng.randrange(1, max(len(lines), 2)), line)
    return b"\n".join(lines)


def compressed_filler(data: bytes, rng: random.Random) -> bytes:
    """The file gzipped with filler after it: NUL bytes, or one line repeated to a ratio past any data file."""
    import gzip

    size = rng.randint(20, 64) * 2**20
    if rng.random() < 0.5:
        filler = b"\0" * size
    else:
        row = (_lines(data) or [b"x"])[-1] or b"x"
        filler = b"\n" + (row + b"\n") * (size // (len(row) + 1))
    return gzip.compress(data + filler, compresslevel=1)


def control_chars(data: bytes, rng: random.Random) -> bytes:
    """Terminal escapes, CR/LF, C1 controls and bidi overrides inside words (names, mostly)."""
    spans = [m.span() for m in _WORD.finditer(data)]
    for a, b in sorted(rng.sample(spans, min(len(spans), rng.randint(1, 4))), reverse=True):
        at = rng.randint(a, b)
        data = data[:at] + rng.choice(ESCAPES).encode() + data[at:]
    return data


def wide_header(data: bytes, rng: random.Random) -> bytes:
    """The first line widened by 10,000 to 100,000 extra columns (past the 64 KiB head parsers read)."""
    first, sep, rest = data.partition(b"\n")
    delim = _delim(data)
    extra = delim.join(b"c%d" % i for i in range(rng.randint(10_000, 100_000)))
    return first + delim + extra + sep + rest


HOSTILE_MUTATIONS = {
    f.__name__: f for f in (long_cell, long_line, compressed_filler, control_chars, wide_header)
}


def base_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix in (".csv", ".jsonl", ".txt") and data.count(b"\n") > BASE_LINES:
        data = b"\n".join(data.split(b"\n")[:BASE_LINES]) + b"\n"
    return data


def mutate(data: bytes, rng: random.Random, family: str = "") -> tuple[bytes, list[str]]:
    if family == "hostile":  # one hostile shape, control characters sometimes with a second one
        names = [rng.choice(sorted(HOSTILE_MUTATIONS))]
        if names[0] not in ("control_chars", "compressed_filler") and rng.random() < 0.3:
            names.insert(0, "control_chars")
        for name in names:
            data = HOSTILE_MUTATIONS[name](data, rng)
        return data, names
    names = rng.sample(sorted(MUTATIONS), rng.choice([1, 1, 1, 2, 3]))
    for name in names:
        data = MUTATIONS[name](data, rng)
    return data, names


# -- one input --------------------------------------------------------------------------------------------

_FILE_LEVEL = (
    "no parser recognises",
    "the file is empty",
    "not a W&B",
    'no "',
    "missing column",
    "no timestamp column",
    "no telemetry column",
    "no DCGM",
    "unknown column",
    "not a Hugging Face",
    "resultType",
    "the API answered",
)


class LedgerWatch:
    """What ``gpuledger check`` would list, asked after every landed input, at the cost of the tables that
    changed: the rules of collectors/validate.py over every row of each table a source writes whose rows
    changed since the last clean check (a fingerprint: row count and the XOR of the rows' hashes), and over
    the samples again when the GPUs changed (a sample's limits come from its GPU's model). A table that did
    not change was clean at the last check and stays so: the rules read one row (and its GPU's catalog
    entry), and the latest plausible time only moves later."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        have = {
            r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary").fetchall()
        }
        self.tables = [t for t in TABLES if t in have]
        self.clean: dict[str, tuple[int, int]] = {}
        self.fingerprint_sql = " UNION ALL ".join(
            f"SELECT '{t}', count(*), coalesce(bit_xor(hash(x)), 0) FROM {t} x" for t in self.tables
        )

    def violations(self) -> list:
        now = {t: (n, h) for t, n, h in self.con.execute(self.fingerprint_sql).fetchall()}
        changed = [t for t in self.tables if now[t] != self.clean.get(t) and now[t][0]]
        if "gpus" in changed and "samples" not in changed and now.get("samples", (0, 0))[0]:
            changed.append("samples")
        try:
            for table in changed:
                hits = find_violations(self.con, table, source=table, staged=False, limit=1)
                if hits:
                    return hits
        finally:
            self.con.execute("DROP TABLE IF EXISTS temp.valid_models")
        self.clean = now
        return []


def run_one(
    con: duckdb.DuckDBPyConnection, path: Path, mutations: list[str], watch: LedgerWatch | None = None
) -> Outcome:
    """Ingest ``path``; classify what happened (see the module docstring). ``watch`` checks the ledger after
    a landed input (by default a new one, which checks every table)."""
    timer = threading.Timer(HANG_S, con.interrupt)
    timer.start()
    started = time.perf_counter()
    try:
        ingest_file(con, path, opts=IngestOptions(tz="UTC", quiet=True))
    except FormatError as exc:
        took = time.perf_counter() - started
        if took >= HANG_S:
            return Outcome("hang", took, mutations, str(exc))
        if Path(exc.path).parent != path.parent and exc.path != "--tz":
            return Outcome("crash", took, mutations, f"FormatError names {exc.path}, not the file: {exc}")
        level = isinstance(exc, UnknownFormatError) or any(s in exc.reason for s in _FILE_LEVEL)
        return Outcome("rejected", took, mutations, str(exc), exc.line, file_level=level and exc.line is None)
    except Exception as exc:  # a traceback a user would see
        return Outcome(
            "crash", time.perf_counter() - started, mutations, f"{type(exc).__name__}: {exc}"[:300]
        )
    finally:
        timer.cancel()
    took = time.perf_counter() - started
    bad = (watch or LedgerWatch(con)).violations()
    if bad:
        return Outcome("out_of_range", took, mutations, f"{bad[0].table}: {bad[0].reason}")
    if raw := raw_names(con):
        return Outcome("out_of_range", took, mutations, f"a name with a control or bidi character: {raw}")
    return Outcome("ok", took, mutations)


def raw_names(con: duckdb.DuckDBPyConnection) -> str:
    """The first stored name (collectors/names.py NAME_COLUMNS) that is not neutral text, else ""."""
    from collectors.names import NAME_COLUMNS
    from gpuledger.ledger.text import clip, unneutral_sql

    for stage, columns in NAME_COLUMNS.items():
        table = stage.removeprefix("stage_")
        present = set(con.table(table).columns)
        for col in (c for c in columns if c in present):
            rows = con.execute(f"SELECT {col} FROM {table} WHERE {unneutral_sql(col)} LIMIT 1").fetchall()
            if rows:
                return f"{table}.{col} = {clip(repr(rows[0][0]))}"
    return ""


def fresh_ledger() -> duckdb.DuckDBPyConnection:
    con = memory_ledger()
    con.execute("SET memory_limit = '1GB'")  # like a writer: bounded memory (gpuledger.ledger.db)
    return con


class FamilyRun:
    """One family's inputs, deterministic for a seed, run in steps (so that families can take turns)."""

    def __init__(self, family: str, seed: int, workdir: Path, datasets: Path = DATASETS) -> None:
        self.family, self.workdir = family, workdir
        self.tally = Tally(family)
        self.rng = random.Random(f"{family}:{seed}")
        self.sources = []
        for spec in FAMILIES[family]:
            main, *siblings = spec.split("+")
            self.sources.append((source_path(main, datasets), [source_path(s, datasets) for s in siblings]))
        self.bases = {src: base_bytes(src) for src, _ in self.sources}
        self.i = 0
        self.seconds = 0.0
        self.con: duckdb.DuckDBPyConnection | None = None
        self.watch: LedgerWatch | None = None
        self.in_ledger = 0

    def _ledger(self) -> tuple[duckdb.DuckDBPyConnection, LedgerWatch]:
        if self.con is None or self.watch is None or self.in_ledger >= FRESH_EVERY:
            self.close()
            self.con = fresh_ledger()
            self.watch = LedgerWatch(self.con)
            self.in_ledger = 0
        self.in_ledger += 1
        return self.con, self.watch

    def run(self, count: int) -> Tally:
        started = time.perf_counter()
        for _ in range(count):
            i = self.i
            self.i += 1
            src, siblings = self.sources[i % len(self.sources)]
            data, names = mutate(self.bases[src], self.rng, self.family)
            where = self.workdir / f"{self.family}-{i}"
            where.mkdir(parents=True)
            for s in siblings:
                shutil.copyfile(s, where / s.name)
            target = where / (src.name + (".gz" if data[:2] == b"\x1f\x8b" else ""))
            target.write_bytes(data)
            con, watch = self._ledger()
            outcome = run_one(con, target, names, watch)
            self.tally.add(outcome, f"{src.name}#{i}")
            if outcome.kind in ("out_of_range", "hang", "crash"):
                self.close()  # what it left must not count against the inputs after it
            shutil.rmtree(where, ignore_errors=True)
        self.seconds += time.perf_counter() - started
        return self.tally

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
        self.con, self.watch = None, None


def fuzz_family(family: str, count: int, seed: int, workdir: Path, datasets: Path = DATASETS) -> Tally:
    """``count`` mutated inputs of ``family``'s files, round robin; deterministic for a seed."""
    run = FamilyRun(family, seed, workdir, datasets)
    try:
        return run.run(count)
    finally:
        run.close()


def fuzz_families(
    families: list[str], count: int, seed: int, workdir: Path, step: int, examples: int
) -> list[tuple[Tally, float]]:
    """The families take turns, ``step`` inputs each, so a long run stopped early has figures for every
    family; a running tally is printed after each turn. Returns (tally, seconds) per family."""
    runs = [FamilyRun(f, seed, workdir) for f in families]
    shown: dict[tuple[str, str], int] = {}  # (family, kind) → problems already printed
    try:
        while any(r.i < count for r in runs):
            for r in runs:
                if r.i < count:
                    r.run(min(step, count - r.i))
                    for kind in ("crash", "out_of_range", "hang"):  # each problem as soon as it is seen
                        items = r.tally.examples.get(kind, [])
                        for text in items[shown.get((r.family, kind), 0) : examples]:
                            print(f"    {r.family} {kind}: {text}", flush=True)
                        shown[(r.family, kind)] = len(items)
                    print(
                        f"  {'done' if r.i >= count else 'so far'}: {r.tally.line()} ({r.seconds:.0f} s)",
                        flush=True,
                    )
                    if r.i >= count:
                        r.close()
                        _examples(r.tally, examples, only=("no_line",))
        return [(r.tally, r.seconds) for r in runs]
    finally:
        for r in runs:
            r.close()


def _examples(tally: Tally, examples: int, only: tuple[str, ...] | None = None) -> None:
    for kind, items in tally.examples.items():
        if only is not None and kind not in only:
            continue
        for text in items[:examples]:
            print(f"    {tally.family} {kind}: {text}", flush=True)


def fuzz_cli(count: int, seed: int, workdir: Path, datasets: Path = DATASETS) -> tuple[int, int, list[str]]:
    """``count`` mutated inputs (all families, round robin) through ``gpuledger ingest`` as a user runs it:
    returns (runs, tracebacks, examples). Exit 0 or 1 with one ``error:`` line is what a user should see."""
    import subprocess

    rng = random.Random(f"cli:{seed}")
    specs = [(fam, spec) for fam in sorted(FAMILIES) for spec in FAMILIES[fam]]
    tracebacks, examples = 0, []
    for i in range(count):
        _, spec = specs[i % len(specs)]
        main_file, *siblings = spec.split("+")
        src = source_path(main_file, datasets)
        data, names = mutate(base_bytes(src), rng)
        where = workdir / f"cli-{i}"
        where.mkdir(parents=True)
        for s in siblings:
            shutil.copyfile(source_path(s, datasets), where / Path(s).name)
        (where / src.name).write_bytes(data)
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuledger",
                "ingest",
                "--db",
                str(where / "l.duckdb"),
                "--tz",
                "UTC",
                str(where / src.name),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        if "Traceback" in run.stderr or run.returncode not in (0, 1):
            tracebacks += 1
            examples.append(f"{src.name}#{i} [{', '.join(names)}]: rc {run.returncode}: {run.stderr[-300:]}")
        shutil.rmtree(where, ignore_errors=True)
    return count, tracebacks, examples


def _group(job: tuple[list[str], int, int, str, int, int]) -> list[tuple[Tally, float]]:
    families, count, seed, tmp, step, examples = job
    return fuzz_families(families, count, seed, Path(tmp), step, examples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=10_000, help="inputs per family (default 10,000)")
    ap.add_argument("--family", action="append", choices=sorted(FAMILIES), help="only these (repeatable)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--examples", type=int, default=3, help="show this many examples of each problem")
    ap.add_argument("--cli", type=int, default=0, help="also run N inputs through the gpuledger CLI")
    ap.add_argument("--step", type=int, default=500, help="inputs per family per turn (a running tally each)")
    ap.add_argument(
        "--jobs", type=int, default=1, help="processes, each taking a share of the families (default 1)"
    )
    args = ap.parse_args()
    failed = False
    families = args.family or sorted(FAMILIES)
    started = time.perf_counter()
    shm = Path("/dev/shm")  # inputs are written and removed by the thousand: memory is faster than a disk
    scratch = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="gpuledger-fuzz-", dir=scratch) as tmp:
        if args.cli:
            runs, tracebacks, examples = fuzz_cli(args.cli, args.seed, Path(tmp))
            print(f"CLI: {runs:,} runs of gpuledger ingest, {tracebacks} ended in a traceback", flush=True)
            for text in examples[: args.examples]:
                print(f"    traceback: {text}")
            failed |= bool(tracebacks)
        jobs = max(1, min(args.jobs, len(families)))
        groups = [families[k::jobs] for k in range(jobs)]
        work = [(g, args.count, args.seed, tmp, args.step, args.examples) for g in groups]
        if jobs == 1:
            results = [_group(work[0])]
        else:
            import multiprocessing

            with multiprocessing.get_context("spawn").Pool(jobs) as pool:
                results = pool.map(_group, work)
        done = {t.family: (t, sec) for group in results for t, sec in group}
        print(
            f"\n{args.count:,} inputs per family, seed {args.seed}, {jobs} process(es), "
            f"{time.perf_counter() - started:.0f} s in all:"
        )
        for family in families:
            tally, seconds = done[family]
            print(tally.line(), f"({seconds:.0f} s)", flush=True)
            failed |= bool(tally.crashes or tally.out_of_range or tally.hangs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
