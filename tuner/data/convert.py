"""Text -> Parquet conversion (``tuner convert``)."""
from __future__ import annotations

import contextlib
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tuner.fileio import finish_temp, remove_stale_temps, temp_path_for
from .errors import MAX_BAD_KEPT, SHOW_BAD, DatasetError, clip, format_bad_list
from .fastscan import MODES as SCAN_MODES
from .fastscan import scan_block
from tuner.chess.fen import parse_fen_array
from tuner.chess.status import status_text
from .formats import DESCRIPTIONS, FORMATS, PARSERS, binary_kind, detect_format, not_text_hint
from .schema import ROW_GROUP_ROWS, output_schema

BLOCK_BYTES = 8 << 20
DETECT_BYTES = 1 << 20
DETECT_LINES = 200
#: Every bad line goes to ``<output>`` + this when there are more than the messages show.
REPORT_SUFFIX = ".bad.txt"
#: A UTF-8 byte order mark; a text input may start with one (skipped).
UTF8_BOM = b"\xef\xbb\xbf"


@dataclass
class FileSummary:
    path: str
    format: str
    rows: int = 0
    n_bad: int = 0


@dataclass
class ConvertSummary:
    output: Path
    rows: int
    n_bad: int
    bad: list[str]  # "file:line: reason", the first MAX_BAD_KEPT
    files: list[FileSummary] = field(default_factory=list)
    seconds: float = 0.0
    bytes_in: int = 0
    messages: list[str] = field(default_factory=list)  # notes and the bad-line report
    report: "BadLineReport | None" = None  # every bad line, when there are many
    report_path: Path | None = None  # where the report was kept (more than SHOW_BAD bad lines)


class BadLineReport:
    """Every bad line of a conversion (``file:line: reason``), streamed to a locked temporary
    file beside the output; kept as ``<output>.bad.txt`` when there are more than the messages
    show, discarded otherwise."""

    def __init__(self, output: Path):
        self.path = output.with_name(output.name + REPORT_SUFFIX)
        fd, self.tmp = temp_path_for(self.path)
        self.file = os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")

    def add(self, line: str) -> None:
        self.file.write(line + "\n")

    def keep(self) -> Path:
        self.file.flush()
        os.fsync(self.file.fileno())
        finish_temp(self.tmp, self.path)
        self.file.close()
        return self.path

    def discard(self) -> None:
        self.file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)


#: Compressed inputs, recognised by their magic bytes, decompressed on the fly by pyarrow.
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"BZh", "bz2"),
          (b"\x04\x22\x4d\x18", "lz4"))


def compression_of(path: Path) -> str | None:
    """``gzip``, ``zstd``, ``bz2``, ``lz4`` (frame) or None, from the file's first bytes."""
    with open(path, "rb") as f:
        head = f.read(4)
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    return None


def skip_bom(read: Callable[[int], bytes]) -> Callable[[int], bytes]:
    """`read` whose first call leaves out a leading UTF-8 byte order mark (an editor's, not
    part of line 1)."""
    first = True

    def read_text(n: int) -> bytes:
        nonlocal first
        data = read(n)
        if first:
            first = False
            data = data.removeprefix(UTF8_BOM)
        return data

    return read_text


@contextmanager
def open_input(path: Path):
    """(read(n) -> bytes, raw_position() -> int) for a plain or compressed text file, without
    a leading UTF-8 byte order mark. Decompression errors become DatasetError naming the file."""
    try:
        comp = compression_of(path)
        raw = open(path, "rb")
    except OSError as e:
        raise DatasetError(f"{path}: cannot read: {e.strerror}") from None
    try:
        if comp is None:
            yield skip_bom(raw.read), raw.tell
            return
        stream = pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), comp)

        def read(n: int) -> bytes:
            try:
                return stream.read(n)
            except (pa.ArrowException, OSError, EOFError) as e:
                raise DatasetError(f"{path}: cannot decompress ({comp}): {e}") from e

        yield skip_bom(read), raw.tell
    finally:
        raw.close()


def _sample_lines(path: Path) -> tuple[list[str], bool]:
    """The first non-blank lines of ``path`` (for detection), and whether the file is empty
    (no non-blank line at all). A binary file (Parquet, ...) is a DatasetError saying so."""
    with open_input(path) as (read, _):
        head = read(DETECT_BYTES)
        what = binary_kind(head)
        if what is not None:
            raise DatasetError(not_text_hint(path, what))
        if not head.strip():
            while block := read(BLOCK_BYTES):
                if block.strip():
                    break
            else:
                return [], True
    lines = [ln for ln in head.decode("utf-8", "replace").split("\n")[:-1] if ln.strip()]
    if not lines:  # one very long first line
        lines = [head.decode("utf-8", "replace")]
    return lines[:DETECT_LINES], False


