"""Alibaba public traces: PAI 2020 (machine spec, task table), openb 2023 (pods, nodes), GenAI 2026 series."""

from __future__ import annotations

import datetime as dt
import io
import re
import tarfile

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from collectors.traces import OPENB2023_EPOCH, PAI2020_EPOCH
from gpuledger.ledger.errors import FormatError
from tests.conftest import dataset, write

H = "0123456789abcdef01234567"  # a 24-hex id like the trace's hashes


def test_pai_machine_spec_to_capacity(ledger, tmp_path):
    path = write(
        tmp_path, "spec.csv", f"{H},V100M32,96,512,8\n{H[:-1]}8,V100M32,96,512,8\n{H[:-1]}9,CPU,96,512,0\n"
    )
    report = ingest_file(ledger, path)
    assert report.format == "alibaba_pai2020"
    assert report.skipped == {"machines without GPUs": 1}
    assert ledger.execute("SELECT cluster, gpu_model, gpu_count, start_ts FROM capacity").fetchall() == [
        ("alibaba-pai-2020", "V100-32GB", 16.0, PAI2020_EPOCH)  # 8 + 8
    ]


def test_pai_task_table_plan_gpu_is_percent_of_a_gpu(ledger, tmp_path):
    rows = (
        f"{H},tensorflow,4.0,Terminated,100.0,3700.0,600.0,29.3,50.0,T4\n"  # 4 instances × 50 % = 2 GPUs
        f"{H},worker,1.0,Failed,200.0,260.0,600.0,29.3,,\n"  # no plan_gpu: a CPU task
    )
    path = write(tmp_path, "pai_task_table.csv", rows)
    ingest_file(ledger, path, opts=IngestOptions(cluster="pai"))
    got = ledger.execute(
        "SELECT job_id, cluster, gpu_model, gpu_count, start_ts, end_ts, state FROM jobs ORDER BY 1"
    ).fetchall()
    assert got == [
        (f"pai2020/{H}/tensorflow", "pai", "T4", 2.0, PAI2020_EPOCH + dt.timedelta(seconds=100),
         PAI2020_EPOCH + dt.timedelta(seconds=3700), "COMPLETED"),
        (f"pai2020/{H}/worker", "pai", None, 0.0, PAI2020_EPOCH + dt.timedelta(seconds=200),
         PAI2020_EPOCH + dt.timedelta(seconds=260), "FAILED"),
    ]  # fmt: skip


def test_pai_bad_row_names_its_line(ledger, tmp_path):
    rows = f"{H},a,1.0,Terminated,1,2,1,1,50,T4\n{H},b,1.0,Terminated,soon,2,1,1,50,T4\n"
    path = write(tmp_path, "pai_task_table.csv", rows)
    with pytest.raises(
        FormatError, match=re.escape('pai_task_table.csv:2: column "start_time" is not a number: "soon"')
    ):
        ingest_file(ledger, path)
    assert ledger.execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]


def test_pai_sensor_table_is_refused_with_a_reason(ledger, tmp_path):
    path = write(tmp_path, "pai_sensor_table.csv", "a,b,c\n")
    with pytest.raises(FormatError, match="pai_sensor_table is not loaded"):
        ingest_file(ledger, path)


def test_pai_real_machine_spec(ledger):
    path = dataset("alibaba-gpu-v2020/pai_machine_spec.csv")
    report = ingest_file(ledger, path)
    assert report.skipped == {"machines without GPUs": 83}  # 83 CPU machines in the file
    got = dict(ledger.execute("SELECT gpu_model, gpu_count FROM capacity").fetchall())
    # per gpu_type, sum of cap_gpu in the file; 6,742 GPUs in all
    assert got == {"MISC": 2240.0, "P100": 1596.0, "T4": 994.0, "V100-16GB": 832.0, "V100-32GB": 1080.0}
    assert sum(got.values()) == 6742


POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"


def test_openb_pods_fractional_gpus(ledger, tmp_path):
    rows = [
        "p0,12000,16384,1,460,,LS,Running,0,3600,60",  # 460 milli of one GPU
        "p1,6000,12288,8,1000,V100M32,BE,Succeeded,10,7210,10",  # 8 whole GPUs
        "p2,6000,12288,1,1000,V100M16|V100M32,BE,Pending,20,30,0",  # any of two models; pending
    ]
    path = write(tmp_path, "pods.csv", "\n".join([POD_HEADER, *rows]) + "\n")
    report = ingest_file(ledger, path)
    assert report.format == "alibaba_openb2023"
    s = dt.timedelta(seconds=1)
    assert ledger.execute("SELECT job_id, gpu_model, gpu_count, submit_ts, start_ts, end_ts, state FROM jobs ORDER BY 1").fetchall() == [
        ("openb/p0", None, 0.46, OPENB2023_EPOCH, OPENB2023_EPOCH + 60 * s, OPENB2023_EPOCH + 3600 * s, "RUNNING"),
        ("openb/p1", "V100-32GB", 8.0, OPENB2023_EPOCH + 10 * s, OPENB2023_EPOCH + 10 * s, OPENB2023_EPOCH + 7210 * s, "COMPLETED"),
        ("openb/p2", None, 1.0, OPENB2023_EPOCH + 20 * s, None, None, "PENDING"),
    ]  # fmt: skip


