"""A progress line on stderr for long CLI work (no dependency: tqdm is not installed)."""

from __future__ import annotations

import sys
import time
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
