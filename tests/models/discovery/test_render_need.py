"""Which hosts need a browser: judged on a sample of raw vs rendered record richness."""

import math

import pytest

from models.discovery.render_need import judge_render_need, record_richness


def test_richness_counts_the_characters_of_non_empty_fields():
    assert record_richness({"title": " Kettle ", "text": "", "price": "9.50"}) == 10


def test_empty_or_much_poorer_raw_records_need_rendering_and_others_do_not():
    hosts = ["js", "js", "plain", "plain", "thin", "thin", "half", "half", "alone"]
    raw = [0, 12, 900, 1000, 5, 3, 600, 700, 0]
    rendered = [800, 900, 900, 1000, 30, 30, 1000, 1000, 900]
    verdicts = judge_render_need(hosts, raw, rendered)
    assert verdicts["js"].needs_rendering is True
    assert verdicts["plain"].needs_rendering is False  # same record either way
    assert verdicts["thin"].needs_rendering is False  # poorer, but rendering adds < 40 chars
    assert verdicts["half"].needs_rendering is False  # 0.65 of the rendered: above 0.5
    assert verdicts["alone"].needs_rendering is None and verdicts["alone"].sample == 1
    assert math.isclose(verdicts["half"].median_ratio, 0.65, rel_tol=1e-12)


def test_misaligned_or_negative_input_is_refused():
    with pytest.raises(ValueError, match="aligned"):
        judge_render_need(["a"], [1, 2], [1, 2])
    with pytest.raises(ValueError, match="negative"):
        judge_render_need(["a"], [-1], [1])
    with pytest.raises(ValueError, match="max_ratio"):
        judge_render_need(["a"], [1], [1], max_ratio=1.5)
