"""Every file format gpuledger reads, by its --format name. Auto-detection tries them all."""

from __future__ import annotations

from collectors.base import Parser
from collectors.jobs_table import JobsJsonl, JobsTable

PARSERS: dict[str, Parser] = {p.name: p for p in (JobsTable(), JobsJsonl())}
