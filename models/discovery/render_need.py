"""Which hosts need a headless browser: their raw HTML's record is empty or much poorer than
the rendered page's, on a sample of their pages.

A host's pages are judged in pairs: the record extracted from the raw HTML and the record
extracted from the same page after a browser ran its scripts (``models.content.extract``
both times, same rules). A record's *richness* is the number of characters of its non-empty
field values. A host needs rendering when, over its sample, the median ratio raw / rendered
richness is below ``max_ratio`` (default 0.5: the raw page shows less than half of what the
rendered one does) and rendering adds at least ``min_gain`` characters on the median page
(so two near-empty versions never send a host to the browser). A host whose sample is
smaller than ``min_sample`` is left undecided (``None``) and stays plain HTTP.

Pure: numpy over the sample arrays, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


def record_richness(fields: Mapping[str, str]) -> int:
    """Characters of a record's non-empty field values (whitespace-trimmed)."""
    return sum(len(value.strip()) for value in fields.values())


@dataclass(frozen=True, slots=True)
class RenderVerdict:
    """One host's judgement: ``needs_rendering`` None while the sample is too small."""

    host: str
    needs_rendering: bool | None
    sample: int
    median_ratio: float  # raw / rendered richness on the median page (NaN: no sample)
    median_gain: float  # rendered - raw characters on the median page


def judge_render_need(
    hosts: Sequence[str],
    raw_richness: ArrayLike,
    rendered_richness: ArrayLike,
    *,
    max_ratio: float = 0.5,
    min_gain: float = 40.0,
    min_sample: int = 2,
) -> dict[str, RenderVerdict]:
    """A verdict per host from its sampled pages (arrays aligned with ``hosts``)."""
    if not 0.0 < max_ratio < 1.0:
        raise ValueError(f"max_ratio must be within (0, 1), got {max_ratio}")
    raw = np.asarray(raw_richness, dtype=np.float64)
    rendered = np.asarray(rendered_richness, dtype=np.float64)
    names = np.asarray(list(hosts), dtype=object)
    if not raw.shape == rendered.shape == names.shape:
        raise ValueError("hosts, raw and rendered richness must be aligned")
    if (raw < 0).any() or (rendered < 0).any():
        raise ValueError("richness is a count of characters: never negative")
    ratio = np.where(rendered > 0, raw / np.maximum(rendered, 1.0), 1.0)
    gain = rendered - raw
    verdicts = {}
    unique, inverse = np.unique(names.astype(str), return_inverse=True)
    for k, host in enumerate(unique):  # one pass per host, never per page
        mine = inverse == k
        n = int(mine.sum())
        med_ratio = float(np.median(ratio[mine]))
        med_gain = float(np.median(gain[mine]))
        need: bool | None = None
        if n >= min_sample:
            need = bool(med_ratio < max_ratio and med_gain >= min_gain)
        verdicts[str(host)] = RenderVerdict(str(host), need, n, med_ratio, med_gain)
    return verdicts
