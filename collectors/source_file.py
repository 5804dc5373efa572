"""What a file must be before any parser reads it: a regular file of UTF-8 text, every line of it readable.

DuckDB's readers stop short in ways a user never hears of: a last line longer than their buffer (33 MB and
more) was dropped and the rows before it landed ("1 jobs"), and a ``.csv.gz`` holding one good row and then
gigabytes of NUL bytes landed that row. Other shapes got a wrong sentence: ``/dev/zero`` or a FIFO "is
empty", a symlink loop "no such file", UTF-16 "no parser recognises this file", a 200 MB line DuckDB's raw
text. Here each is refused with its own sentence and line, before the parser runs:

- :func:`check_path`: a regular file (not a device, FIFO or socket), not a symlink loop, not UTF-16/32;
- :func:`scan_source`: every byte read (decompressed for gzip, stopped early past a decompression ratio),
  and, unless it is a tar archive (whose members the parser reads), no NUL byte, no line longer than :data:`MAX_LINE_BYTES` in a line-oriented format, and a header that
  fits the head parsers read. It returns how many bytes it read, which the ingest report states and which
  equals the file's size: nothing was left unread.
"""

from __future__ import annotations

import errno
import os
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NoReturn

from gpuledger.ledger.errors import FormatError

BLOCK_BYTES = 1 << 22
# Under DuckDB's CSV reader's own limit (max_line_size, about 2 MB; a 2 MiB - 1 line gets its raw "CSV
# Error"): a line-oriented file's longer line is refused here with its number, not by the reader's raw text
# (or not at all: a last line past its 32 MB buffer was dropped without a word)
MAX_LINE_BYTES = 2**20
# the head parsers sniff and read a header from (collectors/contract.py HEAD_BYTES)
HEAD_BYTES = 64 * 1024
# a gzip file is judged by its ratio once it has given this much: a small file may compress very well
RATIO_AFTER_BYTES = 16 * 2**20
DEFAULT_MAX_GZIP_RATIO = 250.0
# formats whose file is one document (JSON, XML) that may well be one long line: no line limit
DOCUMENT_FORMATS = frozenset(
    {"sacct_json", "hf_trainer_state", "wandb_metadata", "nvidia_smi_xml", "prometheus_json", "gpustat_json"}
)
# line-oriented formats with no header line (the first line is data like the others)
HEADERLESS_FORMATS = frozenset({"alibaba_pai2020", "dcgm", "nvidia_smi_pmon", "sacct"})


@dataclass(frozen=True)
class SourceScan:
    """What :func:`scan_source` read: ``bytes_read`` of the file itself (its size when the scan ends),
    ``text_bytes`` after decompression."""

    bytes_read: int
    text_bytes: int
    # (start, end) file offsets of the zero padding after a gzip member, which Python's gzip skips and
    # DuckDB's reader refuses ("Input is not a GZIP stream"): the ingest stages a copy without them
    padding: tuple[tuple[int, int], ...] = ()


