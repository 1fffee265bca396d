"""Datasets named by URI (``scheme://...``: ``s3://bucket/key.parquet``, ``gs://``, ``hdfs://``,
``file:///abs/path.parquet``), opened through pyarrow's filesystems by whichever process reads
them: `tuner train` and, in a cluster run, each worker (`tuner.train.cluster`).

A URI is absolute: it is never taken relative to a configuration's folder, never looked up in a
registry, and a registry's ``file`` cannot be one (`tuner.data.registry`). Its filesystem and
path are what ``pyarrow.fs.FileSystem.from_uri`` makes of it, with the credentials and settings
pyarrow reads from the environment of the process that opens it (S3, in pyarrow's order: the
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN`` variables, then
``~/.aws/credentials`` and ``~/.aws/config``, then on EC2 the instance's metadata service; GCS:
Google's default credentials; HDFS: libhdfs, found through ``HADOOP_HOME`` /
``ARROW_LIBHDFS_DIR``). `locate` turns what can go wrong before the file is read into
a DatasetError naming the URI: a scheme pyarrow does not know or a filesystem it cannot make
(pyarrow built without it, no libhdfs, bad credentials: the first line of pyarrow's message
quoted), an object the filesystem cannot look up, no such object, a directory. Once open, the
file is checked and read as a local one is (`tuner.data.loader.open_parquet`, `DatasetReader`:
Parquet or not, schema, row counts, bad rows).

Nothing about the file behind a URI is remembered between runs: a store cache's key is a digest
of the positions, results and scores as they were read (`tuner.train.stream.DataDigest`), never
of a file's name, size or modification time, so an object replaced under the same URI is read
again and its store recorded again, never served stale.
"""
from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.fs as pafs

from tuner.errors import error_line

from .errors import DatasetError

#: A URI's beginning: a scheme (RFC 3986: a letter, then letters, digits, ``+``, ``-`` or ``.``)
#: and ``://``.
URI_START = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
#: What pyarrow raises about a URI it cannot open (ArrowInvalid is a ValueError, an Arrow I/O
#: error an OSError).
PYARROW_ERRORS = (pa.ArrowException, OSError, ValueError)


def is_uri(value: str) -> bool:
    """Whether a dataset value is a URI (``scheme://...``) rather than a path or a name."""
    return URI_START.match(value) is not None


def locate(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of the file `uri` names (see the module docstring); DatasetError
    naming `uri` when pyarrow cannot make its filesystem or look it up, or it is no file."""
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except PYARROW_ERRORS as e:
        raise DatasetError(f"{uri}: unknown URI scheme, or its filesystem is not available: "
                           f"{error_line(e)}") from None
    try:
        kind = fs.get_file_info(path).type
    except PYARROW_ERRORS as e:
        raise DatasetError(f"{uri}: cannot look it up on its filesystem ({fs.type_name}): "
                           f"{error_line(e)}") from None
    if kind == pafs.FileType.NotFound:
        raise DatasetError(f"{uri}: no such object ({fs.type_name} filesystem)")
    if kind == pafs.FileType.Directory:
        raise DatasetError(f"{uri}: is a directory, not a Parquet file")
    if kind != pafs.FileType.File:
        raise DatasetError(f"{uri}: not a regular file ({fs.type_name} filesystem), not a "
                           "Parquet file")
    return fs, path
