"""Every file format gpuledger reads, by its --format name. Auto-detection tries them all."""

from __future__ import annotations

from collectors.contract import Parser
from collectors.dcgm import DcgmText
from collectors.gpustat_json import GpustatJson
from collectors.jobs_table import JobsJsonl, JobsTable
from collectors.kubernetes import KubernetesPods
from collectors.nvidia_smi_csv import NvidiaSmiAppsCsv, NvidiaSmiCsv
from collectors.nvidia_smi_pmon import NvidiaSmiPmon
from collectors.nvidia_smi_xml import NvidiaSmiXml
from collectors.prometheus_json import PrometheusJson
from collectors.rocm_smi import RocmSmiCsv
from collectors.sacct import SacctParsable
from collectors.sacct_json import SacctJson
from collectors.traces import GenaiSeries2026, OpenbTrace2023, PaiTrace2020
from collectors.training_logs import HfTrainerState, LightningMetrics, LlamaFactoryLog
from collectors.wandb import WandbEvents, WandbMetadata

PARSERS: dict[str, Parser] = {
    p.name: p
    for p in (
        JobsTable(),
        JobsJsonl(),
        SacctParsable(),
        SacctJson(),
        KubernetesPods(),
        HfTrainerState(),
        LlamaFactoryLog(),
        LightningMetrics(),
        WandbEvents(),
        WandbMetadata(),
        PaiTrace2020(),
        OpenbTrace2023(),
        GenaiSeries2026(),
    )
}
PARSERS.update(
    {
        p.name: p
        for p in (
            NvidiaSmiCsv(),
            NvidiaSmiAppsCsv(),
            NvidiaSmiPmon(),
            NvidiaSmiXml(),
            DcgmText(),
            PrometheusJson(),
            RocmSmiCsv(),
            GpustatJson(),
        )
    }
)