def check_path(path: Path) -> None:
    """Refuse what is not a regular file of UTF-8 text, with a sentence that says what it is."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FormatError(path, None, "a symbolic link loop (the link points back to itself)") from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise FormatError(path, None, "no such file") from None
        raise FormatError(path, None, f"cannot be read: {(exc.strerror or str(exc)).lower()}") from None
    if stat.S_ISDIR(st.st_mode):
        raise FormatError(path, None, "a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a FIFO (named pipe)"
            if stat.S_ISFIFO(st.st_mode)
            else "a socket"
            if stat.S_ISSOCK(st.st_mode)
            else "a device"
        )
        raise FormatError(path, None, f"not a regular file but {kind}: save what it gives to a file first")
    if st.st_size == 0:
        raise FormatError(path, None, "the file is empty")
    encoding = wide_encoding(_head(path))
    if encoding:
        raise FormatError(path, 1, f"{encoding} text: save the file as UTF-8")


def _head(path: Path, size: int = 256) -> bytes:
    with path.open("rb") as fh:
        raw = fh.read(size)
    if raw.startswith(b"\x1f\x8b"):
        with path.open("rb") as fh:  # the head only: a .gz of gigabytes is not read here
            start = fh.read(HEAD_BYTES)
        try:
            return zlib.decompressobj(wbits=47).decompress(start, size)
        except zlib.error:
            return b""
    return raw


def wide_encoding(head: bytes) -> str | None:
    """``UTF-16`` or ``UTF-32`` (with the byte order) when ``head`` is text in one of them, else None:
    by its byte-order mark, or, without one, by the NUL bytes its ASCII characters carry."""
    for bom, name in (
        (b"\xff\xfe\x00\x00", "UTF-32 (little-endian, with a byte-order mark)"),
        (b"\x00\x00\xfe\xff", "UTF-32 (big-endian, with a byte-order mark)"),
        (b"\xff\xfe", "UTF-16 (little-endian, with a byte-order mark)"),
        (b"\xfe\xff", "UTF-16 (big-endian, with a byte-order mark)"),
    ):
        if head.startswith(bom):
            return name
    n = len(head) // 4 * 4
    if n < 8:
        return None
    h = head[:n]
    quads = [h[i::4] for i in range(4)]
    if not quads[0].count(0) and all(q.count(0) == len(q) for q in quads[1:]):
        return "UTF-32 (little-endian)"
    if not quads[3].count(0) and all(q.count(0) == len(q) for q in quads[:3]):
        return "UTF-32 (big-endian)"
    even, odd = h[0::2], h[1::2]
    if not even.count(0) and odd.count(0) == len(odd):
        return "UTF-16 (little-endian)"
    if not odd.count(0) and even.count(0) == len(even):
        return "UTF-16 (big-endian)"
    return None


def scan_source(path: Path, fmt: str, *, max_gzip_ratio: float = DEFAULT_MAX_GZIP_RATIO) -> SourceScan:
    """Read all of ``path`` once (gzip decompressed) and refuse what a parser could not read whole.

    Block-wise with C-speed bytes methods only: NUL bytes by ``find``, line lengths by stepping ``rfind``
    back from :data:`MAX_LINE_BYTES` past each line start (a few calls a mebibyte). Lines are counted only
    for a message (a second pass up to the fault): counting them all took 1.1 s of a 243 MB file's 1.4 s."""
    lines_limited = fmt not in DOCUMENT_FORMATS
    header = lines_limited and fmt not in HEADERLESS_FORMATS
    read = text = 0
    line_start = 0  # offset in the text where the current line starts
    padding: list[tuple[int, int]] = []
    with path.open("rb") as fh:
        zipped = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        archive = False
        for got, block in _blocks(path, fh, zipped, max_gzip_ratio, padding):
            read = got
            if text == 0 and block[257:262] == b"ustar":
                # a tar archive (traces' .tar.gz): NUL-padded by design, its members read by the parser;
                # only the gzip checks (ratio, truncation) and the byte count apply
                archive = True
            if archive:
                text += len(block)
                continue
            nul = block.find(b"\x00")
            if nul >= 0:
                what = "the decompressed data" if zipped else "the file"
                raise FormatError(
                    path,
                    _line_at(path, text + nul),
                    f"a NUL byte: {what} is not text here (a damaged or padded file?)",
                )
            first_line_open = header and line_start == 0  # no line end met yet
            if (
                first_line_open
                and text + len(block) > HEAD_BYTES
                and block.find(b"\n", 0, HEAD_BYTES - text + 1) < 0
            ):
                _too_long(path, 1, header=True)
            if lines_limited:
                pos = 0  # where in the block the current line (or the block) starts
                while line_start + MAX_LINE_BYTES - text < len(block):
                    reach = line_start + MAX_LINE_BYTES - text  # the last offset this line may end at
                    nl = block.rfind(b"\n", pos, reach + 1)
                    if nl < 0:
                        _too_long(path, _line_at(path, line_start), header)
                    pos = nl + 1
                    line_start = text + pos
            last_nl = block.rfind(b"\n")
            if last_nl >= 0:
                line_start = text + last_nl + 1
            text += len(block)
    return SourceScan(bytes_read=read, text_bytes=text, padding=tuple(padding))


def _line_at(path: Path, offset: int) -> int:
    """The 1-based line of the text's byte ``offset`` (gzip inflated): a message's line, counted again."""
    line = 1
    with path.open("rb") as fh:
        zipped = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        seen = 0
        for _, block in _blocks(path, fh, zipped, float("inf")):
            line += block.count(b"\n", 0, max(offset - seen, 0))
            seen += len(block)
            if seen >= offset:
                break
    return line


