"""dcgm-exporter text exposition: families, legacy names, labels, MIG, sentinel, XID, scrapes, errors."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import dataset, write

L0 = 'gpu="0",UUID="GPU-aaa",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node1"'
T1, T2 = 1740823200000, 1740823230000  # 2025-03-01 10:00:00 and 10:00:30 UTC, in ms

SCRAPES = f"""# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{{L0},hpc_job="4411"}} 40 {T1}
# NOTE a comment dcgm-exporter does not write but people do
DCGM_FI_DEV_FB_USED{{{L0}}} 1000 {T1}
DCGM_FI_DEV_FB_FREE{{{L0}}} 80559 {T1}
DCGM_FI_DEV_POWER_USAGE{{{L0}}} 301.5 {T1}
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{L0}}} 123456789 {T1}
DCGM_FI_PROF_SM_ACTIVE{{{L0}}} 0.25 {T1}
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{L0}}} 9223372036854775794 {T1}
DCGM_FI_DEV_XID_ERRORS{{{L0}}} 0 {T1}
DCGM_FI_DEV_MEM_CLOCK{{{L0}}} 2619 {T1}
DCGM_FI_DEV_GPU_UTIL{{{L0},hpc_job="4411"}} 60 {T2}
DCGM_FI_DEV_XID_ERRORS{{{L0}}} 79 {T2}"""  # no trailing newline, as dcgm-exporter writes


def _rows(ledger, sql: str) -> list[tuple[object, ...]]:
    return ledger.execute(sql).fetchall()


def test_two_scrapes_pivot_to_samples_with_units_and_job(ledger, tmp_path):
    report = ingest_file(ledger, write(tmp_path, "m.prom", SCRAPES))
    assert report.format == "dcgm"
    assert report.rows == {"samples": 2, "gpus": 1, "gpu_events": 1}
    # only MEM_CLOCK was left out; the tensor sentinel is stored (as NULL), so it is not a skip
    assert report.skipped == {"values of metrics the ledger does not store": 1}
    assert _rows(
        ledger,
        "SELECT ts::VARCHAR, gpu_id, util_pct, mem_used_mib, mem_total_mib, power_w, energy_j, sm_active_pct, "
        "tensor_active_pct, job_id, interval_s FROM samples ORDER BY ts",
    ) == [
        # total = used + free = 1000 + 80559; energy 123456789 mJ = 123456.789 J; SM active 0.25 → 25 %
        (
            "2025-03-01 10:00:00",
            "GPU-aaa",
            40.0,
            1000.0,
            81559.0,
            301.5,
            123456.789,
            25.0,
            None,
            "4411",
            30.0,
        ),
        ("2025-03-01 10:00:30", "GPU-aaa", 60.0, None, None, None, None, None, None, "4411", 30.0),
    ]
    assert _rows(ledger, "SELECT ts::VARCHAR, gpu_id, kind, value FROM gpu_events") == [
        ("2025-03-01 10:00:30", "GPU-aaa", "xid", "79")
    ]
    assert _rows(ledger, "SELECT gpu_id, uuid, host, gpu_index, model FROM gpus") == [
        ("GPU-aaa", "GPU-aaa", "node1", 0, "H100-SXM-80GB")
    ]


def test_legacy_names_lowercase_labels_and_mig(ledger, tmp_path):
    text = (
        f'dcgm_gpu_utilization{{gpu="1",UUID="GPU-old",Hostname="h"}} 7 {T1}\n'
        f'dcgm_fb_used{{gpu="1",UUID="GPU-old",Hostname="h"}} 512 {T1}\n'
        f'dcgm_fi_prof_gr_engine_active{{gpu="0",uuid="GPU-mig",modelName="NVIDIA A100 80GB PCIe",'
        f'GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",pod_name=""}} 0.5 {T1}\n'
    )
    ingest_file(ledger, write(tmp_path, "m.prom", text))
    # a MIG instance has no GPU_UTIL: GR_ENGINE_ACTIVE 0.5 → 50 %
    assert _rows(ledger, "SELECT gpu_id, util_pct, mem_used_mib FROM samples ORDER BY gpu_id") == [
        ("GPU-mig/1", 50.0, None),
        ("GPU-old", 7.0, 512.0),
    ]
    assert _rows(ledger, "SELECT gpu_id, mig_profile, parent_gpu_id, model FROM gpus ORDER BY gpu_id") == [
        ("GPU-mig/1", "3g.40gb", "GPU-mig", "A100-80GB"),
        ("GPU-old", None, None, None),
    ]


def test_no_uuid_uses_host_and_index_and_unlabelled_values_are_counted(ledger, tmp_path):
    text = f'DCGM_FI_DEV_GPU_UTIL{{gpu="3",Hostname="n9"}} 12 {T1}\nDCGM_FI_DEV_GPU_UTIL 0 {T1}\n'
    report = ingest_file(ledger, write(tmp_path, "m.prom", text))
    assert report.skipped == {"values without a GPU label (UUID or gpu)": 1}
    assert _rows(ledger, "SELECT gpu_id, util_pct FROM samples") == [("n9:3", 12.0)]


def test_file_without_timestamps_is_one_scrape_at_the_file_mtime(ledger, tmp_path):
    path = write(tmp_path, "m.prom", f"DCGM_FI_DEV_GPU_UTIL{{{L0}}} 33\n")
    stamp = dt.datetime(2025, 3, 1, 12, 0, 0, tzinfo=dt.UTC).timestamp()
    os.utime(path, (stamp, stamp))
    report = ingest_file(ledger, path)
    assert report.skipped == {}  # the one value was stored: nothing was skipped
    assert _rows(ledger, "SELECT ts::VARCHAR, util_pct FROM samples") == [("2025-03-01 12:00:00", 33.0)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"DCGM_FI_DEV_GPU_UTIL{{{L0}}} 1 {T1}\nDCGM_FI_DEV_GPU_UTIL{{{L0}}} lots {T2}\n",
            "m.prom:2: not a Prometheus sample line",
        ),
        (
            f'DCGM_FI_DEV_GPU_UTIL{{{L0}}} 1 {T1}\nDCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-a',
            "m.prom:2: not a Prometheus sample line",
        ),
        (
            f"DCGM_FI_DEV_GPU_UTIL{{{L0}}} 1\nDCGM_FI_DEV_GPU_UTIL{{{L0}}} 2\n",
            "m.prom:2: a series repeats but the samples carry no timestamps",
        ),
        (
            f"DCGM_FI_DEV_GPU_UTIL{{{L0}}} 1 {T1}\nDCGM_FI_DEV_FB_USED{{{L0}}} 2\n",
            "m.prom:2: this sample has no timestamp but others in the file do",
        ),
    ],
    ids=["bad-value", "truncated", "repeat-without-ts", "mixed-ts"],
)
def test_bad_files_name_the_line_and_change_nothing(ledger, tmp_path, text, expected):
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, write(tmp_path, "m.prom", text), fmt="dcgm")
    assert expected in str(err.value)
    assert _rows(ledger, "SELECT (SELECT count(*) FROM samples), (SELECT count(*) FROM ingests)") == [(0, 0)]


def test_reingest_is_a_noop_and_overlapping_scrapes_are_not_double_counted(ledger, tmp_path):
    first = write(tmp_path, "a.prom", SCRAPES)
    ingest_file(ledger, first)
    assert ingest_file(ledger, first).already
    later = f"DCGM_FI_DEV_GPU_UTIL{{{L0}}} 60 {T2}\nDCGM_FI_DEV_GPU_UTIL{{{L0}}} 70 {T2 + 30000}\n"
    report = ingest_file(ledger, write(tmp_path, "b.prom", later))
    assert report.rows["samples"] == 1 and report.skipped["samples already in the ledger"] == 1
    assert _rows(ledger, "SELECT count(*) FROM samples") == [(3,)]


@pytest.mark.datasets
def test_real_datadog_fixture(ledger):
    report = ingest_file(ledger, dataset("dcgm-exporter/datadog_dcgm_fixture_metrics.txt"))
    # two T4 hosts (two UUIDs); the 14 label-less dummy lines after "# NOTE" have no GPU label
    assert report.rows == {"samples": 2, "gpus": 2}
    assert report.skipped["values without a GPU label (UUID or gpu)"] == 3
    # line 3: SM_CLOCK 300, line 12: POWER_USAGE 8.969000, line 15: TOTAL_ENERGY 128996013 mJ, FB_FREE 15109
    assert _rows(
        ledger,
        "SELECT sm_clock_mhz, round(power_w::DOUBLE, 3), energy_j, temp_c, util_pct, mem_used_mib, mem_total_mib "
        "FROM samples WHERE gpu_id = 'GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e'",
    ) == [(300.0, 8.969, 128996.013, 25.0, 0.0, 0.0, 15109.0)]
    assert _rows(ledger, "SELECT DISTINCT model, host FROM gpus ORDER BY host") == [
        ("T4", "424773df46e0"),
        ("T4", "551bdf382151"),
    ]


@pytest.mark.datasets
def test_real_issue_excerpts_repeat_a_series_without_timestamps(ledger):
    # the A30 MIG block quotes DCGM_FI_PROF_PIPE_TENSOR_ACTIVE from two scrapes (lines 24 and 27)
    with pytest.raises(FormatError, match=r"github_issue_excerpts_metrics\.txt:27: a series repeats"):
        ingest_file(ledger, dataset("dcgm-exporter/github_issue_excerpts_metrics.txt"))
    assert _rows(ledger, "SELECT count(*) FROM samples") == [(0,)]


def test_job_ids_come_from_hpc_job_else_pod_and_carry_the_cluster_prefix(ledger, tmp_path):
    from collectors.base import IngestOptions

    path = write(
        tmp_path,
        "k8s.prom",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1",hpc_job="4411"} 90 1700000000000\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",Hostname="n1",namespace="ml",pod="trainer-0"} 80 1700000000000\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-c",Hostname="n1",exported_namespace="web",exported_pod="api-1",'
        'namespace="monitoring",pod="dcgm-exporter-x"} 70 1700000000000\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-d",Hostname="n1",pod=""} 0 1700000000000\n',
    )
    ingest_file(ledger, path, opts=IngestOptions(cluster="prod"))
    rows = ledger.execute("SELECT gpu_id, job_id FROM samples ORDER BY gpu_id").fetchall()
    assert rows == [
        ("GPU-a", "prod/4411"),
        ("GPU-b", "prod/ml/trainer-0"),
        ("GPU-c", "prod/web/api-1"),  # the exported_* labels name the workload, not the exporter's own pod
        ("GPU-d", None),
    ]


def test_label_values_are_unescaped(ledger, tmp_path):
    # the exposition format escapes \\, \" and \n inside label values; "\\n" is a backslash and an n
    path = write(
        tmp_path,
        "esc.prom",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-e",Hostname="n1",modelName="NVIDIA \\"H100\\" 80GB HBM3",'
        'namespace="ml",pod="a\\\\b\\nc\\\\nd"} 50 1700000000000\n',
    )
    report = ingest_file(ledger, path)
    assert report.skipped == {}
    assert _rows(ledger, "SELECT job_id FROM samples") == [("ml/a\\b\nc\\nd",)]
    assert _rows(ledger, "SELECT model_raw FROM gpus") == [('NVIDIA "H100" 80GB HBM3',)]


def test_a_gpu_shared_by_two_pods_is_no_one_pods_sample(ledger, tmp_path):
    # time-slicing: dcgm-exporter writes the card's series once per pod on it; one pod alone at T2
    lab = 'gpu="0",UUID="GPU-s",Hostname="n1",namespace="ml"'
    path = write(
        tmp_path,
        "shared.prom",
        f'DCGM_FI_DEV_GPU_UTIL{{{lab},pod="a"}} 80 {T1}\n'
        f'DCGM_FI_DEV_GPU_UTIL{{{lab},pod="b"}} 80 {T1}\n'
        f'DCGM_FI_DEV_GPU_UTIL{{{lab},pod="b"}} 30 {T2}\n',
    )
    report = ingest_file(ledger, path)
    assert report.rows == {"samples": 2, "gpus": 1, "processes": 2}
    assert report.skipped == {}
    # not max(job_id) = "ml/b" for both: the shared sample is left to the job records' allocations
    assert _rows(ledger, "SELECT ts::VARCHAR, util_pct, job_id FROM samples ORDER BY ts") == [
        ("2025-03-01 10:00:00", 80.0, None),
        ("2025-03-01 10:00:30", 30.0, "ml/b"),
    ]
    assert _rows(ledger, "SELECT ts::VARCHAR, gpu_id, job_id FROM processes ORDER BY job_id") == [
        ("2025-03-01 10:00:00", "GPU-s", "ml/a"),
        ("2025-03-01 10:00:00", "GPU-s", "ml/b"),
    ]
