"""Print how many inputs each fuzz property tried (the figure issue 8 asks to record)."""

from __future__ import annotations

from typing import Any

from tests.reliability.fuzz.budget import TRIED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not TRIED:
        return
    terminalreporter.section("fuzz inputs tried")
    for name, count in sorted(TRIED.items()):
        terminalreporter.write_line(f"{name:<48} {count:>9,}")
    terminalreporter.write_line(f"{'total':<48} {sum(TRIED.values()):>9,}")
