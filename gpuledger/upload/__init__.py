"""The Upload page's product logic, without Streamlit: one file analysed on its own, in a worker process.

analysis.py ingests a copy of the file into an in-memory ledger (the same parsers, checks and ingest options
as ``gpuledger ingest``) and runs the Overview's analyses on it; worker.py runs that in a separate process
within a time and memory limit (settings ``dashboard.upload_seconds`` and ``dashboard.upload_worker_mb``),
so one hostile or huge upload never stalls the server that other people's pages run in.
"""

from collectors.gpu_facts import GpuFacts, gpu_facts
from gpuledger.upload.analysis import UploadResult, analyse_file
from gpuledger.upload.worker import WorkerFailed, WorkerLimit, analyse_isolated, run_limited

__all__ = [
    "GpuFacts",
    "UploadResult",
    "WorkerFailed",
    "WorkerLimit",
    "analyse_file",
    "analyse_isolated",
    "gpu_facts",
    "run_limited",
]