def resolve_format(path: Path, fmt: str) -> str:
    """The format of ``path``: ``fmt`` itself, or detected when ``fmt == "auto"``."""
    lines, empty = _sample_lines(path)
    if empty:
        raise DatasetError(f"{path}: empty file (no positions)")
    if fmt != "auto":
        return fmt
    name, _counts = detect_format(lines)
    if name is None:
        first = lines[0].strip()
        if len(first) > 100:
            first = first[:100] + "..."
        known = "; ".join(f"{k} ({v})" for k, v in DESCRIPTIONS.items())
        raise DatasetError(f"{path}: cannot detect the format (first line: {first!r}); "
                           f"known formats: {known}; force one with --format")
    return name


def line_blocks(read, tell, block_bytes: int):
    """Yield (input bytes consumed, block of whole lines)."""
    carry = b""
    pos = tell()
    while True:
        chunk = read(block_bytes)
        now = tell()
        consumed, pos = now - pos, now
        if not chunk:
            if carry or consumed:
                yield consumed, carry
            return
        data = carry + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            yield consumed, b""
            continue
        carry = data[cut + 1:]
        yield consumed, data[:cut + 1]


def convert_files(inputs: list[str | os.PathLike], output: str | os.PathLike,
                  fmt: str = "auto", policy: str = "skip", *,
                  progress: Callable[[int], None] | None = None,
                  log: Callable[[str], None] | None = None,
                  row_group_rows: int = ROW_GROUP_ROWS,
                  block_bytes: int = BLOCK_BYTES) -> ConvertSummary:
    """Convert text files of labelled positions into one Parquet file ``output``.

    ``fmt`` is ``auto`` (detected per file) or one of ``FORMATS``. Lines that do not parse,
    carry a bad result or an invalid FEN are reported as ``file:line: reason``; with
    ``policy="skip"`` they are left out (reported in ``summary.messages``, also passed to
    ``log``), with ``policy="strict"``
    any bad line raises DatasetError and nothing is written. The output is written to a
    temporary file next to it and renamed only on success; on any error or interrupt the
    temporary file is removed and an existing ``output`` is left untouched.
    ``progress(nbytes)`` is called as input bytes are consumed.
    """
    t0 = time.perf_counter()
    if policy not in ("skip", "strict"):
        raise ValueError(f"policy must be 'skip' or 'strict', got {policy!r}")
    if fmt != "auto" and fmt not in FORMATS:
        raise ValueError(f"format must be 'auto' or one of {FORMATS}, got {fmt!r}")
    if not inputs:
        raise DatasetError("no input files")
    out = Path(output)
    paths = []
    for inp in inputs:
        p = Path(inp)
        if not p.exists():
            raise DatasetError(f"{inp}: no such file")
        if not p.is_file():
            raise DatasetError(f"{inp}: not a regular file")
        if out.exists() and p.resolve() == out.resolve():
            raise DatasetError(f"{inp}: the output would overwrite this input")
        paths.append(p)
    out_dir = out.parent if str(out.parent) else Path(".")
    if not out_dir.is_dir():
        raise DatasetError(f"{output}: output directory {out_dir} does not exist")
    if out.is_dir():
        raise DatasetError(f"{output}: is a directory")

    formats = [resolve_format(p, fmt) for p in paths]
    with_score = "pipe" in formats
    schema = output_schema(with_score)
    summary = ConvertSummary(out, 0, 0, [], [FileSummary(str(p), f) for p, f in
                                             zip(paths, formats)])

    remove_stale_temps(out_dir, out.name)  # left by killed conversions
    remove_stale_temps(out_dir, out.name + REPORT_SUFFIX)
    try:
        fd, tmp_name = temp_path_for(out)  # locked while written
        summary.report = BadLineReport(out)
    except OSError as e:
        raise DatasetError(f"{output}: cannot write: {e.strerror}") from None
    tmp = Path(tmp_name)
    writer = None
    try:
        writer = pq.ParquetWriter(tmp_name, schema, compression="zstd",
                                  use_dictionary=["result"], write_page_checksum=True)
        pending: list[pa.Table] = []
        pending_rows = 0

        def flush(final: bool) -> None:
            nonlocal pending, pending_rows
            while pending_rows >= row_group_rows or (final and pending_rows):
                table = pa.concat_tables(pending).combine_chunks()
                n = min(row_group_rows, table.num_rows)
                writer.write_table(table.slice(0, n), row_group_size=n)
                rest = table.slice(n)
                pending = [rest] if rest.num_rows else []
                pending_rows = rest.num_rows

        for p, f_fmt, fsum in zip(paths, formats, summary.files):
            line_base = 0
            with open_input(p) as (read, tell):
                for nbytes, raw in line_blocks(read, tell, block_bytes):
                    summary.bytes_in += nbytes
                    if raw:
                        table, n_lines = _convert_block(raw, f_fmt, schema, line_base, fsum,
                                                        summary)
                        line_base += n_lines
                        if table is not None and table.num_rows:
                            pending.append(table)
                            pending_rows += table.num_rows
                            flush(False)
                    if progress is not None and nbytes:
                        progress(nbytes)
        flush(True)
        summary.rows = sum(fs.rows for fs in summary.files)
        summary.n_bad = sum(fs.n_bad for fs in summary.files)
        if summary.n_bad and policy == "strict":
            raise DatasetError(f"{summary.n_bad:,} bad line(s) (policy strict; no Parquet "
                               f"written):\n" + _bad_lines(summary))
        if summary.rows == 0:
            what = f" ({summary.n_bad:,} bad line(s))" if summary.n_bad else ""
            raise DatasetError(f"no valid positions in the input{what}; no Parquet written"
                               + ("\n" + _bad_lines(summary) if summary.n_bad else ""))
        writer.close()
        writer = None
        os.fsync(fd)
        finish_temp(tmp_name, out)
        _settle_report(summary)
    except OSError as e:  # disk full, read-only, ...: the input errors are DatasetErrors
        _abandon(writer, tmp, summary)
        raise DatasetError(f"{output}: cannot write: {e.strerror or e}") from None
    except BaseException:
        _abandon(writer, tmp, summary)
        raise
    finally:
        os.close(fd)
    summary.seconds = time.perf_counter() - t0
    if with_score and any(f != "pipe" for f in formats):
        summary.messages.append(
            "note: score_cp is null for the rows of files without scores (formats other than "
            "pipe); load_dataset keeps all rows but no scores unless need_scores=True")
    if summary.n_bad:
        summary.messages.append(f"skipped {summary.n_bad:,} bad line(s):\n" + _bad_lines(summary))
    if log is not None:
        for msg in summary.messages:
            log(msg)
    return summary


