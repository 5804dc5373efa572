"""The names a parser and a writer import, kept under their old address: each now lives in the module named
for its role, and new code imports it from there.

- the parser contract: collectors/contract.py (:class:`Parser`, :class:`Sniff`, :class:`IngestOptions`,
  :class:`IngestReport`, :func:`choose_parser`, :func:`read_head`);
- the landing: collectors/landing.py (:func:`land` and its helpers, :func:`run_in_transaction`);
- provenance: collectors/provenance.py (:func:`record_ingest`, :func:`record_source`,
  :func:`withdraw_source`, :func:`delete_ingests`, :func:`sha256_file`, ``held_rows``);
- the ingest driver: collectors/ingest.py (:func:`~collectors.ingest.ingest_file`).

Only re-exports here: a test that replaces a function replaces it where it lives (``collectors.landing``).
"""

from __future__ import annotations

from collectors.contract import (
    HEAD_BYTES,
    IngestOptions,
    IngestReport,
    Parser,
    Sniff,
    choose_parser,
    read_head,
)
from collectors.landing import (
    drop_stage,
    land,
    run_in_transaction,
    split_sample_notes,
)
from collectors.provenance import (
    delete_ingests,
    next_ingest_id,
    record_ingest,
    record_source,
    sha256_file,
    withdraw_source,
)
from gpuledger.ledger.sql import quote

__all__ = [
    "HEAD_BYTES",
    "IngestOptions",
    "IngestReport",
    "Parser",
    "Sniff",
    "choose_parser",
    "delete_ingests",
    "drop_stage",
    "land",
    "next_ingest_id",
    "quote",
    "read_head",
    "record_ingest",
    "record_source",
    "run_in_transaction",
    "sha256_file",
    "split_sample_notes",
    "withdraw_source",
]
