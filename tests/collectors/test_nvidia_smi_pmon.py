"""nvidia-smi pmon logs (collectors/nvidia_smi_pmon.py): the header variants drivers write, and the errors.

Files are tiny and hand-written in the shapes real drivers print (R525+ with jpg/ofa/fb/ccpm, older ones
without, ``-s mu`` with fb first, repeated headers, a GPU with no process, a command with a space); every
expected value is read off the file by eye.
"""

from __future__ import annotations

import datetime as dt

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import write

T = dt.datetime
UTC = IngestOptions(tz="UTC", host="n1")

NEW = (
    "#Date       Time        gpu         pid   type     sm    mem    enc    dec    jpg    ofa     fb   ccpm    command\n"
    "#YYYYMMDD   HH:MM:SS    Idx           #    C/G      %      %      %      %      %      %     MB     MB    name\n"
)
OLD_MU = (
    "#Date       Time        gpu        pid  type    fb    sm   mem   enc   dec   command\n"
    "#YYYYMMDD   HH:MM:SS    Idx          #   C/G    MB     %     %     %     %   name\n"
)


def rows(con):
    return con.execute(
        """SELECT ts, gpu_id, pid, process_name, sm_pct, mem_util_pct, enc_pct, dec_pct, used_mem_mib, interval_s,
                  job_id
           FROM processes ORDER BY ts, gpu_id, pid"""
    ).fetchall()


def test_a_recent_driver_log_with_an_idle_gpu_and_a_command_with_spaces(ledger, tmp_path):
    log = write(
        tmp_path,
        "pmon.log",
        NEW
        + " 20260301   10:00:00      0        1001     C     60     21      -      -      -      -  30210      0    python\n"
        + " 20260301   10:00:00      0        2002   C+G      -      5      3      -      -      -    512      0    renderD128 --us\n"
        + " 20260301   10:00:00      1           -     -      -      -      -      -      -      -      -      -    -\n"
        + " 20260301   10:00:05      0        1001     C     58     20      -      -      -      -  30210      0    python\n"
        + " 20260301   10:00:05      1           -     -      -      -      -      -      -      -      -      -    -\n",
    )
    report = ingest_file(ledger, log, opts=UTC)
    assert report.format == "nvidia_smi_pmon"  # detected from the content
    assert report.rows["processes"] == 3
    t0, t5 = T(2026, 3, 1, 10, 0, 0), T(2026, 3, 1, 10, 0, 5)
    # GPU 0 polled at :00 and :05 → each poll stands for 5 s (the last one: the median spacing, 5 s)
    assert rows(ledger) == [
        (t0, "n1:0", 1001, "python", 60.0, 21.0, None, None, 30210.0, 5.0, None),
        (t0, "n1:0", 2002, "renderD128 --us", None, 5.0, 3.0, None, 512.0, 5.0, None),
        (t5, "n1:0", 1001, "python", 58.0, 20.0, None, None, 30210.0, 5.0, None),
    ]
    assert (
        report.skipped["polls of a GPU with no process (no row; the poll still counts for the intervals)"]
        == 2
    )
    assert "column 'jpg' not stored (no ledger column)" in report.skipped
    # both GPUs are known at host n1 by index, for the telemetry of that node
    assert ledger.execute("SELECT gpu_id, host, gpu_index FROM gpus ORDER BY 1").fetchall() == [
        ("n1:0", "n1", 0),
        ("n1:1", "n1", 1),
    ]


def test_an_older_driver_with_fb_first_repeated_headers_and_a_pid_listed_twice(ledger, tmp_path):
    line = " 20260301   10:00:{s:02d}      0       1001     C  {fb}    {sm}     4     0     0   train.py\n"
    log = write(
        tmp_path,
        "pmon.log",
        OLD_MU
        + line.format(s=0, fb=900, sm=40)
        + line.format(s=0, fb=900, sm=45)  # the same pid again in the same poll: one row, larger values
        + OLD_MU  # printed again (a `-c 1 >> log` loop prints it every poll)
        + line.format(s=2, fb=900, sm=50)
        + line.format(s=4, fb=901, sm=52),
    )
    report = ingest_file(ledger, log, opts=UTC)
    got = [(r[0].second, r[4], r[8], r[9]) for r in rows(ledger)]
    assert got == [(0, 45.0, 900.0, 2.0), (2, 50.0, 900.0, 2.0), (4, 52.0, 901.0, 2.0)]
    assert report.skipped["lines of a pid already listed on that GPU in that poll (larger values kept)"] == 1


