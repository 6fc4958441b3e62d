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
