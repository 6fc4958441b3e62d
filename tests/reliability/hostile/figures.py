"""Figures of the hostile-server and address-policy runs, printed at the end of the session.

Tests record what they tried and what came out; ``pytest_terminal_summary`` in the conftests
prints the lines (the numbers quoted in docs/fetch.md, "Hostile servers and address policy").
"""

from __future__ import annotations

from collections import Counter

#: hostile input name -> recorded outcome
HOSTILE: dict[str, str] = {}
#: peak traced Python memory (bytes) of each hostile run, by run name
MEMORY_PEAK: dict[str, int] = {}
#: URLs refused by the address policy, by reason class (loopback, private, ...)
REFUSED: Counter[str] = Counter()


def hostile_lines() -> list[str]:
    if not HOSTILE:
        return []
    outcomes = Counter(HOSTILE.values())
    lines = [
        f"hostile inputs tried: {len(HOSTILE)}; outcomes: "
        + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())),
    ]
    lines += [f"  {name}: {outcome}" for name, outcome in sorted(HOSTILE.items())]
    if MEMORY_PEAK:
        worst = max(MEMORY_PEAK, key=MEMORY_PEAK.__getitem__)
        lines.append(
            f"memory peak (tracemalloc): {MEMORY_PEAK[worst] / 2**20:.1f} MiB ({worst}); "
            + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sorted(MEMORY_PEAK.items()))
        )
    return lines


def refused_lines() -> list[str]:
    if not REFUSED:
        return []
    total = sum(REFUSED.values())
    return [
        f"requests refused by the address policy: {total} ("
        + ", ".join(f"{k} {v}" for k, v in sorted(REFUSED.items()))
        + ")"
    ]
