"""The recrawl summary artifact shows its plots in the Prefect UI, seen in a real browser.

One recrawl cycle on the sandbox web runs against a real ``prefect server start``; its
``recrawl-summary`` artifact is then opened in headless Chromium in both of Prefect's UIs
(the React one at ``/v2``, Prefect's default, and the Vue one), a screenshot of each goes to
the test's log, and every plot of the cycle must be an ``img`` that the browser decoded
(``naturalWidth > 0``). A ``file://`` link, or a link relative to ``summary.md``, fails.
"""

from __future__ import annotations

import contextlib
import re

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.client.schemas.sorting import ArtifactSort
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.evaluation.sandbox_runs import recrawl_with_truth
from tasks.reports.cycle_report import report_dir
from tests.flows.conftest import BOOTSTRAP, FAST_FETCH, START, import_catalog

pytestmark = pytest.mark.slow  # a real Prefect server's first start, then a browser

#: How long the UI may take to render the artifact (its JS bundle, then two API reads), and
#: then to decode the images: generous, for a loaded 2-core machine. Not a timing assert:
#: the test only fails if the plots never show.
RENDER_TIMEOUT_MS = 90_000
DECODE_TIMEOUT_MS = 20_000

_IMAGES_JS = """() => Array.from(document.images).map(i => ({
    alt: i.alt, src: i.getAttribute('src') || '', width: i.naturalWidth, complete: i.complete}))"""
#: Every plot is an image (its alt text the plot's name) that the browser decoded.
_DECODED_JS = """names => names.every(n => Array.from(document.images).some(
    i => i.alt === n && i.complete && i.naturalWidth > 0))"""


def _latest_summary(api_url: str):
    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["recrawl-summary"])),
            sort=ArtifactSort.CREATED_DESC,
            limit=1,
        )
    assert found, "the cycle created no recrawl-summary artifact"
    return found[0]


def test_the_summary_artifact_shows_the_cycle_plots_in_the_prefect_ui(
    browser, prefect_ui_server, screenshot_dir, sandbox_web, tmp_path
):
    root = str(tmp_path / "store")
    urls = import_catalog(root, sandbox_web)
    with temporary_settings({PREFECT_API_URL: prefect_ui_server.api_url}):
        result = recrawl_with_truth(
            {"hosts": 6, "pages_per_host": 10, "seed": 5},
            root=root,
            at=START,
            budget=len(urls),
            fetch=FAST_FETCH,
            slices=BOOTSTRAP,
        )
    assert result["status"] == "committed"
    folder = report_dir(root, 0)
    pngs = sorted(p.name for p in folder.glob("*.png"))
    assert len(pngs) >= 3, pngs  # freshness, budget by slice, rate distribution
    # each plot's name, as summary.md links it (an image or a link)
    plots_section = (folder / "summary.md").read_text().split("## Plots", 1)[-1]
    names = re.findall(r"\[([^\]]+)\]\(", plots_section)
    assert len(names) == len(pngs), (names, pngs)

    artifact = _latest_summary(prefect_ui_server.api_url)
    # the harness's version, with the truth, on the recrawl run (not the flow's "n/a" one)
    assert artifact.flow_run_id is not None
    assert "| realized freshness (truth) | 1.000 |" in str(artifact.data)
    print(f"recrawl-summary artifact: {len(str(artifact.data)):,} characters")

    page = browser.new_page()
    failures = []
    for ui, path in [("v2", "/v2/artifacts/artifact/"), ("v1", "/artifacts/artifact/")]:
        page.goto(prefect_ui_server.url + path + str(artifact.id))
        heading = page.get_by_role("heading", name=re.compile(r"Recrawl cycle 0"))
        heading.first.wait_for(timeout=RENDER_TIMEOUT_MS)  # the markdown is rendered
        with contextlib.suppress(PlaywrightTimeout):  # what did render is reported below
            page.wait_for_function(_DECODED_JS, arg=names, timeout=DECODE_TIMEOUT_MS)
        shot = screenshot_dir / f"recrawl-summary-{ui}.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot of the {ui} UI's artifact page: {shot}")
        images = page.evaluate(_IMAGES_JS)
        decoded = {i["alt"] for i in images if i["complete"] and i["width"] > 0}
        missing = [name for name in names if name not in decoded]
        if missing:
            shown = [{**i, "src": i["src"][:40]} for i in images]
            failures.append(f"{ui} UI: plots not shown {missing}; images on the page: {shown}")
    page.close()
    assert not failures, "\n".join(failures)
