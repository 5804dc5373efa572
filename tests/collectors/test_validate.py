"""Plausibility checks (collectors/validate.py): every case issue 9 measured is rejected with its line, the
ledger untouched; --skip-bad-rows lands the rest and records each left-out row; reader errors are sentences.

Each bad file is a real file from ../shared/datasets with one value changed (written to tmp_path), or a
few lines in the format's exact layout. The expected limits are the catalog's figures, by hand:
RTX 4090 TDP 450 W → 2 × 450 = 900 W; H100-SXM-80GB TDP 700 W → 1,400 W.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import duckdb
import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from collectors.sql_text import sql_path
from gpuledger.ledger.errors import FormatError
from tests.conftest import dataset, write

UTC = IngestOptions(tz="UTC")
SMI = "nvidia-smi-csv/eobo0530_vlm_optimization_gpu_log.csv"
JOBS_HEADER = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state"
JOB_OK = "j1,alice,nlp,c1,H100,8,2025-03-01T00:00:00,2025-03-01T02:00:00,COMPLETED"


def ledger_state(con: duckdb.DuckDBPyConnection) -> tuple[int, ...]:
    tables = (
        "samples",
        "jobs",
        "gpus",
        "allocations",
        "training_runs",
        "train_log",
        "ingests",
        "rejected_rows",
    )
    return tuple(con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in tables)


def smi_with(tmp_path: Path, line_no: int, field: int, value: str) -> Path:
    """The real nvidia-smi log with field ``field`` (0-based, ", "-separated) of line ``line_no`` replaced."""
    lines = dataset(SMI).read_text(encoding="utf-8").splitlines()
    parts = lines[line_no - 1].split(", ")
    parts[field] = value
    lines[line_no - 1] = ", ".join(parts)
    return write(tmp_path, "gpu.csv", "\n".join(lines) + "\n")


def rejects(con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions = UTC) -> FormatError:
    before = ledger_state(con)
    with pytest.raises(FormatError) as info:
        ingest_file(con, path, opts=opts)
    assert ledger_state(con) == before, "a rejected file must leave the ledger untouched"
    return info.value


# -- nvidia-smi: the measured telemetry cases -------------------------------------------------------------
# columns of the real file: timestamp, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB],
# power.draw [W]


@pytest.mark.parametrize(
    ("line", "field", "value", "reason"),
    [
        pytest.param(
            50,
            0,
            "2099/01/03 15:37:47.561",
            "timestamp is 2099-01-03 15:37:47.561, not a time between 2000-01-01 and ",
            id="year-2099",
        ),
        pytest.param(70, 2, "250 %", "utilization.gpu is 250%, above 100%", id="util-250-pct"),
        pytest.param(80, 5, "-300 W", "power.draw is -300 W, below 0 W", id="power-minus-300"),
        pytest.param(
            5, 5, "1e30 W", "power.draw is 1e+30 W, above 2 × TDP (900 W) of RTX-4090", id="power-1e30"
        ),
        pytest.param(
            90, 4, "999999 MiB", "memory.used is 999,999 MiB, above the 24,564 MiB of RTX-4090", id="memory"
        ),
        pytest.param(60, 3, "NaN0 %", None, id="unreadable-is-still-a-format-error"),
    ],
)
def test_an_implausible_nvidia_smi_value_rejects_the_file_naming_its_line(
    ledger, tmp_path, line, field, value, reason
):
    err = rejects(ledger, smi_with(tmp_path, line, field, value))
    assert err.line == line
    if reason is not None:
        assert err.reason.startswith(reason), err.reason


def test_the_issue_example_message_for_an_h100(ledger, tmp_path):
    rows = [
        f"2025/03/01 00:00:{s:02d}.000, NVIDIA H100 80GB HBM3, 50 %, 10 %, 1000 MiB, 300.00 W"
        for s in range(9)
    ]
    rows[3] = rows[3].replace("300.00 W", "1e30 W")
    header = "timestamp, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], power.draw [W]"
    path = write(tmp_path, "gpu.csv", "\n".join([header, *rows]) + "\n")
    err = rejects(ledger, path)
    # header is line 1, rows[3] is line 5
    assert str(err) == f"{path}:5: power.draw is 1e+30 W, above 2 × TDP (1,400 W) of H100-SXM-80GB"


def test_900_degrees_is_rejected(ledger, tmp_path):
    header = "timestamp, index, name, temperature.gpu, power.draw [W]"
    rows = [
        "2025/03/01 00:00:00.000, 0, NVIDIA H100 80GB HBM3, 45, 300 W",
        "2025/03/01 00:00:30.000, 0, NVIDIA H100 80GB HBM3, 900, 300 W",
    ]
    err = rejects(ledger, write(tmp_path, "gpu.csv", "\n".join([header, *rows]) + "\n"))
    assert (err.line, err.reason) == (3, "temperature.gpu is 900 °C, above 130 °C")


def test_bad_values_deep_in_a_file_read_in_parallel_are_named_by_their_own_lines(ledger, tmp_path):
    """300,000 lines (~40 MB) are read by several threads in several buffers; the staged rows are numbered
    after the read (collectors/nvidia_smi_csv.number_lines), so each rejected line must still be the line
    that holds the bad value, in the first buffer and in the last."""
    header = "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]"
    path = tmp_path / "big.csv"
    bad = {3: "250 %", 151_234: "-1 %", 299_999: "101 %"}  # line → utilization; line 1 is the header
    arms = " ".join(f"WHEN {line - 2} THEN '{v}'" for line, v in bad.items())
    duckdb.sql(
        f"""COPY (SELECT strftime(TIMESTAMP '2025-03-01' + to_seconds(i // 8), '%Y/%m/%d %H:%M:%S.000')
                         || ', ' || i % 8 || ', GPU-' || i % 8 || '-aaaa, NVIDIA H100 80GB HBM3, '
                         || CASE i {arms} ELSE (i % 97) || ' %' END || ', 1000 MiB, 300.00 W'
                  FROM range(300000) t(i))
            TO {sql_path(path)} (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\x01')"""
    )
    path.write_text(header + "\n" + path.read_text())
    report = ingest_file(ledger, path, opts=IngestOptions(tz="UTC", skip_bad_rows=True))
    assert [(r["line"], r["value"]) for r in report.rejected] == [
        (3, "250"),
        (151_234, "-1"),
        (299_999, "101"),
    ]
    assert report.rows["samples"] == 300_000 - 3


def test_a_real_file_still_lands_and_an_energy_counter_reset_is_not_negative_energy(ledger, tmp_path):
    report = ingest_file(ledger, dataset(SMI), opts=UTC)
    assert report.rows["samples"] == 2619 and report.rejected == []
    # a counter that drops (driver reload) is a reset: accepted, and counted as no energy
    header = "timestamp, index, name, power.draw [W], total_energy_consumption [mJ]"
    rows = [
        "2025/03/01 00:00:00.000, 0, NVIDIA H100 80GB HBM3, 300 W, 5000000",
        "2025/03/01 00:00:30.000, 0, NVIDIA H100 80GB HBM3, 300 W, 1000",
    ]
    path = write(tmp_path, "reset.csv", "\n".join([header, *rows]) + "\n")
    ingest_file(ledger, path, opts=UTC)
    assert (
        ledger.execute("SELECT min(energy_j) FROM samples WHERE gpu_id LIKE 'localhost%'").fetchall()[0][0]
        >= 0
    )


# -- jobs tables ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        pytest.param(
            "j2,bob,cv,c1,H100,inf,2025-03-01T00:00:00,2025-03-01T01:00:00,COMPLETED",
            "gpu_count is inf, not a finite number",
            id="gpu_count-inf",
        ),
        pytest.param(
            "j2,bob,cv,c1,H100,1e300,2025-03-01T00:00:00,2025-03-01T01:00:00,COMPLETED",
            "gpu_count is 1e+300, above 100,000 (no fleet has more GPUs)",
            id="gpu_count-1e300",
        ),
        pytest.param(
            "j2,bob,cv,c1,H100,8,2025-03-01T00:00:00,9999-12-31,COMPLETED",
            "end is 9999-12-31 00:00:00, not a time between 2000-01-01 and ",
            id="end-9999-12-31",
        ),
        pytest.param(
            "j2,bob,cv,c1,H100,8,2025-03-01T00:00:00,infinity,COMPLETED",
            "end is infinity, not a time between 2000-01-01 and ",
            id="end-infinity",
        ),
        pytest.param(
            "j2,bob,cv,c1,H100,8,2024-01-01T00:00:00,2025-06-01T00:00:00,COMPLETED",
            # 2024-01-01 → 2025-06-01: 366 (2024 is a leap year) + 151 days = 517 days
            "end is 2025-06-01 00:00:00: the job would have run 517 days, longer than thresholds.max_job_days",
            id="longer-than-a-year",
        ),
        pytest.param(
            "j2,bob,cv,c1,H100,8,1999-12-31T00:00:00,2000-01-01T05:00:00,COMPLETED",
            "start is 1999-12-31 00:00:00, not a time between 2000-01-01 and ",
            id="before-2000",
        ),
    ],
)
def test_an_implausible_job_rejects_the_file(ledger, tmp_path, row, reason):
    path = write(tmp_path, "jobs.csv", "\n".join([JOBS_HEADER, JOB_OK, row]) + "\n")
    err = rejects(ledger, path)
    assert err.line == 3 and err.reason.startswith(reason), err.reason


