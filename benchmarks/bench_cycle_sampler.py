"""Where a process's CPU goes, by part of the cycle: a CPU-weighted stack sampler.

Every ``interval_s`` a thread reads each thread's on-CPU nanoseconds
(``/proc/self/task/<tid>/schedstat``, Linux) and its Python stack
(``sys._current_frames``), and credits the CPU the thread used since the last sample to
the part of the cycle its stack is in: the innermost frame of this project (or of
Prefect) decides, library frames (httpx, aiohttp, asyncio, ssl, pyarrow...) count for
the project frame that called them. A thread waiting on I/O or a lock uses no CPU and
gets nothing, so idle pools do not dilute the figures. Also samples the resident memory
of the processes it is told about (peak per process).

Used by ``benchmarks/bench_cycle.py --profile``.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections import Counter
from pathlib import Path
from types import FrameType

import psutil

REPO = str(Path(__file__).resolve().parents[1])

#: (path fragment, function or None, part): the first rule matching the innermost
#: project frame decides. Order matters: specific functions before their files.
RULES: tuple[tuple[str, str | None, str], ...] = (
    ("/tasks/cycle/work.py", "run_coroutine", "fetch engine (its event loop)"),
    ("/tasks/cycle/work.py", "split_plan", "planning"),
    ("/tasks/cycle/work.py", "commit_cycle", "commit"),
    ("/tasks/cycle/work.py", "read_part", "commit"),
    ("/tasks/cycle/work.py", "write_failed_part", "commit"),
    ("/tasks/cycle/work.py", "_write_part", "staging parts"),
    ("/tasks/cycle/content.py", "apply_cycle_content", "content after commit"),
    ("/tasks/cycle/content.py", "write_batch_content", "links"),
    ("/tasks/cycle/content.py", "__call__", "links"),
    ("/tasks/cycle/content.py", None, "content after commit"),
    ("/models/discovery/links.py", None, "links"),
    ("/tasks/discovery/", None, "content after commit"),
    ("/models/discovery/", None, "content after commit"),
    ("/models/content/", None, "extraction + hashing"),
    ("/tasks/archive/", None, "WARC"),
    ("/tasks/cycle/offload", None, "offload hand-off"),
    ("/tasks/store/", None, "commit"),
    ("/tasks/reports/", None, "report"),
    ("/flows/recrawl.py", "report_cycle_task", "report"),
    ("/tasks/cycle/planning.py", None, "planning"),
    ("/tasks/cycle/estimation.py", None, "planning"),
    ("/models/planning/", None, "planning"),
    ("/models/estimation/", None, "planning"),
    ("/models/allocation/", None, "planning"),
    ("/flows/plan.py", None, "planning"),
    ("/tasks/cycle/host_limits.py", None, "Prefect client"),
    ("/tasks/cycle/run_claims.py", None, "Prefect client"),
    ("/tasks/fetch/batch_slots.py", None, "Prefect client"),
    ("/tasks/fetch/", None, "fetch engine"),
    ("/models/fetching/", None, "fetch engine"),
    ("/site-packages/prefect/", None, "Prefect client"),
    ("/tasks/cycle/work.py", None, "batch bookkeeping"),
    ("/flows/", None, "flow body"),
    ("/models/", None, "other project code"),
    ("/tasks/", None, "other project code"),
)


def part_of(frame: FrameType | None) -> str:
    """The part of the cycle the innermost deciding frame of this stack belongs to."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(REPO) or "/site-packages/prefect/" in name:
            function = frame.f_code.co_name
            for fragment, func, part in RULES:
                if fragment in name and (func is None or func == function):
                    return part
        frame = frame.f_back
    return "other (libraries outside any project frame)"


def _on_cpu_ns(native_id: int) -> int | None:
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class Sampler:
    """Start, run the work, ``stop``; then ``parts`` (ns by part) and ``peak_rss``."""

    def __init__(self, interval_s: float = 0.005, watch: list[int] | None = None) -> None:
        self.interval_s = interval_s
        self.parts: Counter[str] = Counter()
        self.peak_rss: dict[int, int] = {}
        self.watch = watch if watch is not None else []
        self._stop = threading.Event()
        self._last: dict[int, int] = {}
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = threading.get_native_id()
        ticks = 0
        while not self._stop.wait(self.interval_s):
            frames = sys._current_frames()
            for thread in threading.enumerate():
                native = thread.native_id
                if native is None or native == me or thread.ident is None:
                    continue
                now = _on_cpu_ns(native)
                if now is None:
                    continue
                used = now - self._last.get(native, now)
                self._last[native] = now
                if used > 0:
                    self.parts[part_of(frames.get(thread.ident))] += used
            ticks += 1
            if ticks % 100 == 0:
                self._memory()
        self._memory()

    def _memory(self) -> None:
        for pid in [os.getpid(), *self.watch]:
            try:
                rss = psutil.Process(pid).memory_info().rss
            except psutil.Error:
                continue
            self.peak_rss[pid] = max(self.peak_rss.get(pid, 0), rss)


def table(parts: Counter[str]) -> list[tuple[str, float]]:
    """(part, share of the sampled CPU), largest first."""
    total = sum(parts.values()) or 1
    return [(name, ns / total) for name, ns in parts.most_common()]


# ---------------------------------------------------------------------- py-spy's samples

_PACKAGES = frozenset({"tasks", "models", "flows", "sandbox"})
#: A frame of py-spy's raw (collapsed) output: ``function (file:line)``.
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>.*?)(?::\d+)?\)$")


def part_of_names(frames: list[tuple[str, str]]) -> str:
    """``part_of`` for (file, function) pairs, innermost last (py-spy's order; it writes a
    file relative to the ``sys.path`` entry it is under: ``tasks/fetch/engine.py``,
    ``prefect/client/...``)."""
    for name, function in reversed(frames):
        top = name.split("/", 1)[0]
        if top in _PACKAGES:
            name = f"{REPO}/{name}"
        elif top == "prefect":
            name = f"/site-packages/{name}"
        ours = name.startswith(REPO) and "/site-packages/" not in name
        if ours or "/site-packages/prefect/" in name:
            for fragment, func, part in RULES:
                if fragment in name and (func is None or func == function):
                    return part
    return "other (libraries outside any project frame)"


def collapsed_parts(path: str | Path) -> dict[int, Counter[str]]:
    """Samples by process and part from ``py-spy record --format raw --subprocesses``.

    py-spy reads the stacks from outside (no GIL, so no bias towards code that releases
    it, which a sampler inside the process has: it can only look when the GIL is free) and
    counts only threads on a CPU. Each line is ``frames count``, outermost frame first; with
    ``--subprocesses`` the first frame is ``process <pid>:"<command>"``.
    """
    found: dict[int, Counter[str]] = {}
    for line in Path(path).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        pid = 0
        while frames and frames[0].startswith("process "):  # a child's after its parent's
            pid = int(frames[0].split()[1].split(":")[0])
            frames = frames[1:]
        names = []
        for frame in frames:
            match = _FRAME.match(frame)
            if match is not None:
                names.append((match["file"], match["function"]))
        found.setdefault(pid, Counter())[part_of_names(names)] += int(count)
    return found