def _settle_report(summary: ConvertSummary) -> None:
    """Keep the report of every bad line if the messages cannot show them all, else drop it
    (and any older report of this output, which would now be stale)."""
    report, summary.report = summary.report, None
    if summary.n_bad > SHOW_BAD:
        summary.report_path = report.keep()
    else:
        report.discard()
        with contextlib.suppress(FileNotFoundError):
            report.path.unlink()


def _bad_lines(summary: ConvertSummary) -> str:
    """The first bad lines, and where all of them are when they are too many to show."""
    text = format_bad_list(summary.bad, summary.n_bad)
    if summary.n_bad <= SHOW_BAD:
        return text
    if summary.report_path is None:  # failed conversions keep the report too
        _settle_report(summary)
    return text + f"\n  every bad line: {summary.report_path}"


def _abandon(writer, tmp: Path, summary: ConvertSummary) -> None:
    """Remove the partial output (and the report, unless it was kept)."""
    if writer is not None:
        with contextlib.suppress(Exception):
            writer.close()
    tmp.unlink(missing_ok=True)
    if summary.report is not None:
        summary.report.discard()
        summary.report = None


def _convert_block(raw: bytes, fmt: str, schema: pa.Schema, line_base: int,
                   fsum: FileSummary, summary: ConvertSummary) -> tuple[pa.Table | None, int]:
    """Parse one block of whole lines; returns (table of valid rows, number of lines)."""
    if fmt in SCAN_MODES:
        n_lines, offsets, data, results, scores, row_line, bad = scan_block(raw, fmt)
        n = len(results)
        fen_arr = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
        res_arr = pa.array(results, type=pa.float64())
        if fmt != "pipe":
            scores = None
    else:
        lines = raw.decode("utf-8", "replace").split("\n")
        if raw.endswith(b"\n"):
            lines.pop()
        n_lines = len(lines)
        parsed = PARSERS[fmt](lines)
        bad = parsed.bad
        n = len(parsed.fens)
        row_line = parsed.index
        fen_arr = pa.array(parsed.fens, type=pa.string())
        res_arr = pa.array(parsed.results, type=pa.float64())
        scores = parsed.scores
    table = None
    if n:
        _, status = parse_fen_array(fen_arr)
        ok = status == 0
        cols = [fen_arr, res_arr]
        if "score_cp" in schema.names:
            cols.append(pa.array(scores, type=pa.int32()) if scores is not None
                        else pa.nulls(n, pa.int32()))
        table = pa.Table.from_arrays(cols, schema=schema)
        if not ok.all():
            bad = list(bad)
            for j in np.flatnonzero(~ok):
                bad.append((int(row_line[j]), status_text(status[j])))
            table = table.filter(pa.array(ok))
        fsum.rows += table.num_rows
    if bad:
        bad.sort()
        fsum.n_bad += len(bad)
        room = MAX_BAD_KEPT - len(summary.bad)
        for k, (i, reason) in enumerate(bad):
            line = f"{fsum.path}:{line_base + i + 1}: {clip(reason)}"
            summary.report.add(line)
            if k < room:
                summary.bad.append(line)
    return table, n_lines
