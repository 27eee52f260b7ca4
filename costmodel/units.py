"""Units used across vtrain, defined once: binary memory sizes, decimal rates, seconds per hour/day."""
from __future__ import annotations

GiB = 1024**3  # bytes (memory capacities and sizes are binary)
GB = 1e9  # bytes (bandwidths are decimal: GB/s)
TB = 1e12  # FLOP/s prefix (TFLOP/s)
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0
