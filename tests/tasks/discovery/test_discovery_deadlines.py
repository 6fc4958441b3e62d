"""Discovery is bounded in total: a deadline per host and per run, an index's children read
concurrently while one host's requests stay paced.

Each "host" is a loopback server on its own port (its own origin, so its own pacing). The
servers log every request: host, path, arrival and end (monotonic clock). A run is made in
a thread joined with a timeout: a hang detector only, the assertions are on the report and
the request log, never on elapsed time.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from flows.cli import main
from tasks.discovery.run import DiscoveryReport, discover_sync
from tests.tasks.discovery.conftest import FAST, START

HANG_GUARD_S = 60.0  # far above every deadline below; only a hung run reaches it
NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


@dataclass
class RequestLog:
    """(host, path, arrived, ended) of every request, all servers together."""

    rows: list[tuple[str, str, float, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of(self, host: str) -> list[tuple[str, float, float]]:
        with self.lock:
            return sorted((p, a, e) for h, p, a, e in self.rows if h == host)


#: How a child sitemap answers: "slow" (waits, then a one-URL urlset) or "drip" (a byte
#: every 0.2 s, never complete; the server gives up after 60 s).
Child = str


@contextmanager
def host(log: RequestLog, children: int, child: Child, wait_s: float = 0.6) -> Iterator[str]:
    """One loopback host: /robots.txt 404, /index.xml listing /child-<i>.xml; yields base."""
    base = ""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            arrived = time.monotonic()
            try:
                self._answer()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the reader gave up on this one, as a deadline makes it
            finally:
                with log.lock:
                    log.rows.append((base, self.path, arrived, time.monotonic()))

        def _answer(self) -> None:
            if self.path == "/index.xml":
                locs = "".join(
                    f"<sitemap><loc>{base}/child-{i}.xml</loc></sitemap>" for i in range(children)
                )
                self._send(f'<sitemapindex xmlns="{NS}">{locs}</sitemapindex>'.encode())
            elif self.path.startswith("/child-") and child == "slow":
                time.sleep(wait_s)
                page = base + self.path.removesuffix(".xml") + "/page"
                self._send(f'<urlset xmlns="{NS}"><url><loc>{page}</loc></url></urlset>'.encode())
            elif self.path.startswith("/child-"):
                self.send_response(200)
                self.send_header("Content-Type", "application/xml")
                self.end_headers()
                self.wfile.write(f'<?xml version="1.0"?><urlset xmlns="{NS}">'.encode())
                for _ in range(300):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
            else:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

        def _send(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield base
    finally:
        server.shutdown()
        server.server_close()


def run_guarded(call: Callable[[], DiscoveryReport]) -> DiscoveryReport:
    """Run ``call`` in a thread; fail (not hang) if it has not returned by HANG_GUARD_S."""
    box: list[object] = []
    worker = threading.Thread(target=lambda: box.append(_outcome(call)), daemon=True)
    worker.start()
    worker.join(HANG_GUARD_S)
    if worker.is_alive():
        pytest.fail(f"discovery still running after {HANG_GUARD_S:g} s: not bounded")
    (outcome,) = box
    if isinstance(outcome, BaseException):
        raise outcome
    assert isinstance(outcome, DiscoveryReport)
    return outcome


def _outcome(call: Callable[[], DiscoveryReport]) -> object:
    try:
        return call()
    except BaseException as exc:  # handed to the test's thread
        return exc


def test_a_slow_index_ends_at_the_host_deadline_and_names_the_children_left(tmp_path):
    children = 8
    log = RequestLog()
    settings = replace(
        FAST,
        sitemaps=replace(
            FAST.sitemaps,
            timeout_s=30.0,  # per file: 8 drips one after the other would take 240 s
            host_connections=2,
            host_deadline_s=1.5,
            run_deadline_s=45.0,
        ),
    )
    with host(log, children, "drip") as base:
        report = run_guarded(
            lambda: discover_sync(
                tmp_path, sitemaps=[base + "/index.xml"], settings=settings, now=START
            )
        )
    expected = {f"{base}/child-{i}.xml" for i in range(children)}
    assert report.deadline_hit
    assert report.sitemaps_read == 1  # the index; no child could complete
    assert report.rejected.get("host_deadline") == children
    assert "run_deadline" not in report.rejected
    assert set(report.unread) == expected
    lines = "\n".join(report.summary_lines())
    assert f"deadline hit: {children} not read" in lines
    assert all(url in lines for url in expected)
    asked = {path for path, _, _ in log.of(base)}
    assert "/child-0.xml" in asked  # some were in flight when the deadline hit, not only queued


def test_the_run_deadline_bounds_every_host_and_the_cli_reports_it(tmp_path, capsys):
    log = RequestLog()
    with ExitStack() as stack:
        bases = [stack.enter_context(host(log, 3, "drip")) for _ in range(2)]
        argv = ["discover", "--root", str(tmp_path), "--min-delay", "0", "--deadline", "1.5"]
        argv += ["--allow-network", "127.0.0.0/8"]
        for base in bases:
            argv += ["--sitemap", base + "/index.xml"]
        box: list[int] = []
        worker = threading.Thread(target=lambda: box.append(main(argv)), daemon=True)
        worker.start()
        worker.join(HANG_GUARD_S)
        assert not worker.is_alive(), "discover --deadline did not end"
    out = capsys.readouterr().out
    assert box == [0]
    assert "run_deadline" in out and "host_deadline" not in out
    assert "deadline hit: 6 not read" in out
    assert all(f"{b}/child-{i}.xml" in out for b in bases for i in range(3))
    for bad in ("0", "-1", "nan", "inf"):
        assert main(["discover", "--root", str(tmp_path), "--sitemap", "x", "--deadline", bad]) == 2
        err = capsys.readouterr().err
        assert "--deadline" in err and "Traceback" not in err


def test_children_are_read_concurrently_per_host_starts_paced_hosts_in_parallel(tmp_path):
    min_delay = 0.4
    #: A server sees a request start when it arrives; two arrivals can come closer together
    #: than the client's starts only by the difference of their loopback delivery delays
    #: (well under a millisecond, tens under load): half the delay is far beyond that,
    #: while requests started without pacing arrive ~0 s apart.
    slack = min_delay / 2
    children = 4
    log = RequestLog()
    settings = replace(
        FAST, sitemaps=replace(FAST.sitemaps, min_delay_s=min_delay, host_connections=4)
    )
    with ExitStack() as stack:
        bases = [stack.enter_context(host(log, children, "slow", wait_s=1.2)) for _ in range(2)]
        report = run_guarded(
            lambda: discover_sync(
                tmp_path,
                sitemaps=[b + "/index.xml" for b in bases],
                settings=settings,
                now=START,
            )
        )
    assert not report.deadline_hit and report.unread == {}
    assert report.sitemaps_read == 2 * (1 + children)
    assert report.added == 2 * children
    intervals = {}
    for base in bases:
        rows = log.of(base)
        assert {p for p, _, _ in rows} >= {"/robots.txt", "/index.xml"} | {
            f"/child-{i}.xml" for i in range(children)
        }
        arrivals = sorted(a for _, a, _ in rows)
        gaps = [b - a for a, b in itertools.pairwise(arrivals)]
        assert min(gaps) >= min_delay - slack, f"{base}: requests {gaps} apart"
        kids = sorted((a, e) for p, a, e in rows if p.startswith("/child-"))
        # children overlap on one host: the next starts before the previous has answered
        assert any(nxt[0] < prev[1] for prev, nxt in itertools.pairwise(kids))
        intervals[base] = kids
    a, b = intervals.values()
    assert any(x0 < y1 and y0 < x1 for x0, x1 in a for y0, y1 in b), "hosts read one after another"


@pytest.mark.parametrize(
    "bad",
    [
        {"host_deadline_s": 0.0},
        {"run_deadline_s": -1.0},
        {"run_deadline_s": float("nan")},
        {"host_deadline_s": float("inf")},
        {"host_connections": 0},
    ],
)
def test_deadline_settings_are_checked(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        replace(FAST.sitemaps, **bad)


def test_the_summary_names_the_first_unread_and_counts_the_rest():
    unread = {f"http://h.test/s-{i}.xml": "host deadline of 120 s hit" for i in range(25)}
    report = DiscoveryReport(
        found=0, added=0, known=0, signals_updated=0, seen_links=0, duplicates=0,
        sitemaps_read=1, rejected={"host_deadline": 25}, examples={}, catalog_size=0,
        unread=unread,
    )  # fmt: skip
    lines = report.summary_lines()
    shown = [url for url in unread if any(url + " " in line for line in lines)]
    assert shown == list(unread)[: DiscoveryReport.UNREAD_SHOWN]
    assert "  ... and 5 more" in lines and report.deadline_hit
