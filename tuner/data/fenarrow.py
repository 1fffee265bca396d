"""Bulk FEN parsing straight from Arrow string buffers (no Python loop per row).

The parsing itself is ``tuner.chess.position.parse_fens`` (the project's one FEN parser);
this module only hands it the offsets and bytes of an Arrow string array.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

#: Status given to null FEN entries (tuner.chess uses 0 for valid and positive codes for errors).
STATUS_NULL = -1


def _position_module():
    from tuner.chess import position  # imported late: tuner.chess compiles on first use

    return position


def string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(offsets, data, valid) of a string-like Arrow array, zero-copy where possible.

    ``offsets`` has len(arr) + 1 entries (int32 for ``string``, int64 for ``large_string``)
    and already accounts for the array's slice offset: string i is
    ``data[offsets[i]:offsets[i + 1]]``. ``valid`` is a bool mask, or None without nulls.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if pa.types.is_string_view(t):
        arr = arr.cast(pa.large_string())
        t = arr.type
    if pa.types.is_string(t):
        off_dtype = np.int32
    elif pa.types.is_large_string(t):
        off_dtype = np.int64
    else:
        raise TypeError(f"expected a string array, got {t}")
    n = len(arr)
    if n == 0:
        return np.zeros(1, off_dtype), np.zeros(0, np.uint8), None
    _, obuf, dbuf = arr.buffers()[:3]
    offsets = np.frombuffer(obuf, dtype=off_dtype, count=arr.offset + n + 1)[arr.offset:]
    data = np.frombuffer(dbuf, dtype=np.uint8) if dbuf is not None and dbuf.size else np.zeros(
        max(int(offsets[-1]), 0), np.uint8)
    valid = None
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
    return offsets, data, valid


def parse_fen_array(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Parse every FEN of a string-like Arrow array: (positions[N, 9] uint64, status[N] int32).

    status 0 = valid; ``STATUS_NULL`` for null entries; other codes come from
    ``tuner.chess.position.parse_fens`` (see ``status_text``).
    """
    offsets, data, valid = string_buffers(arr)
    positions, status = _position_module().parse_fens(offsets, data)
    if valid is not None:
        status = np.asarray(status, dtype=np.int32).copy()
        status[~valid] = STATUS_NULL
    return positions, status


_reason_cache: dict[int, str] = {}


def status_text(code: int) -> str:
    """Human-readable reason for a non-zero status from ``parse_fen_array``."""
    code = int(code)
    text = _reason_cache.get(code)
    if text is None:
        if code == STATUS_NULL:
            text = "fen is null"
        else:
            text = f"bad FEN: {_position_module().status_reason(code)}"
        _reason_cache[code] = text
    return text