def test_a_cpu_only_job_still_lands(ledger, tmp_path):
    path = write(
        tmp_path,
        "jobs.csv",
        f"{JOBS_HEADER}\nj0,a,t,c1,,0,2025-03-01T00:00:00,2025-03-01T01:00:00,COMPLETED\n",
    )
    assert ingest_file(ledger, path, opts=UTC).rows["jobs"] == 1


def test_skip_bad_rows_lands_the_rest_and_records_each_left_out_row(ledger, tmp_path):
    rows = [
        JOB_OK,
        "j2,bob,cv,c1,H100,inf,2025-03-01T00:00:00,2025-03-01T01:00:00,COMPLETED",
        "j3,carol,cv,c1,H100,2,2025-03-01T00:00:00,2025-03-01T03:00:00,COMPLETED",
        "j4,dave,cv,c1,H100,8,2025-03-01T00:00:00,infinity,COMPLETED",
    ]
    path = write(tmp_path, "jobs.csv", "\n".join([JOBS_HEADER, *rows]) + "\n")
    report = ingest_file(ledger, path, opts=IngestOptions(tz="UTC", skip_bad_rows=True))
    assert report.rows["jobs"] == 2
    assert [(r["line"], r["column"], r["value"]) for r in report.rejected] == [
        (3, "gpu_count", "inf"),
        (5, "end", "infinity"),
    ]
    assert sorted(r[0] for r in ledger.execute("SELECT job_id FROM jobs").fetchall()) == ["j1", "j3"]
    stored = ledger.execute(
        "SELECT line, table_name, column_name, value, path FROM rejected_rows ORDER BY line"
    ).fetchall()
    assert stored == [
        (3, "jobs", "gpu_count", "inf", str(path.resolve())),
        (5, "jobs", "end", "infinity", str(path.resolve())),
    ]
    assert "rejected_rows" in json.dumps(report.as_dict())


