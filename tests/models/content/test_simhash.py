"""Simhash distances on near-duplicate articles, and the permuted-tables index vs brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.content.simhash import (
    SimhashIndex,
    hamming,
    hamming_many,
    shingle_hashes,
    simhash,
    simhashes,
)

pytestmark = pytest.mark.numerics_free

# Two unrelated articles, built from hand-written sentences (about 600 and 500 words).
HARBOUR = [
    "The city council voted on Tuesday to approve a new plan for the old harbour district.",
    "Under the plan, three warehouses on the eastern pier will be converted into housing.",
    "About four hundred apartments are expected, a quarter of them let at reduced rents.",
    "Residents had complained for years that the waterfront was closed to the public.",
    "A new promenade will run along the water from the ferry terminal to the fish market.",
    "The fish market itself will stay, but its car park moves underground.",
    "Councillors from the opposition said the rents were still too high for young families.",
    "The mayor replied that the city had negotiated the best terms it could get.",
    "Construction is due to start next spring and to last roughly four years.",
    "Traffic on the harbour road will be limited to one lane during the works.",
    "Shop owners on the road fear that fewer customers will come while it is narrowed.",
    "The council promised a fund to compensate businesses that lose trade.",
    "Environmental groups welcomed the decision to keep the old cranes as monuments.",
    "They also asked for the seawall to be raised, as storms have grown stronger.",
    "Engineers say the new buildings will stand on piles driven deep into the clay.",
    "The harbour authority will keep control of the western pier and its cargo cranes.",
    "Ferries to the islands will continue to run from the same terminal as today.",
    "A design competition for the promenade will open to architects in the autumn.",
    "The winning design must include trees, benches and a playground near the water.",
    "Public consultations will be held in the library on the first Monday of each month.",
    "Several residents asked whether the fishing boats would still have room to moor.",
    "The council said the inner basin would remain reserved for the fishing fleet.",
    "The total cost is estimated at two hundred million euros, shared with a developer.",
    "The developer will also pay for a new school and a health centre in the district.",
    "Critics pointed out that similar promises in other cities were never kept.",
    "The mayor said the contracts include penalties if the school is not delivered.",
    "A first group of apartments could be ready for tenants within three years.",
    "Applications for the reduced-rent flats will be handled by the city housing office.",
    "Priority will go to people who already live or work in the harbour district.",
    "The plan now goes to the regional government, which has three months to respond.",
    "If approved there, the first piles could be driven before the end of next year.",
    "Local historians have asked that the old customs house be kept and opened to visitors.",
    "The council agreed to study a museum of the port in the customs house.",
    "Night buses will be added once the first residents move into the new buildings.",
    "The harbour festival will move to the promenade once it is finished.",
    "Until then, it will be held in the square in front of the town hall.",
    "The vote passed with twenty-one members in favour and twelve against.",
    "Two members abstained, saying they had not had time to read the final documents.",
    "The full plan can be read on the city's website and at the library.",
    "Comments can be sent to the planning office until the end of next month.",
    "A second vote will be needed to approve the final budget for the works.",
    "That vote is expected before the summer break of the council.",
    "The chamber of commerce said it supported the plan but wanted a faster timetable.",
    "Residents' associations will meet next week to prepare their formal response.",
    "The council will publish a summary of all comments received in the autumn.",
]
GARDEN = [
    "Tomatoes need at least six hours of direct sun every day to ripen well.",
    "Plant them out only after the last frost, when the soil has warmed up.",
    "A deep hole lets you bury part of the stem, which will grow extra roots.",
    "Water at the base of the plant in the morning, never on the leaves at night.",
    "Wet leaves in the evening invite blight, the most common disease of tomatoes.",
    "Mulch with straw to keep the soil moist and the lower leaves clean.",
    "Tall varieties need a stake or a cage before they start to flop over.",
    "Pinch out the side shoots that grow between the main stem and the leaves.",
    "Bush varieties can be left alone and will sprawl without much harm.",
    "Feed every two weeks with a fertiliser rich in potassium once flowers appear.",
    "Too much nitrogen gives lush leaves and very few fruits.",
    "Yellow lower leaves are normal late in the season and can be removed.",
    "Split fruits usually mean uneven watering after a dry spell.",
    "Black patches at the bottom of the fruit point to a lack of calcium uptake.",
    "Pick the fruits when they are fully coloured and give slightly when pressed.",
    "Green tomatoes left at the end of the season ripen indoors in a paper bag.",
    "Save seeds only from open-pollinated varieties if you want the same plant again.",
    "Rotate the bed every year so that soil diseases do not build up.",
    "Basil and marigolds planted nearby are said to keep some pests away.",
    "Aphids can be washed off with a strong jet of water from the hose.",
    "Whiteflies in greenhouses are controlled well with yellow sticky traps.",
    "Caterpillars that eat the leaves are best picked off by hand in the evening.",
    "Cherry tomatoes are the easiest choice for a first year in the garden.",
    "They crop heavily and forgive mistakes with watering and feeding.",
    "Beefsteak types need a long warm summer and careful support.",
    "In pots, choose a container of at least twenty litres for each plant.",
    "Pots dry out fast, so check them every day during hot weather.",
    "A saucer under the pot keeps a small reserve of water for the roots.",
    "Grafted plants cost more but resist soil diseases and yield more fruit.",
    "Keep notes of varieties and dates to plan a better season next year.",
    "Seedlings started indoors need bright light or they grow long and weak.",
    "Harden them off for a week by putting them outside for a few hours a day.",
    "Cold nights below ten degrees stop the flowers from setting fruit.",
    "A fleece cover helps young plants through a late cold spell.",
    "Late in summer, cut the top of each plant so that it ripens the fruits it has.",
    "Remove all plant debris at the end of the season to limit disease next year.",
    "Compost the healthy leaves but throw away any that show signs of blight.",
    "Good varieties for cool climates ripen in about sixty days from planting out.",
]


def _article(sentences: list[str], date: str) -> str:
    return f"Published {date}. " + " ".join(sentences)


def test_near_duplicate_articles_are_within_three_bits_and_others_far() -> None:
    original = simhash(_article(HARBOUR, "12 March 2026"))
    redated = simhash(_article(HARBOUR, "13 March 2026"))
    reworded = HARBOUR.copy()
    reworded[17] = "A design competition for the promenade will open to architects in winter."
    edited = simhash(_article(reworded, "12 March 2026"))
    footer = simhash(_article(HARBOUR, "12 March 2026") + " Print this page. Share.")
    different = simhash(_article(GARDEN, "12 March 2026"))
    # Manku et al.'s threshold: a changed date, a changed word, a print footer are near-dups.
    assert hamming(original, redated) <= 3
    assert hamming(original, edited) <= 3
    assert hamming(original, footer) <= 3
    # A different article on the same site is far away (about half the bits).
    assert hamming(original, different) >= 20
    # A page that shares only its first half is not a near-duplicate either.
    half = simhash(_article(HARBOUR[:22] + GARDEN[:20], "12 March 2026"))
    assert hamming(original, half) > 3


def test_simhash_values_are_pinned() -> None:
    # Stored in the history: a change of shingling or hashing must be deliberate.
    assert simhash("The quick brown fox jumps over the lazy dog") == -3043470340970776447
    assert simhash("Hello, World!") == 4366138634255243953
    assert simhash("") == 0 and simhash(" ,.;") == 0


def test_simhash_ignores_case_punctuation_and_spacing() -> None:
    a = simhash("Hello, brave new World!")
    assert simhash("hello   brave\nnew world") == a
    assert simhash("world new brave hello") != a  # word order matters (shingles)


def test_frequency_weights_count() -> None:
    base = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    assert simhash(base + " alpha beta gamma" * 50) != simhash(base + " alpha beta gamma")


def test_shingles() -> None:
    assert shingle_hashes("a b c d").size == 2  # two 3-word shingles
    assert shingle_hashes("a b").size == 1  # shorter text: one shingle of all words
    assert shingle_hashes("a b c d", width=1).size == 4
    with pytest.raises(ValueError, match="width"):
        shingle_hashes("a", width=0)


def test_hamming() -> None:
    assert hamming(0, -1) == 64
    assert hamming(0b1011, 0b0001) == 2
    assert hamming(-1, (1 << 64) - 1) == 0  # signed and unsigned spellings of all ones
    arr = np.array([0, -1, 5], dtype=np.int64)
    assert hamming_many(arr, 0).tolist() == [0, 64, 2]
    assert simhashes(["a b c", "a b c"]).tolist() == [simhash("a b c")] * 2


# --- the index --------------------------------------------------------------------------------


def _planted(n: int, queries: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n random fingerprints, and queries that are copies of some with 0-5 bits flipped."""
    rng = np.random.default_rng(seed)
    fps = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, n, dtype=np.int64)
    ids = rng.permutation(n).astype(np.int64) * 7 + 3
    picked = rng.integers(0, n, queries)
    q = fps[picked].view(np.uint64).copy()
    for row, flips in enumerate(rng.integers(0, 6, queries)):
        for bit in rng.choice(64, size=flips, replace=False):
            q[row] ^= np.uint64(1) << np.uint64(bit)
    # Some exact duplicates inside the index too (mirrors): same fingerprint, other ids.
    fps[: n // 50] = fps[n // 50 : 2 * (n // 50)]
    return ids, fps, q.view(np.int64)


def _brute(ids: np.ndarray, fps: np.ndarray, q: np.ndarray, k: int) -> set[tuple[int, int, int]]:
    dist = hamming_many(q[:, None], fps[None, :])
    rows, cols = np.nonzero(dist <= k)
    return {(int(r), int(ids[c]), int(dist[r, c])) for r, c in zip(rows, cols, strict=True)}


def _found(matches) -> set[tuple[int, int, int]]:  # type: ignore[no-untyped-def]
    return {
        (int(a), int(b), int(d))
        for a, b, d in zip(matches.query, matches.url_id, matches.distance, strict=True)
    }


@pytest.mark.parametrize(("k", "blocks"), [(3, None), (3, 4), (3, 6), (2, 3), (1, None), (0, 1)])
def test_index_equals_brute_force_on_planted_near_duplicates(k: int, blocks: int | None) -> None:
    ids, fps, q = _planted(20_000, 400, seed=k * 10 + (blocks or 0))
    index = SimhashIndex.build(ids, fps, max_distance=k, blocks=blocks)
    matches = index.query(q)
    expected = _brute(ids, fps, q, k)
    assert _found(matches) == expected
    # The planted copies within k bits (about (k + 1) / 6 of the queries) were there to be found.
    assert len(expected) >= 400 * (k + 1) // 12
    assert np.array_equal(index.count_near(q), np.bincount(matches.query, minlength=q.size))
    # Lower thresholds on the same index agree with brute force too.
    if k:
        assert _found(index.query(q, max_distance=k - 1)) == _brute(ids, fps, q, k - 1)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=60),
    flips=st.lists(st.integers(0, 63), max_size=4),
    k=st.integers(0, 4),
)
def test_index_equals_brute_force_property(values: list[int], flips: list[int], k: int) -> None:
    fps = np.array(values, dtype=np.int64)
    ids = np.arange(fps.size, dtype=np.int64)
    query = fps[0].view(np.uint64)
    for bit in flips:
        query ^= np.uint64(1) << np.uint64(bit)
    q = np.array([query, fps[-1].view(np.uint64)], dtype=np.uint64).view(np.int64)
    index = SimhashIndex.build(ids, fps, max_distance=k)
    assert _found(index.query(q)) == _brute(ids, fps, q, k)


