"""Sitemap lastmod as a noisy change signal, trusted per host as far as it agreed with fetches."""

import numpy as np
import pytest

from models.discovery.lastmod import (
    LastmodEvidence,
    effective_days,
    lastmod_signal,
    learn_trust,
    posterior_change,
)


def test_the_signal_is_lastmod_after_the_last_visit_and_unknown_without_either():
    s = lastmod_signal([5.0, 2.0, np.nan, 3.0], [4.0, 4.0, 1.0, np.nan])
    assert s[:2].tolist() == [1.0, 0.0] and np.isnan(s[2:]).all()


def _evidence(signal, changed, host=None):
    host = np.zeros(len(signal), dtype=np.int64) if host is None else host
    return LastmodEvidence.count(host, signal, changed, hosts=int(np.max(host)) + 1)


def test_a_host_that_always_says_now_or_never_moves_nothing_exactly():
    changed = np.array([True] * 70 + [False] * 30)
    now = learn_trust(_evidence(np.ones(100), changed))
    stale = learn_trust(_evidence(np.zeros(100), changed))
    p = np.array([0.01, 0.3, 0.9])
    for trust, signal in ((now, 1.0), (stale, 0.0)):
        lr = trust.likelihood_ratio(np.zeros(3, dtype=np.int64), np.full(3, signal))
        assert lr.tolist() == [1.0, 1.0, 1.0]
        assert posterior_change(p, lr).tolist() == p.tolist()


def test_an_honest_host_moves_the_probability_both_ways_and_unproven_ones_do_not():
    changed = np.array([True] * 50 + [False] * 50)
    honest = learn_trust(_evidence(changed.astype(float), changed))
    # 50 agreeing examples against 10 pseudo-examples at the host's share (1/2):
    # recall = (50 + 5) / 60, false alarm = 5 / 60 -> LR 11 for a signal, 1/11 without
    lr = honest.likelihood_ratio([0, 0, 0], [1.0, 0.0, np.nan])
    np.testing.assert_allclose(lr, [11.0, 1 / 11, 1.0], rtol=1e-12)
    post = posterior_change([0.2, 0.2, 0.2], lr)
    assert post[0] > 0.7 and post[1] < 0.03 and post[2] == 0.2
    fresh = learn_trust(LastmodEvidence.empty(2))
    assert fresh.likelihood_ratio([0, 1], [1.0, 0.0]).tolist() == [1.0, 1.0]


def test_the_ratio_is_clamped_and_evidence_adds_up():
    e = _evidence(np.ones(510), np.arange(510) < 500) + _evidence(
        np.zeros(1000), np.zeros(1000, dtype=bool)
    )
    assert e.signaled_changed.tolist() == [500] and e.signaled_unchanged.tolist() == [10]
    assert e.quiet_unchanged.tolist() == [1000]  # unclamped LR: about 0.99 / 0.013 = 76
    trust = learn_trust(e, max_ratio=5.0)
    assert trust.likelihood_ratio([0], [1.0]).tolist() == [5.0]
    with pytest.raises(ValueError):
        learn_trust(e, prior_strength=0)


def test_effective_days_give_the_posterior_back_at_the_pages_rate():
    rate, days = np.array([0.5, 2.0, 0.0]), np.array([1.0, 1.0, 3.0])
    p = np.array([0.9, 0.05, 0.5])
    t = effective_days(rate, days, p)
    np.testing.assert_allclose(-np.expm1(-rate[:2] * t[:2]), p[:2], rtol=1e-12)
    assert t[2] == 3.0  # a page of rate 0: its days as they are
