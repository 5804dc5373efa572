"""One long cell costs time in proportion to its length, in every reader, landed or refused (issue 34).

A jobs CSV whose ``state`` cell was 150,000 letters took 177.7 s to refuse: the error-wording regex took
time growing with the square of the reason's length. Here every parser reads a small file whose first
number past line 2 is replaced by 10,000 and by 100,000 letters. The time the long cell adds must grow
about 10 times (linear), never about 100 times (quadratic): a ratio of the two, never an absolute time.
A refusal's message stays one short line whatever the cell's length.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from collectors.registry import PARSERS
from gpuledger.ledger.db import memory_ledger
from gpuledger.ledger.errors import FormatError
from tests.conftest import DATASETS, ROOT

HEAD_LINES = 40
# a parser's real file (../shared/datasets) or, for formats with none there, a small one written here
REAL: dict[str, str] = {
    "sacct": "slurm-sacct/hyak_sacct_default_fixedwidth.txt",
    "sacct_json": "slurm-sacct/slurmdog_alpine_sacct.json",
    "hf_trainer_state": "hf-trainer/luojiu-7b-qlora-a10/trainer_state.json",
    "llamafactory_log": "hf-trainer/luojiu-7b-qlora-a10/trainer_log.jsonl",
    "lightning_csv": "lightning-csvlogger/slm_training_version_0_metrics.csv",
    "wandb_events": "wandb/spaceinvaders-colab-T4/wandb-events.jsonl",
    "wandb_metadata": "wandb/spaceinvaders-colab-T4/wandb-metadata.json",
    "alibaba_pai2020": "alibaba-gpu-v2020/pai_machine_spec.csv",
    "alibaba_openb2023": "alibaba-gpu-v2023/openb_pod_list_default.csv",
    "alibaba_genai2026": "alibaba-v2026-genai/pod_gpu_duty_cycle_anon.head30k.csv",
    "nvidia_smi_csv": "nvidia-smi-csv/anjana5anand_gpu_usage_log_resnet_224.csv",
    "nvidia_smi_xml": "nvidia-smi-q-xml/telegraf_a100-sxm4-v12.xml",
    "dcgm": "dcgm-exporter/datadog_dcgm_fixture_metrics.txt",
}
WRITTEN: dict[str, tuple[str, str]] = {
    # a kubectl get pods -A -o json list, in the shape kubectl writes (tests/collectors/test_kubernetes.py)
    "kubernetes_pods": ("pods.json", (ROOT / "tests" / "fixtures" / "kubernetes" / "pods.json").read_text()),
    "rocm_smi": (
        "rocm.csv",
        "epoch,device,Average Graphics Package Power (W),GPU use (%),GPU memory use (%)\n"
        "1740823200,card0,310.0,97,35\n"
        "1740823260,card0,330.0,99,38\n",
    ),
    "jobs_csv": (
        "jobs.csv",
        "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state\n"
        "j1,alice,ml,c1,H100,1,2026-01-01T00:00:00,2026-01-01T01:00:00,COMPLETED\n"
        "j2,bob,ml,c1,H100,2,2026-01-01T00:00:00,2026-01-01T02:00:00,FAILED\n",
    ),
    "jobs_jsonl": (
        "jobs.jsonl",
        '{"job_id": "j1", "user": "alice", "team": "ml", "gpu_count": 1, "start": "2026-01-01T00:00:00",'
        ' "end": "2026-01-01T01:00:00", "state": "COMPLETED"}\n'
        '{"job_id": "j2", "user": "bob", "team": "ml", "gpu_count": 2, "start": "2026-01-01T00:00:00",'
        ' "end": "2026-01-01T02:00:00", "state": "FAILED"}\n'
        '{"job_id": "j3", "user": "bob", "team": "ml", "gpu_count": 4, "start": "2026-01-01T00:00:00",'
        ' "end": "2026-01-01T02:00:00", "state": "FAILED"}\n',
    ),
    "nvidia_smi_apps_csv": (
        "apps.csv",
        "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        "2025/03/01 10:00:00.000, GPU-aaa, 4242, python, 30000 MiB\n"
        "2025/03/01 10:00:05.000, GPU-aaa, 4242, python, 30000 MiB\n",
    ),
    "nvidia_smi_pmon": (
        "pmon.log",
        "#Date       Time        gpu         pid   type     sm    mem    enc    dec    jpg    ofa     fb   ccpm    command\n"
        "#YYYYMMDD   HH:MM:SS    Idx           #    C/G      %      %      %      %      %      %     MB     MB    name\n"
        "20250301   10:00:00      0        4242     C     57     12      -      -      -      -   3000      0    python\n"
        "20250301   10:00:01      0        4242     C     58     12      -      -      -      -   3000      0    python\n",
    ),
    "gpustat_json": (
        "gpus.json",
        (ROOT / "tests" / "fixtures" / "gpustat" / "gpustat_two_polls.json").read_text(),
    ),
    "prometheus_json": (
        "query.json",
        '{"status": "success", "data": {"resultType": "matrix", "result": [\n'
        '{"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": "GPU-aaa", "gpu": "0", "Hostname": "n1"},\n'
        ' "values": [[1740823200, "10"],\n [1740823230, "30"]]}]}}\n',
    ),
}
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


def _base(fmt: str, tmp_path: Path) -> tuple[str, str]:
    """The small file for ``fmt``: (file name, text)."""
    if fmt in WRITTEN:
        return WRITTEN[fmt]
    path = DATASETS / REAL[fmt]
    if not path.exists():
        pytest.skip(f"{path} absent (../shared/datasets)")
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    keep = len(lines) if path.suffix in (".json", ".xml") else HEAD_LINES  # a document is read whole
    return path.name, "".join(lines[:keep])


def _with_cell(text: str, cell: str) -> str:
    """``text`` with its first number on line 3 or after replaced by ``cell``."""
    after = sum(len(line) for line in text.splitlines(keepends=True)[:2])
    m = _NUMBER.search(text, after)
    assert m is not None
    return text[: m.start()] + cell + text[m.end() :]


def _seconds(path: Path, fmt: str) -> tuple[float, str]:
    """The best of two ingests of ``path`` into a fresh ledger: (seconds, the refusal or "")."""
    best, message = float("inf"), ""
    for _ in range(2):
        con = memory_ledger()
        try:
            t0 = time.perf_counter()
            try:
                ingest_file(con, path, fmt=fmt, opts=IngestOptions(tz="UTC", host="n1", quiet=True))
                message = ""
            except FormatError as exc:
                message = str(exc)
            best = min(best, time.perf_counter() - t0)
        finally:
            con.close()
    return best, message


@pytest.mark.parametrize("fmt", sorted(PARSERS))
def test_a_long_cell_costs_time_in_proportion_to_its_length(fmt, tmp_path):
    if fmt not in REAL and fmt not in WRITTEN:
        pytest.fail(f"no small file for the parser {fmt!r}: add one to REAL or WRITTEN")
    name, text = _base(fmt, tmp_path)
    times, messages = {}, {}
    for n in (1, 10_000, 100_000):
        path = tmp_path / str(n) / name  # some parsers read the file's name
        path.parent.mkdir()
        path.write_text(_with_cell(text, "A" * n), encoding="utf-8")
        times[n], messages[n] = _seconds(path, fmt)
    # the time the cell adds, over a floor (20 ms) so that noise on a fast reader is no ratio
    added = {n: times[n] - times[1] for n in (10_000, 100_000)}
    ratio = added[100_000] / max(added[10_000], 0.02)
    assert ratio < 30, (fmt, times, messages[100_000][:300])
    for n in (10_000, 100_000):
        assert len(messages[n].encode()) < 1000, (fmt, n, len(messages[n]))


def test_an_unterminated_json_string_of_escaped_quotes_is_scanned_in_linear_time(tmp_path: Path) -> None:
    # `"\"\"\"…` with no closing quote: the old token pattern tried every quote as a new string start and
    # backtracked through the rest (5,000 pairs 0.54 s, 20,000 pairs 22.8 s); now the string is one token
    from collectors.json_lines import json_lines

    def scan(n: int) -> float:
        path = tmp_path / f"s{n}.json"
        path.write_bytes(b'{"log_history": [{"step": 1}, {"x": "' + b'\\"' * n)
        t0 = time.perf_counter()
        got = json_lines(path, "log_history")
        assert got is not None and got.keys == {"log_history": 1}
        return time.perf_counter() - t0

    small, large = scan(10_000), scan(100_000)
    assert large < 30 * max(small, 0.02), (small, large)


def test_json_lines_still_places_keys_and_entries_by_line(tmp_path: Path) -> None:
    from collectors.json_lines import json_lines

    path = tmp_path / "state.json"
    path.write_text('{"a": "q\\"x",\n "log_history": [\n {"step": 1, "loss": 2},\n {"step": 2}\n ]}\n')
    got = json_lines(path, "log_history")
    assert got is not None
    assert got.keys == {"a": 1, "log_history": 2}
    assert got.items == [(3, {"step": 3, "loss": 3}), (4, {"step": 4})]


def test_the_json_object_limit_of_a_gz_file_is_what_it_inflates_to(tmp_path: Path) -> None:
    # a whole-file JSON document is one object: a .gz of 30 MB of JSON is 30 MB to DuckDB, not its 30 KB
    import gzip

    from collectors.sql_text import json_object_limit

    path = tmp_path / "sacct.json.gz"
    with gzip.open(path, "wb") as f:
        f.write(b'{"jobs": [{"name": "' + b"x" * 30_000_000 + b'"}]}')
    assert path.stat().st_size < 100_000
    assert json_object_limit(path) == len(b'{"jobs": [{"name": "') + 30_000_000 + len(b'"}]}') + 1024