def test_local_times_are_read_in_the_zone_and_a_job_can_be_named(ledger, tmp_path):
    log = write(
        tmp_path,
        "pmon.log",
        NEW
        + " 20260301   11:00:00      0        1001     C     60     21      -      -      -      -  30210      0    python\n",
    )
    ingest_file(ledger, log, opts=IngestOptions(tz="Europe/Paris", host="n1", job_id="ci/7"))
    ts, job = ledger.execute("SELECT ts, job_id FROM processes").fetchall()[0]
    assert ts == T(2026, 3, 1, 10, 0, 0)  # 11:00 in Paris in March (UTC+1) is 10:00 UTC
    assert job == "ci/7"
    assert ledger.execute("SELECT job_id, sm_pct, interval_s FROM process_shares").fetchall() == [
        ("ci/7", 60.0, 1.0)  # a single poll stands for pmon's default 1 s
    ]


@pytest.mark.parametrize(
    ("days", "expected"),
    [
        # a daily cron's ``pmon -c 1``: the median gap (2 days) is no cadence, each poll stands for 1 s
        ((1, 3, 5), [1.0, 1.0, 1.0]),
        # polls a minute apart, then two days of silence: the gap is capped at the minute's cadence
        ((1, 1, 1, 3), [60.0, 60.0, 60.0, 60.0]),
    ],
    ids=["two-days-apart", "a-silence-of-two-days"],
)
def test_polls_more_than_a_day_apart_stand_for_the_cadence_not_the_gap(ledger, tmp_path, days, expected):
    """No poll stands for more than a day (gpuledger/ledger/sample_time.py MAX_DERIVED_INTERVAL_S, as for samples); a
    log of polls days apart is no error."""
    minute = iter(range(3))
    body = "".join(
        f" 202503{d:02d}   10:0{next(minute) if d == 1 else 0}:00      0        1001     C     60     21      -      -"
        "      -      -  30210      0    python\n"
        for d in days
    )
    ingest_file(ledger, write(tmp_path, "pmon.log", NEW + body), opts=UTC)
    got = ledger.execute("SELECT interval_s FROM processes ORDER BY ts").fetchall()
    assert [iv for (iv,) in got] == expected


def test_polls_through_the_hour_a_dst_end_repeats_keep_both_passes(ledger, tmp_path):
    """Paris, 2025-10-26: 02:30:00 and 02:30:10 come twice (CEST at sm 60 %, then CET at 10 %). By hand, UTC:
    00:30:00 and 00:30:10, then 01:30:00 and 01:30:10; four rows, none merged into another."""
    line = " 20251026   {}      0        4242     C     {}     21      -      -      -      -  30210      0    python\n"
    body = "".join(
        line.format(t, sm)
        for t, sm in [("02:30:00", 60), ("02:30:10", 60), ("02:30:00", 10), ("02:30:10", 10)]
    )
    ingest_file(
        ledger, write(tmp_path, "pmon.log", NEW + body), opts=IngestOptions(tz="Europe/Paris", host="n1")
    )
    assert ledger.execute("SELECT ts, sm_pct FROM processes ORDER BY ts").fetchall() == [
        (T(2025, 10, 26, 0, 30, 0), 60.0),
        (T(2025, 10, 26, 0, 30, 10), 60.0),
        (T(2025, 10, 26, 1, 30, 0), 10.0),
        (T(2025, 10, 26, 1, 30, 10), 10.0),
    ]


