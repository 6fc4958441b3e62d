"""64-bit simhash fingerprints and a near-duplicate index that is not a full scan.

Simhash (Charikar 2002) gives similar documents fingerprints that differ in few bits: each
feature (here a shingle of ``width`` consecutive lower-case words) is hashed to 64 bits and
votes +weight/-weight on every bit, weighted by how often it occurs; the fingerprint keeps
the sign of each bit's total. Manku, Jain and Das Sarma (WWW 2007) found 64-bit fingerprints
within 3 bits a practical near-duplicate threshold for 8 billion pages.

``SimhashIndex`` answers "which known pages are within k bits" with their permuted-tables
scheme: the 64 bits are cut into ``blocks`` pieces; two fingerprints within k bits agree
exactly on at least ``blocks - k`` pieces (pigeonhole), so one sorted table per choice of
``blocks - k`` pieces, keyed by those pieces' bits, finds every candidate by exact lookup,
and only candidates are compared. Everything is numpy arrays, queries come in batches.

``near_duplicate_clusters`` groups pages into clusters of near-duplicates (connected
components of the "within k bits" relation over distinct fingerprints, so a crowd of
identical pages costs one node, not a quadratic number of pairs).

Fingerprints are stored as signed int64 (the history's ``simhash`` column); bit operations
use the same 64 bits as unsigned.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.sparse import coo_array
from scipy.sparse.csgraph import connected_components

SHINGLE_WIDTH = 3
NEAR_DUPLICATE_BITS = 3  # Manku et al.'s threshold for 64-bit fingerprints

_WORD = re.compile(r"\w+")
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_U64 = np.uint64

Int64Array = npt.NDArray[np.int64]
UInt64Array = npt.NDArray[np.uint64]


def simhash(text: str, *, width: int = SHINGLE_WIDTH) -> int:
    """The signed 64-bit simhash of ``text`` (0 for text without words)."""
    shingles = shingle_hashes(text, width=width)
    if shingles.size == 0:
        return 0
    # Each occurrence votes, so a shingle's weight is its frequency in the text.
    little = shingles.astype("<u8", copy=False)
    # one flat unpack (row i holds bit j of shingle i at column j): faster than by rows
    bits = np.unpackbits(little.view(np.uint8), bitorder="little").reshape(-1, 64)
    ones = bits.sum(axis=0, dtype=np.int64)
    # bit b of the fingerprint is set where most shingles have it: packed little-endian
    packed = np.packbits(2 * ones > shingles.size, bitorder="little")
    return int(packed.view("<i8")[0])


def simhashes(texts: Iterable[str], *, width: int = SHINGLE_WIDTH) -> Int64Array:
    """Simhash of every text, as an int64 array."""
    return np.fromiter((simhash(t, width=width) for t in texts), dtype=np.int64)


def shingle_hashes(text: str, *, width: int = SHINGLE_WIDTH) -> UInt64Array:
    """64-bit hashes of the ``width``-word shingles of ``text`` (one shingle if shorter)."""
    if width < 1:
        raise ValueError(f"shingle width must be >= 1, got {width}")
    words = _WORD.findall(text.lower())
    if not words:
        return np.empty(0, dtype=np.uint64)
    # the cache holds a site's vocabulary: one C-level lookup per word
    hashes = np.fromiter(map(_word_hash, words), dtype=np.uint64, count=len(words))
    n = max(len(words) - width + 1, 1)
    span = min(width, len(words))
    with np.errstate(over="ignore"):
        acc = (hashes[:n] ^ _GOLDEN) * _MIX1  # a new array: ``hashes`` is read below
        for j in range(1, span):
            acc ^= _rotl(hashes[j : j + n], 17 * j)
            acc *= _MIX1
    return _mix(acc)


@functools.lru_cache(maxsize=1 << 18)
def _word_hash(word: str) -> int:
    """64 bits of BLAKE2b of a word (cached: a site's vocabulary repeats page after page)."""
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")


def _rotl(x: UInt64Array, r: int) -> UInt64Array:
    r %= 64
    if r == 0:
        return x
    return (x << _U64(r)) | (x >> _U64(64 - r))


def _mix(x: UInt64Array) -> UInt64Array:
    """splitmix64's finalizer: every input bit flips about half the output bits (in place)."""
    with np.errstate(over="ignore"):
        x ^= x >> _U64(30)
        x *= _MIX1
        x ^= x >> _U64(27)
        x *= _MIX2
        x ^= x >> _U64(31)
        return x


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit fingerprints (signed or unsigned ints)."""
    return ((a ^ b) & 0xFFFF_FFFF_FFFF_FFFF).bit_count()


def hamming_many(a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.uint8]:
    """Element-wise ``hamming`` over int64/uint64 arrays (broadcasting)."""
    counts: npt.NDArray[np.uint8] = np.bitwise_count(_as_u64(a) ^ _as_u64(b))
    return counts


def _as_u64(values: npt.ArrayLike) -> UInt64Array:
    arr = np.asarray(values)
    if arr.size == 0:
        return np.empty(arr.shape, dtype=np.uint64)
    if arr.dtype == np.uint64:
        return arr
    if arr.dtype == np.int64:
        return arr.view(np.uint64)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64).view(np.uint64)
    if arr.dtype == object:  # Python ints beyond int64 (unsigned fingerprints)
        return np.array([int(v) & 0xFFFF_FFFF_FFFF_FFFF for v in arr.ravel()], np.uint64).reshape(
            arr.shape
        )
    raise TypeError(f"fingerprints must be integers, got dtype {arr.dtype}")


@dataclass(frozen=True)
class NearMatches:
    """Pairs (query, indexed page) within the distance, sorted by query then url id.

    ``query`` indexes the queried fingerprints; ``candidates`` counts the distinct indexed
    fingerprints compared (the work done, against ``len(index)`` for a full scan).
    """

    query: npt.NDArray[np.int64]
    url_id: Int64Array
    simhash: Int64Array
    distance: npt.NDArray[np.uint8]
    candidates: int

    def __len__(self) -> int:
        return int(self.query.size)


@dataclass(frozen=True)
class _Table:
    blocks: tuple[int, ...]  # which blocks form the key, most significant first
    keys: UInt64Array  # sorted keys of the unique fingerprints
    order: npt.NDArray[np.int64]  # unique-fingerprint index of each sorted key


@dataclass(frozen=True)
class SimhashIndex:
    """Near-duplicate lookup over (url_id, simhash) arrays; build with ``SimhashIndex.build``.

    Identical fingerprints are stored once (with all their url ids), so a crowd of empty or
    error pages costs one comparison, not one per page.
    """

    max_distance: int
    bounds: tuple[tuple[int, int], ...]  # (shift, width) of each block
    fingerprints: UInt64Array  # sorted unique fingerprints
    group_starts: npt.NDArray[np.int64]  # url ids of fingerprint u: ids[starts[u]:starts[u+1]]
    ids: Int64Array
    tables: tuple[_Table, ...]

    @classmethod
    def build(
        cls,
        url_ids: npt.ArrayLike,
        simhashes: npt.ArrayLike,
        *,
        max_distance: int = NEAR_DUPLICATE_BITS,
        blocks: int | None = None,
    ) -> SimhashIndex:
        """Index pages for lookups within ``max_distance`` bits (0-8).

        ``blocks`` (more than ``max_distance``) trades memory for candidates: C(blocks, k)
        tables with keys of about 64 (blocks - k) / blocks bits. By default the count that
        minimizes the expected lookups plus candidates per query at this size is used (4
        blocks for k = 3 up to a few million pages, 5 beyond).
        """
        ids = np.asarray(url_ids, dtype=np.int64).ravel()
        fps = _as_u64(simhashes).ravel()
        if ids.size != fps.size:
            raise ValueError(f"{ids.size} url ids but {fps.size} simhashes")
        if not 0 <= max_distance <= 8:
            raise ValueError(f"max_distance must be within [0, 8], got {max_distance}")
        n_blocks = blocks if blocks is not None else _default_blocks(fps.size, max_distance)
        if not max_distance < n_blocks <= 64:
            raise ValueError(f"blocks must be within ({max_distance}, 64], got {n_blocks}")
        order = np.argsort(fps, kind="stable")
        sorted_fps = fps[order]
        first = np.ones(sorted_fps.size, dtype=bool)
        first[1:] = sorted_fps[1:] != sorted_fps[:-1]
        unique = sorted_fps[first]
        starts = np.append(np.flatnonzero(first), sorted_fps.size).astype(np.int64)
        bounds = _block_bounds(n_blocks)
        tables = []
        for chosen in itertools.combinations(range(n_blocks), n_blocks - max_distance):
            keys = _keys(unique, bounds, chosen)
            key_order = np.argsort(keys, kind="stable")
            tables.append(_Table(chosen, keys[key_order], key_order.astype(np.int64)))
        return cls(max_distance, bounds, unique, starts, ids[order], tuple(tables))

    def __len__(self) -> int:
        return int(self.ids.size)

    def query(
        self,
        simhashes: npt.ArrayLike,
        *,
        max_distance: int | None = None,
        query_ids: npt.ArrayLike | None = None,
        chunk: int = 1 << 16,
    ) -> NearMatches:
        """Every indexed page within ``max_distance`` bits of each queried fingerprint.

        ``query_ids`` (one url id per query) drops each query's own page from its matches.
        """
        k = self.max_distance if max_distance is None else max_distance
        if not 0 <= k <= self.max_distance:
            raise ValueError(f"max_distance must be within [0, {self.max_distance}], got {k}")
        q = _as_u64(simhashes).ravel()
        own = None if query_ids is None else np.asarray(query_ids, dtype=np.int64).ravel()
        if own is not None and own.size != q.size:
            raise ValueError(f"{own.size} query ids for {q.size} fingerprints")
        parts = []
        examined = 0
        for lo in range(0, q.size, chunk):
            pairs, seen = self._unique_pairs(q[lo : lo + chunk], k)
            examined += seen
            parts.append(self._expand(pairs, lo, own))
        if not parts:
            empty = np.empty(0, dtype=np.int64)
            return NearMatches(empty, empty, empty, np.empty(0, np.uint8), 0)
        cols = [np.concatenate([p[i] for p in parts]) for i in range(4)]
        return NearMatches(cols[0], cols[1], cols[2], cols[3].astype(np.uint8), examined)

    def count_near(
        self, simhashes: npt.ArrayLike, *, max_distance: int | None = None
    ) -> npt.NDArray[np.int64]:
        """How many indexed pages lie within ``max_distance`` bits of each fingerprint."""
        k = self.max_distance if max_distance is None else max_distance
        q = _as_u64(simhashes).ravel()
        sizes = np.diff(self.group_starts)
        out = np.zeros(q.size, dtype=np.int64)
        for lo in range(0, q.size, 1 << 16):
            (qi, u, _d), _ = self._unique_pairs(q[lo : lo + (1 << 16)], k)
            out[lo : lo + (1 << 16)] = np.bincount(
                qi, weights=sizes[u], minlength=min(1 << 16, q.size - lo)
            ).astype(np.int64)
        return out

    def _unique_pairs(
        self, q: UInt64Array, k: int
    ) -> tuple[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.uint8]], int]:
        """(query index, unique fingerprint index, distance) within k, and candidates seen."""
        found_q, found_u = [], []
        examined = 0
        for table in self.tables:
            qk = _keys(q, self.bounds, table.blocks)
            lo = np.searchsorted(table.keys, qk, side="left")
            hi = np.searchsorted(table.keys, qk, side="right")
            counts = hi - lo
            total = int(counts.sum())
            examined += total
            if total == 0:
                continue
            qi = np.repeat(np.arange(q.size, dtype=np.int64), counts)
            offsets = np.arange(total, dtype=np.int64) - np.repeat(
                np.cumsum(counts) - counts, counts
            )
            u = table.order[np.repeat(lo, counts) + offsets]
            close = np.bitwise_count(self.fingerprints[u] ^ q[qi]) <= k
            found_q.append(qi[close])
            found_u.append(u[close])
        if not found_q:
            empty = np.empty(0, dtype=np.int64)
            return (empty, empty, np.empty(0, dtype=np.uint8)), examined
        pair = np.unique(np.concatenate(found_q) * self.fingerprints.size + np.concatenate(found_u))
        qi, u = np.divmod(pair, self.fingerprints.size)
        return (qi, u, np.bitwise_count(self.fingerprints[u] ^ q[qi])), examined

    def _expand(
        self,
        pairs: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.uint8]],
        offset: int,
        own: Int64Array | None,
    ) -> Sequence[npt.NDArray[np.int64]]:
        qi, u, d = pairs
        sizes = self.group_starts[u + 1] - self.group_starts[u]
        total = int(sizes.sum())
        rows = np.repeat(np.arange(qi.size), sizes)
        positions = self.group_starts[u][rows] + (
            np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        )
        query = qi[rows] + offset
        url_ids = self.ids[positions]
        fps = self.fingerprints[u][rows].view(np.int64)
        dist = d[rows].astype(np.int64)
        if own is not None:
            keep = url_ids != own[query]
            query, url_ids, fps, dist = query[keep], url_ids[keep], fps[keep], dist[keep]
        order = np.lexsort((url_ids, query))
        return query[order], url_ids[order], fps[order], dist[order]


@dataclass(frozen=True)
class NearDuplicateClusters:
    """Pages grouped into near-duplicate clusters (only clusters of two pages or more).

    ``url_id[i]`` belongs to cluster ``cluster[i]``; clusters are numbered largest first
    (ties: by smallest url id), pages sorted by cluster then url id; ``sizes[c]`` is the
    number of pages of cluster ``c``. Single linkage: A~B and B~C put A, B and C in one
    cluster even if A and C are further apart than the threshold.
    """

    url_id: Int64Array
    cluster: Int64Array
    sizes: Int64Array

    @property
    def count(self) -> int:
        return int(self.sizes.size)

    def members(self, cluster: int) -> Int64Array:
        """The url ids of one cluster (sorted)."""
        lo, hi = np.searchsorted(self.cluster, [cluster, cluster + 1])
        out: Int64Array = self.url_id[lo:hi]
        return out


def near_duplicate_clusters(
    url_ids: npt.ArrayLike,
    simhashes: npt.ArrayLike,
    *,
    max_distance: int = NEAR_DUPLICATE_BITS,
) -> NearDuplicateClusters:
    """Clusters of pages whose fingerprints are within ``max_distance`` bits, transitively.

    The distinct fingerprints are looked up in a ``SimhashIndex`` of themselves (never a
    full scan) and the pairs found joined into connected components (scipy); each page
    then takes its fingerprint's component. Callers leave out fingerprints that say
    nothing (``simhash("")`` is 0 for a page without words).
    """
    ids = np.asarray(url_ids, dtype=np.int64).ravel()
    empty = np.empty(0, dtype=np.int64)
    if ids.size < 2:
        return NearDuplicateClusters(empty, empty, empty)
    index = SimhashIndex.build(ids, simhashes, max_distance=max_distance)
    n_unique = int(index.fingerprints.size)
    rows, cols = [], []
    for lo in range(0, n_unique, 1 << 16):
        (qi, u, _d), _ = index._unique_pairs(index.fingerprints[lo : lo + (1 << 16)], max_distance)
        rows.append(qi + lo)
        cols.append(u)
    graph = coo_array(
        (
            np.ones(sum(r.size for r in rows), dtype=np.int8),
            (np.concatenate(rows), np.concatenate(cols)),
        ),
        shape=(n_unique, n_unique),
    )
    _, component = connected_components(graph, directed=False)
    per_unique = np.diff(index.group_starts)
    page_component = np.repeat(component, per_unique)  # aligned with index.ids
    sizes = np.bincount(page_component)
    in_cluster = sizes[page_component] >= 2
    page_ids = index.ids[in_cluster]
    comps = page_component[in_cluster]
    if page_ids.size == 0:
        return NearDuplicateClusters(empty, empty, empty)
    by_component = np.argsort(comps, kind="stable")
    kept, starts = np.unique(comps[by_component], return_index=True)
    smallest = np.minimum.reduceat(page_ids[by_component], starts)
    order = np.lexsort((smallest, -sizes[kept]))  # largest first, then smallest url id
    label = np.empty(int(component.max()) + 1, dtype=np.int64)
    label[kept[order]] = np.arange(kept.size, dtype=np.int64)
    cluster = label[comps]
    by = np.lexsort((page_ids, cluster))
    return NearDuplicateClusters(page_ids[by], cluster[by], sizes[kept[order]].astype(np.int64))


def _block_bounds(n_blocks: int) -> tuple[tuple[int, int], ...]:
    """(shift, width) of ``n_blocks`` contiguous blocks covering 64 bits, sizes within 1."""
    widths = [64 // n_blocks + (1 if i < 64 % n_blocks else 0) for i in range(n_blocks)]
    bounds, shift = [], 64
    for w in widths:
        shift -= w
        bounds.append((shift, w))
    return tuple(bounds)


def _keys(
    x: UInt64Array, bounds: tuple[tuple[int, int], ...], chosen: tuple[int, ...]
) -> UInt64Array:
    key = np.zeros(x.size, dtype=np.uint64)
    for b in chosen:
        shift, width = bounds[b]
        key = (key << _U64(width)) | ((x >> _U64(shift)) & _U64((1 << width) - 1))
    return key


def _default_blocks(n: int, k: int) -> int:
    """Block count minimizing tables x (binary search + expected candidates) per query."""
    best, best_cost = k + 1, math.inf
    for blocks in range(k + 1, min(k + 5, 64) + 1):
        tables = math.comb(blocks, k)
        key_bits = 64 // blocks * (blocks - k)
        cost = tables * (math.log2(max(n, 2)) + n / 2.0**key_bits)
        if cost < best_cost:
            best, best_cost = blocks, cost
    return best
