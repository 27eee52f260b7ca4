import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parent.parent

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
