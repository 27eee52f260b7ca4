"""Where the shared upstream measurement files live (never copied into the repo)."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_root() -> Path | None:
    """The shared data folder: $VTRAIN_DATA, else ../shared/data next to the cwd or the repo root.

    Returns None when none of these exists.
    """
    env = os.environ.get("VTRAIN_DATA")
    if env:
        return Path(env)
    for base in (Path.cwd(), REPO_ROOT):
        candidate = (base / ".." / "shared" / "data").resolve()
        if candidate.is_dir():
            return candidate
    return None
