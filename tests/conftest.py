import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from vtrain.strategy.evaluation import enable_compilation_cache

REPO = Path(__file__).resolve().parent.parent

# One persistent XLA compilation cache for the test session, shared by this process and the CLI
# subprocesses: many tests fit or search the same small models, and compiling them dominates (a fit
# of the synthetic runs is ~12 s cold, ~2 s from the cache). A fresh directory per session, removed
# at exit, so no run reuses another's executables and nothing is written to ~/.cache; set
# VTRAIN_JAX_CACHE=dir to keep one across local runs. (Set before JAX is imported: JAX reads these
# variables at import; `enable_compilation_cache` does not import JAX.)
if "VTRAIN_JAX_CACHE" not in os.environ:
    os.environ["VTRAIN_JAX_CACHE"] = tempfile.mkdtemp(prefix="vtrain-test-jax-")
    atexit.register(shutil.rmtree, os.environ["VTRAIN_JAX_CACHE"], ignore_errors=True)
enable_compilation_cache()  # the search CLI's own switch (VTRAIN_JAX_CACHE=0: no cache), for this process

# Property tests (tests/test_properties.py, test_memory_order.py): CI runs a fixed seed and each test's
# own small example budget; `HYPOTHESIS_PROFILE=long python -m pytest tests/test_properties.py` runs
# random seeds with 25x the examples (the tests scale their budget by the profile) and keeps failing
# examples in .hypothesis/ to replay them.
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True,
                          suppress_health_check=_SLOW_OK)
settings.register_profile("long", deadline=None, print_blob=True, suppress_health_check=_SLOW_OK)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def run_cli(*args, env=None, cwd=None):
    """Run `vtrain ARGS` in a fresh interpreter; returns the CompletedProcess."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "vtrain.cli", *map(str, args)], capture_output=True,
                          text=True, env=full_env, cwd=cwd or REPO, timeout=300)


@pytest.fixture
def cli():
    return run_cli
