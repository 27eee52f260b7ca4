"""Atomic file writes: write to a temporary file in the target's folder, then os.replace.

A failure (or interrupt) part-way leaves any existing file untouched and no temporary behind.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from vtrain.costmodel.errors import user_file


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call `write(tmp_path)` to produce the content, then move it over `path`. Returns `path`.
    The temporary file keeps `path`'s suffix, so writers that infer the format from it work.
    An unwritable place is a one-line UserError naming `path` (errors.user_file); nothing is left."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    with user_file(path, "output", "write"):
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.stem}.", suffix=path.suffix or ".tmp")
        os.close(fd)
        try:
            write(tmp)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual permissions
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return path