def test_the_node_s_known_gpus_are_used_by_index(ledger, tmp_path):
    smi = write(
        tmp_path,
        "gpu.csv",
        "timestamp, index, uuid, name, utilization.gpu [%]\n"
        "2026/03/01 10:00:00.000, 0, GPU-aaaa, NVIDIA H100 80GB HBM3, 50 %\n"
        "2026/03/01 10:00:00.000, 1, GPU-bbbb, NVIDIA H100 80GB HBM3, 50 %\n",
    )
    ingest_file(ledger, smi, opts=UTC)
    log = write(
        tmp_path,
        "pmon.log",
        NEW
        + " 20260301   10:00:00      1        1001     C     60     21      -      -      -      -  30210      0    python\n",
    )
    ingest_file(ledger, log, opts=UTC)
    assert ledger.execute("SELECT gpu_id FROM processes").fetchall() == [("GPU-bbbb",)]
    assert ledger.execute("SELECT count(*) FROM gpus").fetchall() == [(2,)]  # no second name for the card


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        pytest.param(
            "# gpu        pid  type    sm   mem   enc   dec   command\n"
            "# Idx          #   C/G     %     %     %     %   name\n"
            "    0       1001     C    60    20     -     -   python\n",
            1,
            "the lines carry no date and time: record with nvidia-smi pmon -s um -o DT",
            id="no -o DT",
        ),
        pytest.param(
            "#Time        gpu        pid  type    sm   mem   enc   dec   command\n"
            " 10:00:00      0       1001     C    60    20     -     -   python\n",
            1,
            "a time but no date (-o T)",
            id="time only",
        ),
        pytest.param(
            NEW
            + " 20260301   10:00:00      0        1001     C    abc     21      -      -      -      -  30210      0    python\n",
            3,
            "sm is 'abc', not a number or '-'",
            id="not a number",
        ),
        pytest.param(
            NEW
            + " 20260301   10:00:00      0        1001     C    250     21      -      -      -      -  30210      0    python\n",
            3,
            "sm is 250%, above 100%",
            id="out of range",
        ),
        pytest.param(
            NEW + " 20260301   10:00:00      0        1001     C     60\n",
            3,
            "6 values, the header at line 1 names 14 columns",
            id="short line",
        ),
        pytest.param(
            NEW
            + " 2026-03-01   10:00:00      0        1001     C     60     21      -      -      -      -  30210      0    python\n",
            3,
            "Date/Time is 2026-03-01 10:00:00, not YYYYMMDD HH:MM:SS",
            id="date format",
        ),
    ],
)
def test_bad_logs_name_their_line_and_leave_the_ledger_untouched(ledger, tmp_path, text, line, reason):
    log = write(tmp_path, "pmon.log", text)
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, log, fmt="nvidia_smi_pmon", opts=UTC)
    assert err.value.line == line
    assert reason in str(err.value)
    assert ledger.execute(
        "SELECT (SELECT count(*) FROM processes) + (SELECT count(*) FROM ingests)"
    ).fetchall() == [(0,)]


def test_a_dmon_log_is_not_taken_for_pmon(ledger, tmp_path):
    dmon = write(
        tmp_path,
        "dmon.log",
        "#Date       Time        gpu   pwr gtemp mtemp    sm   mem   enc   dec  mclk  pclk\n"
        "#YYYYMMDD   HH:MM:SS    Idx     W     C     C     %     %     %     %   MHz   MHz\n"
        " 20210102   19:12:31      0    37    19     -     0     0     0     0  4006   582\n",
    )
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, dmon, opts=UTC)
    assert "nvidia_smi_pmon: this is nvidia-smi dmon (per-GPU) output" in str(err.value)


def test_replace_removes_the_log_s_shares(ledger, tmp_path):
    line = " 20260301   10:00:0{s}      0        1001     C     {sm}     21      -      -      -      -  30210      0    python\n"
    log = tmp_path / "pmon.log"
    log.write_text(NEW + line.format(s=0, sm=60) + line.format(s=1, sm=61))
    opts = IngestOptions(tz="UTC", host="n1", job_id="ci/7")
    ingest_file(ledger, log, opts=opts)
    log.write_text(NEW + line.format(s=0, sm=30))
    ingest_file(ledger, log, opts=IngestOptions(tz="UTC", host="n1", job_id="ci/7", replace=True))
    assert ledger.execute("SELECT ts, sm_pct FROM process_shares").fetchall() == [(T(2026, 3, 1, 10), 30.0)]
