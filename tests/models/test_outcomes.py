"""The outcome vocabulary (``models.outcomes``): complete, and the only place outcomes are
classified.

Adding an outcome to the vocabulary fails here until its row is added to ``PLACED`` (which
names, for each outcome, every class it is in): the author decides each class on purpose.
The source scan fails when a production module classifies outcomes on its own, by a list of
names in SQL or a set/tuple/list of names in Python, instead of using a class.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from models import outcomes
from models.outcomes import CLASSES, OUTCOME_MEANINGS, OUTCOMES, classes_of

REPO = Path(__file__).resolve().parents[2]

#: Every outcome and the classes it is in (the empty set: in none, deliberately).
PLACED: dict[str, set[str]] = {
    "ok": {"OBSERVED", "BILLED", "WITH_BODY"},
    "not_modified": {"OBSERVED", "BILLED"},
    "throttled": {"UNHEALTHY", "STRAINED", "RETRYABLE"},
    "timeout": {"UNHEALTHY", "STRAINED", "RETRYABLE"},
    "error": {"UNHEALTHY", "STRAINED", "RETRYABLE_IF_TRANSIENT"},
    "gone": set(),
    "redirect": set(),
    "robots_denied": {"NOT_SENT", "OFF_HOST_RECORD"},
    "shed": {"NOT_SENT", "STRAINED"},
    "listing_unchanged": {"OBSERVED", "NOT_SENT"},
    "too_large": set(),
    "bad_content_type": set(),
    "decompression_bomb": set(),
    "redirect_loop": set(),
    "api_exhausted": set(),
    "refused_address": {"NOT_SENT", "HOST_UNREACHABLE"},
    "tls_error": {"UNHEALTHY", "STRAINED", "CONNECTION_FAILED", "HOST_UNREACHABLE"},
    "bad_response": {"UNHEALTHY", "STRAINED", "CONNECTION_FAILED"},
    "truncated": {"UNHEALTHY", "STRAINED", "CONNECTION_FAILED", "RETRYABLE"},
}

#: Modules this change could not edit (other owners), each with what it still spells out;
#: a module leaves the list when it uses the classes (the test fails while it is listed but
#: clean, so the list only shrinks).
PENDING: dict[str, str] = {}


def test_every_outcome_is_placed_in_or_out_of_every_class():
    assert set(PLACED) == set(OUTCOMES), "add the outcome's row to PLACED (and its classes)"
    for outcome in OUTCOMES:
        assert classes_of(outcome) == PLACED[outcome], outcome


def test_every_class_in_the_table_exists():
    named = set().union(*PLACED.values())
    assert named <= set(CLASSES)
    # every class is listed in CLASSES (a class defined but not listed is never checked)
    defined = {
        name
        for name, value in vars(outcomes).items()
        if name.isupper() and isinstance(value, frozenset)
    }
    assert defined == set(CLASSES)
    assert all(CLASSES[name] is getattr(outcomes, name) for name in CLASSES)


def test_every_outcome_has_a_meaning_and_classes_are_subsets():
    assert len(OUTCOMES) == len(set(OUTCOMES))
    assert all(OUTCOME_MEANINGS[o].strip() for o in OUTCOMES)
    for name, members in CLASSES.items():
        assert members, name
        assert members <= set(OUTCOMES), name


def test_classes_of_refuses_an_unknown_outcome():
    with pytest.raises(KeyError):
        classes_of("okay")


def test_the_schema_names_the_same_vocabulary():
    from models.schemas import OUTCOMES as SCHEMA_OUTCOMES

    assert SCHEMA_OUTCOMES is OUTCOMES


# ---------------------------------------------------------------------- source scan

_ALTERNATIVES = "|".join(map(re.escape, OUTCOMES))
_QUOTED = re.compile(f"'({_ALTERNATIVES})'")


def _production_modules() -> list[Path]:
    found = []
    for package in ("models", "tasks", "flows"):  # sandbox is the outside world
        found += sorted((REPO / package).rglob("*.py"))
    return [p for p in found if p != REPO / "models" / "outcomes.py"]


def classifications(source: str) -> list[str]:
    """Where ``source`` spells outcome names out: an outcome quoted inside SQL text (a
    string that mentions ``outcome``), or a set/tuple/list literal of two or more."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "outcome" in node.value.lower() and (hit := _QUOTED.search(node.value)):
                found.append(f"line {node.lineno}: SQL names {hit.group(0)}")
        elif isinstance(node, ast.Set | ast.Tuple | ast.List):
            names = [
                e.value
                for e in node.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in OUTCOMES
            ]
            if len(names) >= 2:
                found.append(f"line {node.lineno}: literal of outcomes {names}")
    return found


def test_the_scan_catches_both_forms():
    # the scan must be able to fail: each form it looks for, and what it leaves alone
    assert classifications("Q = \"SELECT 1 FROM h WHERE outcome IN ('ok', 'gone')\"\n")
    assert classifications("Q = \"WHERE h.outcome = 'shed'\"\n")
    assert classifications('X = frozenset({"timeout", "throttled"})\n')
    assert classifications('ok = attempt.outcome in ("ok", "not_modified")\n')
    assert not classifications('if attempt.outcome == "ok":\n    pass\n')
    assert not classifications('Q = "WHERE outcome IN (SELECT unnest($observed))"\n')
    assert not classifications('R = ("redirect", f"bad URL: {x}")\n')


def test_no_production_module_classifies_outcomes_itself():
    modules = _production_modules()
    assert len(modules) > 50  # the scan sees the production modules
    offenders = {}
    for path in modules:
        found = classifications(path.read_text())
        if found:
            offenders[str(path.relative_to(REPO))] = found
    unexpected = {k: v for k, v in offenders.items() if k not in PENDING}
    assert unexpected == {}, "use a class of models.outcomes (bind it as a SQL parameter)"
    cleaned = sorted(set(PENDING) - set(offenders))
    assert cleaned == [], "these now use the classes: drop them from PENDING"