def test_openb_truncated_row_is_an_error(ledger, tmp_path):
    path = write(
        tmp_path, "pods.csv", POD_HEADER + "\np0,12000,16384,1,460,,LS,Running,0,3600,60\np1,6000,12288\n"
    )
    with pytest.raises(FormatError, match="expected 11 fields"):
        ingest_file(ledger, path)
    assert ledger.execute("SELECT count(*) FROM ingests").fetchall() == [(0,)]


def test_openb_real_pod_and_node_lists(ledger):
    pods = ingest_file(ledger, dataset("alibaba-gpu-v2023/openb_pod_list_default.csv"))
    assert pods.rows == {"jobs": 8152}  # 8,152 pods
    # openb-pod-0001: num_gpu 1, gpu_milli 460, creation 427061, deletion 12902960 (read from the file)
    assert ledger.execute("SELECT gpu_count, start_ts, end_ts FROM jobs WHERE job_id = 'openb/openb-pod-0001'").fetchall() == [
        (0.46, OPENB2023_EPOCH + dt.timedelta(seconds=427061), OPENB2023_EPOCH + dt.timedelta(seconds=12902960))
    ]  # fmt: skip
    phases = dict(ledger.execute("SELECT state, count(*) FROM jobs GROUP BY 1").fetchall())
    assert phases == {"RUNNING": 5193, "FAILED": 1870, "PENDING": 897, "COMPLETED": 192}  # pod_phase counts
    nodes = ingest_file(ledger, dataset("alibaba-gpu-v2023/openb_node_list_all_node.csv"))
    assert nodes.skipped == {"nodes without GPUs": 310}
    assert ledger.execute("SELECT sum(gpu_count) FROM capacity").fetchall() == [
        (6212.0,)
    ]  # 1,523 nodes, 6,212 GPUs
    assert ledger.execute("SELECT gpu_count FROM capacity WHERE gpu_model = 'G2'").fetchall() == [(4392.0,)]


def test_genai_duty_and_memory_series(ledger, tmp_path):
    duty = write(
        tmp_path, "duty.csv", "value,timestamp_anon,container_ip\n12.5,1662858720.0,ab\n0.0,1662858780.0,ab\n"
    )
    ingest_file(ledger, duty)
    mem = write(tmp_path, "mem.csv", "timestamp_anon,value,container_ip\n1662858720.0,1073741824.0,cd\n")
    ingest_file(ledger, mem)
    t0 = dt.datetime(2022, 9, 11, 1, 12)  # 1662858720 s after 1970-01-01 UTC
    assert ledger.execute(
        "SELECT ts, gpu_id, util_pct, mem_used_mib FROM samples ORDER BY gpu_id, ts"
    ).fetchall() == [
        (t0, "genai:ab", 12.5, None),
        (t0 + dt.timedelta(minutes=1), "genai:ab", 0.0, None),
        (t0, "genai:cd", None, 1024.0),  # 1073741824 B / 1048576 = 1024 MiB
    ]


def test_genai_duty_cycle_over_100_is_an_error(ledger, tmp_path):
    path = write(tmp_path, "x.csv", "value,timestamp_anon,container_ip\n50,1,ab\n3.3e10,2,ab\n")
    with pytest.raises(FormatError, match=r"x.csv:3: a duty cycle is 0–100 %"):
        ingest_file(ledger, path)


def test_genai_tar_gz_streams_the_member(ledger, tmp_path):
    body = b"value,timestamp_anon,container_ip\n40.0,1662858720.0,ab\n"
    path = tmp_path / "pod_gpu_duty_cycle_anon.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("pod_gpu_duty_cycle_anon.csv")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    report = ingest_file(ledger, path)
    assert report.format == "alibaba_genai2026" and report.rows["samples"] == 1


def test_genai_real_head30k_and_archive(ledger):
    report = ingest_file(ledger, dataset("alibaba-v2026-genai/pod_gpu_duty_cycle_anon.head30k.csv"))
    assert report.rows["samples"] == 30000  # 30,000 rows, 114 pods
    assert ledger.execute("SELECT count(DISTINCT gpu_id), min(ts) FROM samples").fetchall() == [
        (114, dt.datetime(2022, 9, 11, 1, 12))  # first timestamp_anon 1662858720.0
    ]
    full = ingest_file(ledger, dataset("alibaba-v2026-genai/pod_gpu_duty_cycle_anon.tar.gz"))
    # 157,417 rows in the archive; its first 30,000 are the head file's, so they are not counted twice
    assert full.rows["samples"] == 157417 - 30000
    assert full.skipped == {"samples already in the ledger": 30000}


def test_genai_real_memory_archive(ledger):
    report = ingest_file(ledger, dataset("alibaba-v2026-genai/pod_gpu_memory_used_bytes_anon.tar.gz"))
    assert report.rows["samples"] == 161413  # 161,413 rows, 144 pods
    # first row: 1662858720.0, 33879490560.0 bytes, 23b8eba9... → 32310 MiB
    assert ledger.execute(
        "SELECT mem_used_mib FROM samples WHERE gpu_id = 'genai:23b8eba99c14e73d454503a55ae96989' ORDER BY ts LIMIT 1"
    ).fetchall() == [(pytest.approx(33879490560.0 / 1048576),)]