def test_skip_bad_rows_keeps_a_gpus_seen_span_to_its_good_samples(ledger, tmp_path):
    report = ingest_file(
        ledger,
        smi_with(tmp_path, 50, 0, "2099/01/03 15:37:47.561"),
        opts=IngestOptions(tz="UTC", skip_bad_rows=True),
    )
    assert report.rows["samples"] == 2619 - 1 and [r["line"] for r in report.rejected] == [50]
    last_seen, max_ts = ledger.execute(
        "SELECT (SELECT max(last_seen) FROM gpus), (SELECT max(ts) FROM samples)"
    ).fetchall()[0]
    assert last_seen == max_ts and last_seen.year == 2026


# -- sacct, HF Trainer, W&B ------------------------------------------------------------------------------


def test_sacct_gres_gpu_99999999_is_rejected(ledger, tmp_path):
    header = "JobID|Cluster|User|Account|State|Start|End|AllocTRES|NodeList"
    rows = [
        "10|ci|alice|nlp|COMPLETED|2025-03-01T00:00:00|2025-03-01T01:00:00|cpu=8,gres/gpu=8,node=1|gpu01",
        "11|ci|bob|nlp|COMPLETED|2025-03-01T00:00:00|2025-03-01T01:00:00|cpu=8,gres/gpu=99999999,node=1|gpu02",
    ]
    err = rejects(ledger, write(tmp_path, "sacct.txt", "\n".join([header, *rows]) + "\n"))
    assert (err.line, err.reason) == (
        3,
        "AllocTRES gres/gpu is 99,999,999, above 100,000 (no fleet has more GPUs)",
    )


