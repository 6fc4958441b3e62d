"""A progress line on stderr for long CLI work (no dependency: tqdm is not installed)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


class ProgressLine:
    """``label [#####.....] 12/30 (40 s, ~60 s left) note``, redrawn in place on a terminal.

    Off a terminal (logs, CI) a line is printed only every ``every`` steps and at the end.
    """

    def __init__(self, label: str, total: int, *, stream: TextIO | None = None, every: int = 5):
        self.label = label
        self.total = max(int(total), 1)
        self.stream = stream or sys.stderr
        self.every = every
        self.done = 0
        self.started = time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def step(self, note: str = "") -> None:
        self.done += 1
        if not self.tty and self.done % self.every and self.done != self.total:
            return
        elapsed = time.monotonic() - self.started
        left = elapsed / self.done * (self.total - self.done)
        width = 24
        filled = round(width * self.done / self.total)
        bar = "#" * filled + "." * (width - filled)
        text = (
            f"{self.label} [{bar}] {self.done}/{self.total} "
            f"({elapsed:.0f} s, ~{left:.0f} s left) {note}"
        )
        end = "\n" if not self.tty or self.done == self.total else ""
        self.stream.write(("\r" if self.tty else "") + text + end)
        self.stream.flush()


class PhaseTimes:
    """Wall and CPU seconds of a run's named phases, in order, for a closing table.

    CPU is this process's (all its threads); a child process's is added with ``add``.
    """

    def __init__(self) -> None:
        self.phases: dict[str, tuple[float, float]] = {}

    def add(self, name: str, wall_s: float, cpu_s: float = 0.0) -> None:
        wall, cpu = self.phases.get(name, (0.0, 0.0))
        self.phases[name] = (wall + wall_s, cpu + cpu_s)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        wall, cpu = time.monotonic(), time.process_time()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - wall, time.process_time() - cpu)

    def table(self) -> str:
        """``phase  wall s  cpu s  share of wall``, one line per phase and a total."""
        total = sum(wall for wall, _ in self.phases.values()) or 1.0
        width = max([len(name) for name in self.phases] + [5])
        lines = [f"{'phase':<{width}}  {'wall s':>7}  {'cpu s':>7}  {'share':>6}"]
        for name, (wall, cpu) in self.phases.items():
            lines.append(f"{name:<{width}}  {wall:7.1f}  {cpu:7.1f}  {wall / total:6.1%}")
        cpu_total = sum(cpu for _, cpu in self.phases.values())
        lines.append(f"{'total':<{width}}  {total:7.1f}  {cpu_total:7.1f}")
        return "\n".join(lines)
