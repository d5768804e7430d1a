"""Summaries of timed steps: the median and the 10th-90th percentiles, in milliseconds."""

from __future__ import annotations

import statistics


def step_summary(seconds: list[float], warmup: int) -> dict[str, float | int] | None:
    """Median and p10-p90 (linear interpolation, numpy's default) of the steps after the first
    ``warmup``, in ms; None when no step is left."""
    timed = seconds[warmup:]
    if not timed:
        return None
    deciles = statistics.quantiles(timed, n=10, method="inclusive") if len(timed) > 1 else timed * 9
    return {
        "steps": len(timed),
        "median_ms": 1000 * statistics.median(timed),
        "p10_ms": 1000 * deciles[0],
        "p90_ms": 1000 * deciles[-1],
    }