def test_hf_train_runtime_negative_is_rejected(ledger, tmp_path):
    state = json.loads(dataset("hf-trainer/mistral7b-lora-translator/trainer_state.json").read_text())
    final = next(e for e in reversed(state["log_history"]) if "train_runtime" in e)
    assert round(final["train_runtime"], 2) == 20387.71  # the real run: 20,388 s
    final["train_runtime"] = -final["train_runtime"]
    run = tmp_path / "run"
    run.mkdir()
    text = json.dumps(state, indent=1)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if '"train_runtime"' in t)  # by hand
    err = rejects(ledger, write(run, "trainer_state.json", text))
    assert (err.line, err.reason) == (line, "train_runtime is -20,387.71 s, below 0 s")


def test_wandb_gpu_count_of_a_billion_is_rejected_before_any_work(ledger, tmp_path):
    meta = json.loads(dataset("wandb/spaceinvaders-colab-T4/wandb-metadata.json").read_text())
    meta["gpu_count"] = 1_000_000_000
    text = json.dumps(meta, indent=4)
    path = write(tmp_path, "wandb-metadata.json", text)
    started = time.perf_counter()
    err = rejects(ledger, path)
    took = time.perf_counter() - started
    assert took < 5, f"{took:.1f} s: the count must be refused before staging a row per GPU (was 90 s)"
    line = next(i for i, ln in enumerate(text.splitlines(), start=1) if '"gpu_count"' in ln)
    assert (err.line, err.reason) == (
        line,
        '"gpu_count" is 1e+09, outside 0 … 100,000 (no fleet has more GPUs)',
    )


