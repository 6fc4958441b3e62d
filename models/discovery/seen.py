"""Seen sets of url ids: exact for URLs that must not be missed, a Bloom filter for the rest.

The crawler-design article: check a set of seen URLs before a link goes back to the frontier;
at billions of URLs a Bloom filter sized for 1% false positives (about 9.6 bits and 7 hash
functions per URL) is the usual choice, and a false positive only skips a URL never seen;
keep an exact store for the URLs you cannot afford to miss, such as sitemap entries and the
catalog. Both work on numpy arrays of ``models.discovery.urls.url_id`` values, a batch at a time.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_MAGIC = b"RCBLOOM1"
_HEADER = struct.Struct("<8sQQQd")  # magic, bits, hashes, added, target false-positive rate
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_SEED2 = np.uint64(0x9E3779B97F4A7C15)
_CHUNK = 1 << 20


def _ids(values: npt.ArrayLike) -> Int64Array:
    arr = np.asarray(values)
    if arr.size == 0:
        return np.empty(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"url ids must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False).ravel()


def first_occurrences(ids: Int64Array) -> BoolArray:
    """True at the first occurrence of each id in ``ids`` (in order)."""
    _, first = np.unique(ids, return_index=True)
    mask = np.zeros(ids.size, dtype=bool)
    mask[first] = True
    return mask


@dataclass(frozen=True)
class ExactSeenSet:
    """A sorted array of distinct url ids; membership by binary search, no false answers."""

    ids: Int64Array

    @classmethod
    def of(cls, ids: npt.ArrayLike = ()) -> ExactSeenSet:
        arr = np.unique(_ids(ids))
        arr.flags.writeable = False
        return cls(arr)

    def __len__(self) -> int:
        return int(self.ids.size)

    def contains(self, ids: npt.ArrayLike) -> BoolArray:
        """Membership of each id."""
        q = _ids(ids)
        if self.ids.size == 0:
            return np.zeros(q.size, dtype=bool)
        pos = np.searchsorted(self.ids, q)
        found: BoolArray = self.ids[np.minimum(pos, self.ids.size - 1)] == q
        return found

    def union(self, ids: npt.ArrayLike) -> ExactSeenSet:
        """A new set with ``ids`` added."""
        return ExactSeenSet.of(np.concatenate([self.ids, _ids(ids)]))

    def unseen(self, ids: npt.ArrayLike) -> BoolArray:
        """True where an id is neither in the set nor earlier in ``ids``."""
        q = _ids(ids)
        return ~self.contains(q) & first_occurrences(q)


def bloom_size(expected: int, false_positive_rate: float) -> tuple[int, int]:
    """(bits, hash functions) for ``expected`` items at ``false_positive_rate``:
    m = -n ln p / (ln 2)^2, k = (m / n) ln 2 (9.59 bits and 7 hashes per item at 1%)."""
    if expected < 1:
        raise ValueError(f"expected count must be >= 1, got {expected}")
    if not 0.0 < false_positive_rate < 1.0:
        raise ValueError(f"false-positive rate must be within (0, 1), got {false_positive_rate}")
    bits = math.ceil(-expected * math.log(false_positive_rate) / math.log(2) ** 2)
    hashes = max(1, round(bits / expected * math.log(2)))
    return bits, hashes


class BloomFilter:
    """A Bloom filter over 64-bit ids with double hashing (Kirsch and Mitzenmacher 2006).

    Positions are ``h1 + i * h2 (mod m)`` for i < k, with h1, h2 two independent 64-bit
    mixes (splitmix64) of the id and h2 odd. No false negatives; false positives at about
    the target rate while at most ``expected`` ids were added (``fill_ratio`` shows how full
    it is). Mutable: ``add`` changes it; ``to_bytes``/``from_bytes`` round-trip it exactly.
    """

    def __init__(self, expected: int, false_positive_rate: float = 0.01) -> None:
        self.n_bits, self.n_hashes = bloom_size(expected, false_positive_rate)
        self.expected = int(expected)
        self.false_positive_rate = float(false_positive_rate)
        self.added = 0
        self._bits = np.zeros((self.n_bits + 7) // 8, dtype=np.uint8)

    def __len__(self) -> int:
        """Ids added (counting repeats): what the sizing is measured against."""
        return self.added

    @property
    def size_bytes(self) -> int:
        return int(self._bits.nbytes)

    def fill_ratio(self) -> float:
        """Share of bits set (about 0.5 at the design load)."""
        return float(np.unpackbits(self._bits)[: self.n_bits].mean())

    def add(self, ids: npt.ArrayLike) -> None:
        q = _ids(ids)
        for lo in range(0, q.size, _CHUNK):
            pos = self._positions(q[lo : lo + _CHUNK]).ravel()
            np.bitwise_or.at(self._bits, pos >> np.uint64(3), _bit_masks(pos))
        self.added += int(q.size)

    def contains(self, ids: npt.ArrayLike) -> BoolArray:
        """True where an id may have been added (false positives at the target rate)."""
        q = _ids(ids)
        out = np.empty(q.size, dtype=bool)
        for lo in range(0, q.size, _CHUNK):
            pos = self._positions(q[lo : lo + _CHUNK])
            hit = (self._bits[pos >> np.uint64(3)] & _bit_masks(pos)) != 0
            out[lo : lo + _CHUNK] = hit.all(axis=1)
        return out

    def add_unseen(self, ids: npt.ArrayLike) -> BoolArray:
        """Add ids; True where one was (probably) not seen before, nor earlier in ``ids``."""
        q = _ids(ids)
        new = ~self.contains(q) & first_occurrences(q)
        self.add(q[new])
        return new

    def _positions(self, q: Int64Array) -> npt.NDArray[np.uint64]:
        x = q.view(np.uint64)
        h1 = _mix(x)
        h2 = _mix(x ^ _SEED2) | np.uint64(1)
        steps = np.arange(self.n_hashes, dtype=np.uint64)
        with np.errstate(over="ignore"):
            combined = h1[:, None] + steps[None, :] * h2[:, None]
        return combined % np.uint64(self.n_bits)

    def to_bytes(self) -> bytes:
        header = _HEADER.pack(
            _MAGIC, self.n_bits, self.n_hashes, self.added, self.false_positive_rate
        )
        return header + struct.pack("<Q", self.expected) + self._bits.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> BloomFilter:
        """The filter ``to_bytes`` wrote; ValueError if ``data`` is not one."""
        head = _HEADER.size + 8
        if len(data) < head or data[:8] != _MAGIC:
            raise ValueError("not a serialized Bloom filter (bad header)")
        _, n_bits, n_hashes, added, rate = _HEADER.unpack_from(data)
        (expected,) = struct.unpack_from("<Q", data, _HEADER.size)
        bloom = cls(expected, rate)
        if (bloom.n_bits, bloom.n_hashes) != (n_bits, n_hashes):
            raise ValueError("serialized Bloom filter has inconsistent sizes")
        payload = np.frombuffer(data, dtype=np.uint8, offset=head)
        if payload.size != bloom._bits.size:
            raise ValueError(
                f"serialized Bloom filter is truncated: {payload.size} of {bloom._bits.size} bytes"
            )
        bloom._bits = payload.copy()
        bloom.added = int(added)
        return bloom


def _bit_masks(pos: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint8]:
    return np.left_shift(np.uint8(1), (pos & np.uint64(7)).astype(np.uint8))


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * _MIX1
        x = (x ^ (x >> np.uint64(27))) * _MIX2
        return x ^ (x >> np.uint64(31))