def _blocks(
    path: Path, fh: BinaryIO, zipped: bool, max_ratio: float, padding: list[tuple[int, int]] | None = None
) -> Iterator[tuple[int, bytes]]:
    """(bytes of the file read so far, the next block of its text), gzip inflated a block at a time (every
    member of a concatenated file, as gzip and DuckDB read them) and refused past ``max_ratio`` (gigabytes
    from megabytes: a decompression bomb) before it is all inflated.

    Between and after members, zero bytes are padding, skipped as Python's gzip skips them (tape and block
    devices pad a file to their block size); their (start, end) offsets go to ``padding``. Anything else
    there that is not another member's magic bytes is refused at its offset, as gzip refuses it: never read
    as text, and never read to its end (200 MB appended to a .csv.gz stop at its first byte)."""
    read = 0
    if not zipped:
        while chunk := fh.read(BLOCK_BYTES):
            read += len(chunk)
            yield read, chunk
        return
    inflate = zlib.decompressobj(wbits=47)
    pending, produced, midway, members = b"", 0, False, 0
    zeros_from: int | None = None  # where the run of padding being read started
    while True:
        if not pending:
            chunk = fh.read(BLOCK_BYTES)
            if not chunk:
                break
            read += len(chunk)
            pending = chunk
        if members and not midway:  # between members: padding, or the next member's magic
            stripped = pending.lstrip(b"\x00")
            if len(stripped) < len(pending) and zeros_from is None:
                zeros_from = read - len(pending)
            if not stripped:
                pending = b""
                continue
            if len(stripped) < 2 and (more := fh.read(BLOCK_BYTES)):
                read += len(more)
                stripped += more
            at = read - len(stripped)
            if zeros_from is not None:
                if padding is not None:
                    padding.append((zeros_from, at))
                zeros_from = None
            if not stripped.startswith(b"\x1f\x8b"):
                raise FormatError(
                    path,
                    None,
                    f"bytes after the end of the gzip data (from byte {at:,}) that are neither zero padding "
                    "nor another gzip member: a damaged file, or something appended to it",
                )
            pending = stripped
        try:
            piece = inflate.decompress(pending, BLOCK_BYTES)
        except zlib.error as exc:
            raise FormatError(path, None, f"a damaged gzip file ({exc})") from None
        midway = True
        pending = inflate.unconsumed_tail
        if inflate.eof:  # a member ends; another may follow
            pending = inflate.unused_data + pending
            inflate, midway = zlib.decompressobj(wbits=47), False
            members += 1
        produced += len(piece)
        if produced > RATIO_AFTER_BYTES and produced > max_ratio * read:
            raise FormatError(
                path,
                None,
                f"decompresses to more than {max_ratio:g} times its size ({produced:,} bytes from the first "
                f"{read:,}): not a data file (settings: ingest.max_gzip_ratio)",
            )
        if piece:
            yield read, piece
    if zeros_from is not None and padding is not None:
        padding.append((zeros_from, read))
    if midway:
        raise FormatError(path, None, "a gzip file that ends early (truncated?)")


def unpadded_copy(path: Path, padding: tuple[tuple[int, int], ...], folder: Path) -> Path:
    """A copy of ``path`` in ``folder`` (same name) without its gzip zero ``padding`` (from
    :func:`scan_source`), for DuckDB's reader, which refuses padding Python's gzip skips. Copied a block at a
    time: memory stays that of one block whatever the padding's size; the disk holds the gzip data only."""
    out = folder / path.name
    with path.open("rb") as src, out.open("wb") as dst:
        at = 0
        for start, end in (*padding, (path.stat().st_size, path.stat().st_size)):
            while at < start:
                chunk = src.read(min(BLOCK_BYTES, start - at))
                if not chunk:
                    break
                dst.write(chunk)
                at += len(chunk)
            src.seek(end)
            at = end
    return out


def _too_long(path: Path, line: int, header: bool) -> NoReturn:
    if header and line == 1:
        raise FormatError(
            path, 1, f"header wider than can be read: its first line runs past {HEAD_BYTES // 1024} KiB"
        )
    raise FormatError(
        path,
        line,
        f"line {line} is longer than {MAX_LINE_BYTES // 2**20} MiB (a damaged file, or no line ends in it)",
    )
