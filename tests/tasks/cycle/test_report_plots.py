"""The cycle's plots: linked beside ``summary.md`` on disk, embedded in the Prefect artifact.

(``tests/ui/`` checks in a real browser that the Prefect UI shows the embedded ones.)
"""

from __future__ import annotations

import base64
import re

import numpy as np
import pandas as pd

import tasks.reports.cycle_report
from tasks.reports.cycle_report import (
    EMBEDDED_PLOTS_MAX_BYTES,
    embed_plots,
    hosts_under_pressure,
    report_dir,
    summary_markdown,
    write_plots,
)
from tests.cycle_numbers import sample_numbers

_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]*)\)")


def _summary(tmp_path):
    cycles = pd.DataFrame(
        {
            "cycle_id": [0, 1, 2, 3],
            "expected_freshness": [0.5, 0.6, 0.7, 0.8],
            "realized_freshness": [0.45, 0.6, 0.72, 0.79],
        }
    )
    rates = np.random.default_rng(0).lognormal(-2.0, 1.5, 500)
    numbers = sample_numbers(3, spent_by_slice={"due": 8.0, "discovery": 2.0})
    plots = write_plots(tmp_path, 3, cycles, numbers, rates)
    markdown = summary_markdown(numbers, hosts_under_pressure([]), plots, "credits")
    return plots, markdown


def test_summary_md_shows_the_plots_beside_it(tmp_path):
    plots, markdown = _summary(tmp_path)
    images = _IMAGE.findall(markdown)
    assert sorted(name for name, _ in images) == sorted(plots) and len(plots) == 3
    folder = report_dir(tmp_path, 3)  # summary.md's folder
    for _, src in images:
        assert "/" not in src and (folder / src).is_file()  # relative, and there
    assert "file:" not in markdown


def test_the_artifact_embeds_each_plot_as_its_own_png_well_under_the_budget(tmp_path):
    plots, markdown = _summary(tmp_path)
    embedded = embed_plots(markdown, plots)
    images = dict(_IMAGE.findall(embedded))
    assert sorted(images) == sorted(plots)
    for name, path in plots.items():
        prefix = "data:image/png;base64,"
        assert images[name].startswith(prefix)
        assert base64.b64decode(images[name][len(prefix) :]) == path.read_bytes()
    # the text around the plots is unchanged
    assert _IMAGE.sub("", embedded) == _IMAGE.sub("", markdown)
    size = len(embedded) - len(markdown)
    print(f"embedded plots: {size:,} bytes of {EMBEDDED_PLOTS_MAX_BYTES:,} allowed")
    assert size <= EMBEDDED_PLOTS_MAX_BYTES / 4  # "well under": room for larger plots


def test_a_plot_past_the_budget_keeps_its_path_instead(tmp_path, monkeypatch):
    plots, markdown = _summary(tmp_path)
    first, *rest = plots
    room = len(base64.b64encode(plots[first].read_bytes())) + 10
    monkeypatch.setattr(tasks.reports.cycle_report, "EMBEDDED_PLOTS_MAX_BYTES", room)
    embedded = embed_plots(markdown, plots)
    images = dict(_IMAGE.findall(embedded))
    assert list(images) == [first] and images[first].startswith("data:image/png;base64,")
    for name in rest:
        assert f"{name}: `{plots[name].resolve()}` (too large to embed)" in embedded
