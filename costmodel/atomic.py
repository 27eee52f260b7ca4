"""Atomic file writes: write to a temporary file in the target's folder, then os.replace.

A failure (or interrupt) part-way leaves any existing file untouched and no temporary behind.
`atomic_path` is the one implementation; `atomic_write` is its callable form.
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from vtrain.costmodel.errors import ParameterError, UserError, user_file


@contextmanager
def atomic_path(path: str | os.PathLike, what: str = "output", create_folder: bool = True,
                suffix: str | None = None, parameter: bool = False) -> Iterator[str]:
    """Yield a temporary path next to `path` (by default with `path`'s suffix, so writers that
    infer the format from it work; `suffix` overrides it); on a normal exit move it over `path`, on
    an exception (including Ctrl-C and SIGTERM) remove it. An unwritable place is a one-line
    UserError naming `what` and `path` (errors.user_file); errors raised by the caller's own code
    inside the block pass through unchanged. With `create_folder=False` a missing folder is a
    UserError instead of being created. parameter=True: `what` is the caller's parameter name and the
    errors are ParameterErrors (errors.file_error)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not create_folder and not folder.is_dir():
        detail = (f"cannot write '{path}': the folder '{folder}' does not exist; create it first "
                  f"(mkdir -p '{folder}') or choose an existing folder")
        raise ParameterError(what, detail) if parameter else UserError(f"{what}: {detail}")
    with user_file(path, what, "write", parameter):
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.stem}.", suffix=suffix or path.suffix or ".tmp")
        os.close(fd)
    try:
        yield tmp
        with user_file(path, what, "write", parameter):
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual permissions
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call `write(tmp_path)` to produce the content, then move it over `path`. Returns `path`.
    An OSError while writing is a one-line UserError naming `path`; nothing is left."""
    with atomic_path(path) as tmp, user_file(path, "output", "write"):
        write(tmp)
    return Path(path)
