"""Whether a host's HTTP validators (ETag, Last-Modified) can be trusted, as pure policy.

A conditional request saves a download only if the server is honest: a 304 must never hide
a real change, and a changed ETag must mean a changed record. Some servers send validators
and ignore them, some change them on every response, and some keep them while the content
changes. The fetch engine therefore checks: for a few pages per host (the first
``min_probes`` and then a random ``probe_rate`` share) it sends no conditional headers and
compares what the server says (same or different validator) with what the record says
(same or different record hash). Every other 200 answer to a page whose previous validators
are known is evidence too. One hidden change is enough to stop trusting a host; wasteful
validators (volatile, ignored) are dropped after ``min_evidence`` cases that make up most of
the evidence. A host that is not trusted gets no conditional headers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from enum import Enum

import numpy as np
import numpy.typing as npt


class ValidatorEvidence(Enum):
    CONSISTENT = "consistent"  # validator and record agree (both same or both changed)
    HIDDEN_CHANGE = "hidden_change"  # same validator, changed record: a 304 would have lied
    VOLATILE = "volatile"  # validator changed, record did not
    IGNORED = "ignored"  # conditional request answered 200 though the validator matched
    UNKNOWN = "unknown"  # nothing to compare (no previous validator or record hash)


@dataclass(frozen=True)
class ValidatorPolicy:
    min_probes: int = 2
    probe_rate: float = 0.05
    min_evidence: int = 3

    def __post_init__(self) -> None:
        if self.min_probes < 0 or self.min_evidence < 1 or not 0 <= self.probe_rate <= 1:
            raise ValueError(
                "validator policy needs min_probes >= 0, min_evidence >= 1, 0 <= probe_rate <= 1"
            )


@dataclass(frozen=True)
class ValidatorTrust:
    """Evidence gathered about one host's validators; distrust, once earned, is kept.

    Distrust latches: after it, no conditional requests are sent, so every later answer
    looks "consistent" and would otherwise talk the host back into trust.
    """

    probes: int = 0
    consistent: int = 0
    hidden_changes: int = 0
    volatile: int = 0
    ignored: int = 0
    not_modified: int = 0
    distrusted: str | None = None  # why the host's validators are no longer used

    def record(
        self, evidence: ValidatorEvidence, policy: ValidatorPolicy, *, probe: bool = False
    ) -> ValidatorTrust:
        counts = {
            ValidatorEvidence.CONSISTENT: "consistent",
            ValidatorEvidence.HIDDEN_CHANGE: "hidden_changes",
            ValidatorEvidence.VOLATILE: "volatile",
            ValidatorEvidence.IGNORED: "ignored",
        }
        updated = replace(self, probes=self.probes + int(probe))
        name = counts.get(evidence)
        if name is not None:
            updated = replace(updated, **{name: getattr(self, name) + 1})
        if updated.distrusted is None:
            reason = updated.doubt(policy)
            if reason is not None:
                updated = replace(updated, distrusted=reason)
        return updated

    def record_not_modified(self) -> ValidatorTrust:
        return replace(self, not_modified=self.not_modified + 1)

    @property
    def evidence(self) -> int:
        return self.consistent + self.hidden_changes + self.volatile + self.ignored

    @property
    def trusted(self) -> bool:
        return self.distrusted is None

    def doubt(self, policy: ValidatorPolicy) -> str | None:
        """Why the evidence so far says the validators should not be used, or None."""
        if self.hidden_changes:
            return f"{self.hidden_changes} change(s) behind an unchanged validator"
        if self.volatile >= policy.min_evidence and 2 * self.volatile > self.evidence:
            return f"validator changed without a record change {self.volatile} time(s)"
        if self.ignored >= policy.min_evidence and 2 * self.ignored > self.evidence:
            return f"conditional requests ignored {self.ignored} time(s)"
        return None

    def wants_probe(self, policy: ValidatorPolicy, rng: random.Random) -> bool:
        """Whether the next page with known validators should be fetched unconditionally."""
        return self.probes < policy.min_probes or rng.random() < policy.probe_rate


def strip_weak(etag: str | None) -> str | None:
    """ETag without the weak prefix (weak comparison, RFC 9110 section 8.8.3.2)."""
    if etag is None:
        return None
    etag = etag.strip()
    return etag[2:] if etag.startswith(("W/", "w/")) else etag


def judge_validators(
    *,
    sent_conditional: bool,
    old_etag: str | None,
    old_last_modified: str | None,
    old_record_hash: str | None,
    new_etag: str | None,
    new_last_modified: str | None,
    new_record_hash: str | None,
) -> ValidatorEvidence:
    """What a 200 answer says about the host's validators, given the page's previous ones.

    The ETag decides when both answers carry one (it takes precedence over Last-Modified in
    conditional requests); otherwise Last-Modified does.
    """
    if old_etag is not None and new_etag is not None:
        claims_same = strip_weak(old_etag) == strip_weak(new_etag)
    elif old_last_modified is not None and new_last_modified is not None:
        claims_same = old_last_modified.strip() == new_last_modified.strip()
    else:
        return ValidatorEvidence.UNKNOWN
    if old_record_hash is None or new_record_hash is None:
        return (
            ValidatorEvidence.IGNORED
            if sent_conditional and claims_same
            else (ValidatorEvidence.UNKNOWN)
        )
    changed = old_record_hash != new_record_hash
    if changed and claims_same:
        return ValidatorEvidence.HIDDEN_CHANGE
    if not changed and not claims_same:
        return ValidatorEvidence.VOLATILE
    if not changed and sent_conditional:
        return ValidatorEvidence.IGNORED
    return ValidatorEvidence.CONSISTENT


def conditional_headers(
    etag: str | None,
    last_modified: str | None,
    record_hash: str | None,
    trust: ValidatorTrust,
    policy: ValidatorPolicy,
    rng: random.Random,
    *,
    enabled: bool = True,
) -> tuple[dict[str, str], bool]:
    """Conditional headers for one page, and whether it is a probe (sent without them).

    None for a host not trusted, or without previous validators; a probe needs the previous
    record hash to compare the answer with.
    """
    if not enabled or (etag is None and last_modified is None) or not trust.trusted:
        return {}, False
    if record_hash is not None and trust.wants_probe(policy, rng):
        return {}, True
    headers = {}
    if etag is not None:
        headers["If-None-Match"] = etag
    if last_modified is not None:
        headers["If-Modified-Since"] = last_modified
    return headers, False


# ------------------------------------------------------------ Last-Modified as a change time

#: A Last-Modified this close to the fetch (or after it) is a "now" stamp: dynamic pages
#: stamp every response with the time it was generated, which says nothing about changes.
NOW_STAMP_DAYS = 2.0 / 86_400
#: A host whose Last-Modified is a "now" stamp on more than this share of answers is not
#: trusted (an honest page changing 48 times a day is stamped within 2 s 0.1% of the time).
NOW_STAMP_SHARE = 0.05

#: How far back a first observation's Last-Modified is believed: an older last change says
#: "no change in this many days" only. A page's behaviour may change (a section relaunched
#: after years of silence), and years of quiet would outvote the changes seen since.
FIRST_AGE_HORIZON_DAYS = 60.0

#: Codes of :func:`judge_last_modified` (per observation): no usable header, dated but
#: nothing to compare with, then as :class:`ValidatorEvidence`, and a "now" stamp.
LM_ABSENT, LM_DATED, LM_CONSISTENT, LM_HIDDEN_CHANGE, LM_VOLATILE, LM_NOW = range(6)
LM_CODES = 6


def judge_last_modified(
    fetched_at: npt.NDArray[np.float64],
    last_modified: npt.NDArray[np.float64],
    previous_fetched_at: npt.NDArray[np.float64],
    previous_last_modified: npt.NDArray[np.float64],
    changed: npt.NDArray[np.int8],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.int8]]:
    """Per observation: what its Last-Modified tells of the page, and of the host.

    All times are in days on one clock, NaN where absent (no header, an unparseable one, or no
    previous observation); ``changed`` is 1 / 0 when the record changed / did not since the
    previous observation, -1 for a first observation and anything else when unknown.

    Returns ``(days, dated, evidence)``. For a changed observation whose Last-Modified falls
    after the previous visit (and is not a "now" stamp), ``days`` is the age of the last
    change (``fetched_at - last_modified``) and ``dated`` is True: the likelihood term is
    ``log r - r days``. A first observation is the same when its age is at most
    ``FIRST_AGE_HORIZON_DAYS``; an older one gives ``days`` = the horizon and ``dated``
    False (``- r days``: no change in the horizon). Elsewhere ``days`` is NaN.

    The evidence code mirrors :func:`judge_validators` for Last-Modified alone
    (``LM_HIDDEN_CHANGE``: the record changed but Last-Modified did not move past the
    previous visit; ``LM_VOLATILE``: it moved though the record did not), plus ``LM_NOW``
    for a stamp at or after the fetch time (a future date included).
    """
    lm, prev_lm, prev_at = last_modified, previous_last_modified, previous_fetched_at
    has_lm = np.isfinite(lm)
    now = has_lm & (lm > fetched_at - NOW_STAMP_DAYS)
    dated = has_lm & ~now
    known = dated & (changed >= 0) & np.isfinite(prev_at)
    hit = changed == 1
    with np.errstate(invalid="ignore"):
        moved = np.where(np.isfinite(prev_lm), np.abs(lm - prev_lm) > 0.5 / 86_400, lm > prev_at)
        after_previous = lm > prev_at
    hidden = known & hit & ~(moved & after_previous)
    volatile = known & ~hit & moved
    evidence = np.where(has_lm, LM_DATED, LM_ABSENT).astype(np.int8)
    evidence[known] = LM_CONSISTENT
    evidence[hidden] = LM_HIDDEN_CHANGE
    evidence[volatile] = LM_VOLATILE
    evidence[now] = LM_NOW
    first = dated & (changed == -1)
    age = fetched_at - lm
    recent = first & (age <= FIRST_AGE_HORIZON_DAYS)
    changed_since = dated & hit & after_previous & ~hidden & known
    days = np.where(changed_since | recent, age, np.nan)
    days[first & ~recent] = FIRST_AGE_HORIZON_DAYS
    return days, changed_since | recent, evidence


def last_modified_trusted(
    evidence_counts: npt.NDArray[np.int64], policy: ValidatorPolicy | None = None
) -> npt.NDArray[np.bool_]:
    """Per host, whether its Last-Modified dates its changes (the same rules as validators).

    ``evidence_counts`` has one row per host and ``LM_CODES`` columns, one per ``LM_*`` code (what
    :func:`judge_last_modified` said of its observations). A host is trusted unless
    :meth:`ValidatorTrust.doubt` doubts its evidence (one hidden change, or mostly volatile)
    or more than ``NOW_STAMP_SHARE`` of its dated answers were "now" stamps. Distrust is not
    latched here: the counts only grow, and one hidden change is never outvoted.
    """
    policy = policy or ValidatorPolicy()
    counts = np.asarray(evidence_counts, dtype=np.int64)
    dated = counts[:, LM_DATED:].sum(axis=1)
    trusted: npt.NDArray[np.bool_] = counts[:, LM_NOW] <= NOW_STAMP_SHARE * dated
    doubtful = (counts[:, LM_HIDDEN_CHANGE] > 0) | (counts[:, LM_VOLATILE] > 0)
    for host in np.flatnonzero(doubtful & trusted):
        trust = ValidatorTrust(
            consistent=int(counts[host, LM_CONSISTENT]),
            hidden_changes=int(counts[host, LM_HIDDEN_CHANGE]),
            volatile=int(counts[host, LM_VOLATILE]),
        )
        trusted[host] = trust.doubt(policy) is None
    return trusted
