"""The report's SVG charts: well-formed XML whatever the labels hold, one mark per value, placed to scale."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from pipeline.stages.validate import plots

NS = "{http://www.w3.org/2000/svg}"


def test_bars_are_to_scale_and_labels_are_escaped():
    labels = ["gemm <a&b> 1", "gemm 2", "gemm 3"]
    svg = ET.fromstring(plots.bars(labels, [1.0, 1.2, 0.9], ["g", "g", "x"], "T & t", "x", (0.8, 1.3), 1.0))
    bars = [r for r in svg.iter(f"{NS}rect") if r.find(f"{NS}title") is not None]
    assert [b.find(f"{NS}title").text.split(":")[0] for b in bars] == labels
    widths = [float(b.get("width")) for b in bars]
    assert widths[1] > widths[0] > widths[2] > 0
    assert (widths[0] - widths[2]) / (widths[1] - widths[0]) == pytest.approx(0.5)
    assert [b.get("fill") for b in bars] == ["g", "g", "x"]
    assert len(list(svg.iter(f"{NS}line"))) == 1, "the reference line at x1.0"
    ys = [float(b.get("y")) for b in bars]
    assert ys == sorted(ys, reverse=True), "the first bar at the bottom"


def test_values_outside_the_axis_are_clipped_to_it():
    svg = ET.fromstring(plots.bars(["a", "b"], [5.0, -1.0], ["g", "g"], "t", "x", (0.0, 2.0)))
    widths = [float(r.get("width")) for r in svg.iter(f"{NS}rect") if r.find(f"{NS}title") is not None]
    assert widths == [plots.PLOT_W, 0.0]


def test_dots_give_each_series_a_dot_per_label_higher_for_higher_values():
    svg = ET.fromstring(plots.dots(["p", "q"], {"baseline": [0.2, 0.5], "bundle": [0.4, 1.0]}, "t", "eff", (0, 1.05)))
    dots = [c for c in svg.iter(f"{NS}circle") if c.find(f"{NS}title") is not None]
    assert len(dots) == 4
    cy = {c.find(f"{NS}title").text.rsplit(":", 1)[0]: float(c.get("cy")) for c in dots}
    assert cy["q, bundle"] < cy["p, bundle"] < cy["p, baseline"], "SVG's y grows downwards"
    assert cy["q, baseline"] < cy["p, baseline"]


def test_ticks_sit_at_round_steps_with_as_many_decimals_as_the_step_needs():
    from pipeline.stages.validate.plots import ticks

    def said(low, high):
        values, form = ticks(low, high)
        return [form.format(v) for v in values]

    assert said(0.93, 1.07) == ["0.94", "0.96", "0.98", "1.00", "1.02", "1.04", "1.06"]  # 1.00 is a tick, not 0.999
    assert said(0.0, 1.05) == ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]  # not 0.21, 0.42
    assert said(0.0, 22.05) == ["0", "5", "10", "15", "20"]  # not 10.1, 20.2


def test_a_long_label_gets_the_room_it_needs_and_the_baseline_is_marked():
    long = "mm 32000x2x2048 bf16 ld 2048/131072/32000"
    svg = plots.bars([long, "gemm 64x1x64 bf16"], [1.1, 0.98], [plots.GREEN, plots.GRAY], "t", "x", (0.9, 1.2), 1.0)
    x0 = int(re.search(r'<rect x="(\d+)" y="30"', svg).group(1))
    assert x0 >= 6.6 * len(long) and f">{long}</text>" in svg
    assert ">x1.00 baseline</text>" in svg
