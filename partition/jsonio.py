"""Canonical JSON and atomic file writes, shared by every file the package emits.

Canonical output (sorted keys, floats rounded to 12 significant digits) makes the same result
byte-for-byte identical across runs; atomic writes (temporary file + ``os.replace``) mean an
interrupted run leaves either the old file or a whole new one. A path ending in ``.gz`` is
gzip-compressed on write and decompressed on read (with a fixed timestamp, so compressed files
are reproducible too): committed instance sets stay small.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import InputError, PartitionError

_SIGNIFICANT_DIGITS = 12


def _canonical(value: Any) -> Any:
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if math.isnan(value):
            return "nan"
        return float(f"{value:.{_SIGNIFICANT_DIGITS}g}")
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def dumps(document: Any) -> str:
    """Serialise ``document`` canonically (sorted keys, stable float formatting)."""
    return json.dumps(_canonical(document), sort_keys=True, indent=1) + "\n"


def write_atomic(path: str | Path, text: str | bytes, *, overwrite: bool = False) -> None:
    """Write ``text`` (or raw bytes) to ``path`` atomically; refuse to replace a file unless asked."""
    target = Path(path)
    if target.exists() and not overwrite:
        raise InputError(f"{target}: file exists (use --force to overwrite)")
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"{target}: directory {directory} does not exist")
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=directory)
    try:
        data = text.encode("utf-8") if isinstance(text, str) else text
        with os.fdopen(handle, "wb") as stream:
            stream.write(gzip.compress(data, mtime=0) if target.suffix == ".gz" else data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def require_file(path: Path, what: str, error: type[PartitionError] = InputError) -> None:
    """Raise ``error`` with one line naming ``path`` unless it can be read as a ``what`` file:
    missing, or a directory. A pipe or device passes (``--cluster <(zcat c.json.gz)`` is read as
    a stream)."""
    if path.is_dir():
        raise error(f"{path}: is a directory, not a {what} file")
    if not path.exists():
        raise error(f"{path}: {what} file not found")


def read_json(path: str | Path, what: str) -> Any:
    """Read a JSON file, turning every failure into one clear :class:`InputError`."""
    source = Path(path)
    require_file(source, what)
    try:
        data = source.read_bytes()
        return json.loads(gzip.decompress(data) if source.suffix == ".gz" else data)
    except OSError as error:
        raise InputError(f"{source}: cannot read the {what} file ({error.strerror or error})") from None
    except (UnicodeDecodeError, json.JSONDecodeError, gzip.BadGzipFile, EOFError) as error:
        raise InputError(f"{source}: not a valid JSON {what} file ({error})") from None
