"""What an uploaded log says about its run: its name, model and output folder, each with where it came from.

A browser sends a file's name but not its folder, and the ingest names a run with a tool's own file name
(``trainer_state.json``) after its folder (collectors/training_logs.run_name). So the Upload page looks inside
the file first: a run name, a model or an output folder a trainer wrote there (an HF ``best_model_checkpoint``
such as ``out/llama-7b-sft/checkpoint-500`` names the output folder ``out/llama-7b-sft``); without one, the
run is named after the uploaded file. What the file does not say stays unknown, with that reason.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from typing import Any

# Top-level keys trainers write, by what they name (first found wins). HF TrainingArguments (run_name,
# output_dir) and model configs (_name_or_path) when a tool saves them beside the state; W&B run files
# (name, display_name, model); best_model_checkpoint is a checkpoint folder inside the output folder.
RUN_KEYS = ("run_name", "display_name", "name", "trial_name")
MODEL_KEYS = ("model_name_or_path", "_name_or_path", "model_name", "base_model", "model")
OUTPUT_KEYS = ("output_dir", "logging_dir", "best_model_checkpoint")
JSON_LIMIT = 64 * 2**20  # larger files are not parsed here (the ingest reads them in a stream)
_CHECKPOINT = re.compile(r"^(checkpoint|ckpt|epoch|step)[-_=]?\d+", re.IGNORECASE)


@dataclass(frozen=True)
class RunIdentity:
    """``run``: the run's name (never empty); ``run_basis``: where it came from, in words; ``model`` and
    ``output_dir``: as the file says them, else None with ``*_reason``."""

    run: str
    run_basis: str
    model: str | None
    output_dir: str | None
    model_reason: str | None = None
    output_reason: str | None = None

    @property
    def folder(self) -> str:
        """The folder the upload's copy is put in, so the ingest names the run after it."""
        return self.run


def _text(value: Any) -> str | None:
    """A value a trainer wrote as a name: a non-empty string (a W&B config ``{"value": ...}`` unwrapped)."""
    if isinstance(value, dict) and "value" in value:
        value = value["value"]
    if isinstance(value, str) and value.strip() and len(value) < 500:
        return value.strip()
    return None


def _first(doc: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, str] | None:
    for key in keys:
        if (v := _text(doc.get(key))) is not None:
            return key, v
    return None


def output_folder(path: str) -> str:
    """``out/run-1/checkpoint-500`` → ``out/run-1``: a checkpoint folder's parent; another path as it is."""
    clean = path.replace("\\", "/").rstrip("/")
    return posixpath.dirname(clean) if _CHECKPOINT.match(posixpath.basename(clean)) else clean


def run_identity(file_name: str, data: bytes) -> RunIdentity:
    """The run of an uploaded file ``file_name`` with content ``data`` (see the module docstring)."""
    doc: Any = None
    if len(data) <= JSON_LIMIT and data[:1].strip() in (b"{", b""):
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            doc = None
    if not isinstance(doc, dict):
        doc = {}
    out = _first(doc, OUTPUT_KEYS)
    output = output_folder(out[1]) if out else None
    named = _first(doc, RUN_KEYS)
    model = _first(doc, MODEL_KEYS)
    base = posixpath.basename(output) if output else ""
    if named:
        run, basis = named[1], f"the log's {named[0]}"
    elif base and base not in (".", ".."):
        run, basis = base, f"the output folder in the log's {out[0]}"  # type: ignore[index]
    else:
        run, basis = file_name, "the uploaded file's name (the log names no run or output folder)"
    return RunIdentity(
        run=run,
        run_basis=basis,
        model=model[1] if model else None,
        output_dir=output,
        model_reason=None if model else "the log does not name its model",
        output_reason=None if output else "the log does not name its output folder",
    )
