"""The tuner's Parquet schema for labelled positions.

Required columns:
    fen       string (or large_string / string_view / dictionary of strings)
    result    float64 (float16/float32 accepted), White's point of view: 1.0, 0.5 or 0.0
Optional columns:
    score_cp  int32, White's point of view, centipawns (any integer type whose values fit)
    game      int64 (any integer type)
    ply       int32 (any integer type whose values fit)
Any other column (e.g. ``variant`` in the shipped sets) is ignored.
"""
from __future__ import annotations

import pyarrow as pa

from .errors import DatasetError

REQUIRED = ("fen", "result")
OPTIONAL_INT = {"score_cp": pa.int32(), "game": pa.int64(), "ply": pa.int32()}

#: Schema written by ``tuner convert`` (``score_cp`` only when an input format carries scores).
def output_schema(with_score: bool) -> pa.Schema:
    fields = [pa.field("fen", pa.string(), nullable=False),
              pa.field("result", pa.float64(), nullable=False)]
    if with_score:
        fields.append(pa.field("score_cp", pa.int32()))
    return pa.schema(fields)


#: Row-group size written by the converter (rows).
ROW_GROUP_ROWS = 131_072


def is_string_type(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_string_view(t))


def check_schema(schema: pa.Schema, source: str) -> dict[str, bool]:
    """Validate ``schema`` and return which optional columns are present.

    Raises DatasetError naming ``source`` for a missing or mistyped column.
    """
    names = schema.names
    for col in REQUIRED:
        if col not in names:
            raise DatasetError(
                f"{source}: wrong schema: missing required column '{col}' "
                f"(columns: {', '.join(names) or 'none'}); expected fen: string, result: double")
        if names.count(col) > 1:
            raise DatasetError(f"{source}: wrong schema: column '{col}' appears twice")
    t = schema.field("fen").type
    if not is_string_type(t):
        raise DatasetError(f"{source}: wrong schema: column 'fen' has type {t}, expected string")
    t = schema.field("result").type
    if not pa.types.is_floating(t):
        raise DatasetError(
            f"{source}: wrong schema: column 'result' has type {t}, expected double "
            "(1.0 / 0.5 / 0.0, White's point of view)")
    present = {}
    for col, target in OPTIONAL_INT.items():
        present[col] = col in names
        if present[col]:
            t = schema.field(col).type
            if not pa.types.is_integer(t):
                raise DatasetError(
                    f"{source}: wrong schema: column '{col}' has type {t}, expected an integer "
                    f"type ({target})")
    return present
