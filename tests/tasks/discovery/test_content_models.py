"""The pure pieces of a cycle's content step: canonical links, clusters, kept pages."""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_array
from scipy.sparse.csgraph import connected_components

from models.content.simhash import hamming_many, near_duplicate_clusters
from models.discovery.admission import cluster_keepers, honoured_canonicals
from models.discovery.links import page_links


def test_page_links_reads_the_head_canonical_against_the_base_in_one_parse():
    page = (
        b'<html><head><base href="/shop/"><link rel="canonical" href="item?id=1&utm_source=x">'
        b'<meta name="robots" content="nofollow"></head>'
        b'<body><a href="other">o</a><link rel="canonical" href="/spoofed"></body></html>'
    )
    found = page_links("http://Example.com/x/y", page, "text/html")
    assert found.canonical == "http://example.com/shop/item?id=1"  # normalized, base honoured
    assert found.links == []  # nofollow: no links, the canonical is still the page's own
    body_only = b'<html><body><link rel="canonical" href="/spoofed"></body></html>'
    assert page_links("http://example.com/", body_only, "text/html").canonical is None
    assert page_links("http://example.com/", b"{}", "application/json").canonical is None


def test_canonicals_are_honoured_unless_the_target_points_elsewhere():
    declared = {
        "http://s/a": "http://s/b",  # b is canonical: honoured
        "http://s/b": None,
        "http://s/c": "http://s/c",  # itself
        "http://s/e": "http://s/f",  # e and f name each other: both stay
        "http://s/f": "http://s/e",
        "http://s/g": "http://s/old",  # old is known by another URL already
        "http://s/h": "http://s/new",  # not fetched, not demoted: honoured
    }
    out = honoured_canonicals(declared, lambda url: url == "http://s/old")
    assert out == {
        "http://s/a": "http://s/b",
        "http://s/b": None,
        "http://s/c": None,
        "http://s/e": None,
        "http://s/f": None,
        "http://s/g": None,
        "http://s/h": "http://s/new",
    }


def test_clusters_equal_the_brute_force_components():
    rng = np.random.default_rng(3)
    centres = rng.integers(0, 2**64 - 1, size=40, dtype=np.uint64)
    fps = []
    for c in centres:  # each centre with 0-4 copies 0-3 bits away, sometimes chained
        fps.append(c)
        for _ in range(rng.integers(0, 5)):
            flips = rng.choice(64, size=rng.integers(0, 4), replace=False)
            fps.append(c ^ np.uint64(sum(1 << int(b) for b in flips)))
    fps_arr = np.array(fps, dtype=np.uint64).view(np.int64)
    ids = rng.permutation(len(fps_arr)).astype(np.int64) * 7 + 1
    found = near_duplicate_clusters(ids, fps_arr)

    near = hamming_many(fps_arr[:, None], fps_arr[None, :]) <= 3
    _, labels = connected_components(coo_array(near), directed=False)
    sizes = np.bincount(labels)
    expected = {frozenset(ids[labels == c].tolist()) for c in np.flatnonzero(sizes >= 2)}
    got = {frozenset(found.members(c).tolist()) for c in range(found.count)}
    assert got == expected and len(expected) >= 10
    assert (np.diff(found.sizes) <= 0).all()  # largest first


def test_a_crowd_of_identical_pages_is_one_cluster_without_quadratic_pairs():
    ids = np.arange(200_000, dtype=np.int64)
    found = near_duplicate_clusters(ids, np.full(ids.size, 12345, dtype=np.int64))
    assert found.count == 1 and found.sizes.tolist() == [ids.size]


def test_the_kept_page_is_canonical_then_most_valuable_then_smallest_id():
    ids = np.array([10, 11, 12, 20, 21], dtype=np.int64)
    cluster = np.array([0, 0, 0, 1, 1])
    value = np.array([1.0, 5.0, 5.0, 2.0, 9.0])
    demoted = np.array([False, True, False, False, False])
    keepers = cluster_keepers(ids, cluster, value, demoted)
    assert keepers.tolist() == [12, 12, 12, 21, 21]