# -- readers' errors are sentences (item 2) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "line", "reason"),
    [
        pytest.param(
            "jobs.csv",
            f"{JOBS_HEADER}\n{JOB_OK}\nj2,bob,c\xff\xfev,c1,H100,8,2025-03-01T00:00:00,2025-03-01T01:00:00,COMPLETED\n",
            3,
            "a byte that is not UTF-8 text (save the file as UTF-8)",
            id="bad-byte-in-csv",
        ),
        pytest.param(
            "jobs.csv",
            f"{JOBS_HEADER},end\n{JOB_OK},2025-03-01T03:00:00\n",
            1,
            "column 'end' appears twice in the header",
            id="duplicate-csv-header",
        ),
        pytest.param(
            "jobs.jsonl",
            '{"job_id":"j1","user":"a","team":"t","cluster":"c","gpu_model":"H100","gpu_count":8,'
            '"start":"2025-03-01T00:00:00","end":"2025-03-01T01:00:00","state":"COMPLETED","end":"x"}\n',
            1,
            'the name "end" appears twice (duplicate column names or keys)',
            id="duplicate-json-key",
        ),
        pytest.param(
            "dcgm.prom",
            '# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",modelName="Tesla T4"} 10\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="1",gpu="2",UUID="GPU-b",modelName="Tesla T4"} 20\n',
            3,
            'the label "gpu" appears twice in one series (duplicate labels)',
            id="duplicate-prometheus-labels",
        ),
        pytest.param(
            "dcgm.prom",
            'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 10 1740787200000\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 20 174078720000000000000\n',
            2,
            "the timestamp is not milliseconds since 1970: '174078720000000000000'",
            id="huge-prometheus-timestamp",
        ),
        pytest.param(
            "jobs.jsonl",
            '{"job_id":"j1","user":"a","team":"t","cluster":"c","gpu_model":"H100",'
            '"gpu_count":99999999999999999999999999999,"start":"2025-03-01T00:00:00",'
            '"end":"2025-03-01T01:00:00","state":"COMPLETED"}\n',
            1,
            "gpu_count is 1e+29, above 100,000 (no fleet has more GPUs)",
            id="huge-integer",
        ),
        pytest.param(
            "jobs.csv",
            f"{JOBS_HEADER}\nj1,a,t,c1,H100,8,2025-03-01T00:00:00,2025-02-30T00:00:00,COMPLETED\n",
            2,
            'column "end" is not a time: "2025-02-30T00:00:00"',
            id="impossible-date",
        ),
        pytest.param(
            "jobs.csv",
            f"{JOBS_HEADER}\nj1,a,t,c1,H100,8,2025-03-01T01:00:00,999999999999,COMPLETED\n",
            2,
            "end is infinity, not a time between 2000-01-01 and ",
            id="impossible-epoch",
        ),
    ],
)
def test_reader_errors_become_one_sentence_with_the_line(ledger, tmp_path, name, text, line, reason):
    path = tmp_path / name
    path.write_bytes(
        text.encode("utf-8", errors="surrogateescape") if "\xff" not in text else text.encode("latin-1")
    )
    err = rejects(ledger, path)
    assert err.line == line and err.reason.startswith(reason), (err.line, err.reason)
    assert "Error:" not in err.reason and "struct_pack" not in err.reason


def test_a_directory_is_a_sentence_not_a_traceback(ledger, tmp_path):
    err = rejects(ledger, tmp_path)
    assert err.path == str(tmp_path)


# -- literal paths (item 6) ------------------------------------------------------------------------------


def test_a_file_literally_named_with_a_star_is_read_as_itself(ledger, tmp_path):
    literal = write(tmp_path, "jobs*.csv", f"{JOBS_HEADER}\n{JOB_OK}\n")
    write(
        tmp_path,
        "jobsA.csv",
        f"{JOBS_HEADER}\nj9,x,t,c1,H100,1,2025-03-01T00:00:00,2025-03-01T01:00:00,COMPLETED\n",
    )
    write(tmp_path, "jobsB.csv", "not,a,jobs,file\n")
    report = ingest_file(ledger, literal, opts=UTC)
    assert report.rows["jobs"] == 1
    assert ledger.execute("SELECT list(job_id) FROM jobs").fetchall()[0][0] == ["j1"]


def test_sql_path_escapes_every_glob_character():
    assert sql_path("/d/jobs*[1]?.csv") == "'/d/jobs[*][[]1][?].csv'"
    assert sql_path("/d/o'brien.csv") == "'/d/o''brien.csv'"


def test_thresholds_max_job_days_decides_how_long_a_job_may_run(ledger, tmp_path):
    from gpuledger.ledger.settings import from_dict

    # 2024-01-01 → 2025-06-01 is 517 days: over the default 365, under a setting of 600
    row = "j2,bob,cv,c1,H100,8,2024-01-01T00:00:00,2025-06-01T00:00:00,COMPLETED"
    path = write(tmp_path, "jobs.csv", "\n".join([JOBS_HEADER, row]) + "\n")
    settings = from_dict({"thresholds": {"max_job_days": 600}}, tmp_path / "settings.toml")
    opts = IngestOptions.from_settings(settings, tz="UTC")
    assert opts.max_job_days == 600
    assert ingest_file(ledger, path, opts=opts).rows["jobs"] == 1
