"""bench/window_variance.py's analysis, on CPU: the split of a speedup's spread into windows and processes."""

from __future__ import annotations

import pytest

from .helpers import bench_module


def test_window_variance_splits_within_from_between_processes():
    split = bench_module("window_variance").split_variance
    same = split([[1.0, 1.02, 0.98], [1.0, 1.02, 0.98]])
    assert same["between_process_means_sd"] == 0 and same["within_process_sd"] == pytest.approx(0.02)
    shifted = split([[1.05, 1.06, 1.04], [1.02, 1.03, 1.01]])
    assert shifted["within_process_sd"] == pytest.approx(0.01)
    assert shifted["between_process_means_sd"] == pytest.approx(0.03 / 2**0.5)
    assert shifted["between_process_means_sd"] > 3 * shifted["expected_means_sd_from_windows"]