def test_index_examines_a_small_share_of_pages() -> None:
    ids, fps, q = _planted(300_000, 2_000, seed=5)
    index = SimhashIndex.build(ids, fps)  # k = 3, 4 tables of 16-bit keys
    matches = index.query(q)
    full_scan = len(index) * q.size
    # Expected: 4 tables x 300,000 / 65,536 = about 18 candidates per query, not 300,000.
    assert matches.candidates < 100 * q.size
    assert matches.candidates < full_scan / 1000
    assert len(matches) >= 1_000


def test_query_ids_drop_the_page_itself_and_results_are_sorted() -> None:
    fps = np.array([5, 5, 7, -1], dtype=np.int64)
    ids = np.array([10, 11, 12, 13], dtype=np.int64)
    index = SimhashIndex.build(ids, fps)
    got = index.query(fps[:2], query_ids=ids[:2])
    assert list(zip(got.query.tolist(), got.url_id.tolist(), strict=True)) == [
        (0, 11),
        (0, 12),
        (1, 10),
        (1, 12),
    ]
    assert got.distance.tolist() == [0, 1, 0, 1]
    assert got.simhash.tolist() == [5, 7, 5, 7]


def test_index_validation() -> None:
    with pytest.raises(ValueError, match="url ids"):
        SimhashIndex.build([1, 2], [3])
    with pytest.raises(ValueError, match="max_distance"):
        SimhashIndex.build([1], [3], max_distance=9)
    with pytest.raises(ValueError, match="blocks"):
        SimhashIndex.build([1], [3], max_distance=3, blocks=3)
    index = SimhashIndex.build([1], [3], max_distance=2)
    with pytest.raises(ValueError, match="max_distance"):
        index.query([3], max_distance=3)
    with pytest.raises(ValueError, match="query ids"):
        index.query([3, 4], query_ids=[1])
    empty = SimhashIndex.build(np.empty(0, np.int64), np.empty(0, np.int64))
    assert len(empty.query([1, 2])) == 0 and len(index.query([])) == 0
