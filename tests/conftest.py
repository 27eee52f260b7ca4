import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args, env=None, cwd=None):
    """Run `vtrain ARGS` in a fresh interpreter; returns the CompletedProcess."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "vtrain.cli", *map(str, args)], capture_output=True,
                          text=True, env=full_env, cwd=cwd or REPO, timeout=300)


@pytest.fixture
def cli():
    return run_cli
