"""Error statistics in percent of the measured value."""
from __future__ import annotations

import numpy as np


def error_stats(pred, measured) -> dict:
    """MAPE, median and 90th-percentile absolute percentage error (percent), and the row count."""
    ape = np.abs(np.asarray(pred) / np.asarray(measured) - 1.0) * 100.0
    return dict(rows=int(len(ape)), mape=float(np.mean(ape)), median=float(np.median(ape)),
                p90=float(np.percentile(ape, 90)))
