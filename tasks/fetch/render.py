"""Headless rendering for the hosts that need it: a bounded pool of Chromium tabs.

``BrowserPool`` launches one headless Chromium (Debian's ``/usr/bin/chromium``) and drives it
over the DevTools protocol with aiohttp's websocket client (a dependency already; Playwright
would add a package and its own driver process for the dozen protocol calls used here).
Each *slot* is a tab in its own browser context (cookies and cache apart, the cache off);
``render(url)`` takes a free slot, navigates, waits until the load event has fired and the
page's network has been quiet for ``quiet_s`` (the script's own fetches included), and
returns the DOM as HTML with the bytes the page pulled over the wire.

The pool is a backpressured stage: ``slots`` renders run at once and at most ``queue_size``
more wait for a slot; beyond that a caller waits for room (``when_full="wait"``) or gets a
``shed`` result at once (``"shed"``). Nothing grows with the number of callers but their
own coroutines. Memory stays bounded by the slots, not by the pages rendered: every tab
returns to ``about:blank`` after a render and the back-forward cache is off (with it on,
each page left behind kept its renderer process alive: 17 renderers after 12 renders on 2
slots, measured), and ``--renderer-process-limit`` caps the renderers. ``rss_bytes()`` and
``stats`` measure the browser's process group (proportional memory, renderer count).

Only the networks of ``allowed_networks`` are reached: every request the page makes is
paused (DevTools ``Fetch`` domain) and continued only when its host is an IP literal the
address policy (``models.fetching.net_policy``) allows; host names never resolve
(``--host-resolver-rules``) and every background service that would call home is off. The
browser runs in its own process group, killed whole on exit, with its profile, cache and
crash folders in a temporary directory that is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp

from models.fetching.net_policy import AddressPolicy, parse_address
from models.outcomes import RenderOutcome

log = logging.getLogger(__name__)

DEFAULT_EXECUTABLE = "/usr/bin/chromium"

#: Flags that keep the browser off every network but the pages it is told to load.
QUIET_FLAGS: tuple[str, ...] = (
    "--headless=new",
    "--no-sandbox",  # the crawler may run as root in a container; pages are our targets
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication,"
    "CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions,"
    "BackForwardCache,SpareRendererForSitePerProcess",
    "--metrics-recording-only",
    "--safebrowsing-disable-auto-update",
    "--password-store=basic",
    "--use-mock-keychain",
    "--disable-gpu",
    "--mute-audio",
    "--dns-prefetch-disable",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


class BrowserUnavailableError(RuntimeError):
    """No usable Chromium: not installed, or it did not start; the message says which."""


@dataclass(frozen=True)
class RenderSettings:
    """How many tabs render at once, how many may wait, and when a page is rendered."""

    executable: str = DEFAULT_EXECUTABLE
    slots: int = 2
    queue_size: int = 4
    when_full: Literal["wait", "shed"] = "wait"
    page_timeout_s: float = 15.0
    quiet_s: float = 0.1  # network quiet this long after the load event: rendered
    launch_timeout_s: float = 20.0
    allowed_networks: tuple[str, ...] = ()
    user_agent: str | None = None  # the crawler's own User-Agent (None: Chromium's)
    #: The browser's memory (PSS of every process of its tree, from /proc smaps_rollup, which
    #: the kernel builds by walking each process's mappings: ~40 ms of system CPU for a
    #: two-slot browser's 12 processes) is sampled after the first render and then after a
    #: render at most this often, and never sooner than 50 times the last sample's own CPU
    #: (so sampling costs at most 2% of the time the pool is open); 0: after every render.
    #: Its renderer processes are counted when the slots are open and after every render
    #: (a few /proc reads). Sampling after every render was 12% of a whole cycle's
    #: flow-process samples, and a sample at every browser's start another ~3% (issue 19).
    measure_every_s: float = 0.5
    #: Resource types never fetched (DevTools ``ResourceType``): they cost bytes and build
    #: no content; the browser's own ``/favicon.ico`` request is skipped too.
    skipped_resources: tuple[str, ...] = (
        "Image",
        "Media",
        "Font",
        "Stylesheet",
        "Ping",
        "Prefetch",
        "Manifest",
        "TextTrack",
        "CSPViolationReport",
    )

    def __post_init__(self) -> None:
        if self.measure_every_s < 0:
            raise ValueError(f"measure_every_s must be >= 0, got {self.measure_every_s}")
        if self.slots < 1 or self.queue_size < 0:
            raise ValueError(
                f"need slots >= 1 and queue_size >= 0, got {self.slots}, {self.queue_size}"
            )
        if self.when_full not in ("wait", "shed"):
            raise ValueError(f"when_full must be wait or shed, got {self.when_full!r}")


@dataclass(frozen=True, slots=True)
class Rendered:
    """One render: the DOM after scripts ran, its document's status, bytes over the wire."""

    url: str
    outcome: RenderOutcome
    html: bytes = b""
    status: int | None = None
    wire_bytes: int = 0  # response bytes of every request the page made (headers included)
    requests: int = 0
    blocked: int = 0  # requests the address policy refused
    reason: str | None = None


@dataclass
class PoolStats:
    """What the pool did; the peaks are what bounds it."""

    rendered: int = 0
    shed: int = 0
    peak_rendering: int = 0
    peak_waiting: int = 0
    peak_rss_bytes: int = 0  # proportional set size of the browser's process group
    start_renderers: int = 0  # renderer processes once the slots were open
    peak_renderers: int = 0  # renderer processes at most while rendering
    measurements: int = 0  # memory samples taken (``RenderSettings.measure_every_s``)


def browser_executable(settings: RenderSettings | None = None) -> str | None:
    """The Chromium executable to use, or None when none is installed."""
    path = (settings or RenderSettings()).executable
    found = shutil.which(path)
    return found if found and os.access(found, os.X_OK) else None


@dataclass
class _Load:
    """What one navigation (a DevTools ``loaderId``) has done so far."""

    loaded: bool = False
    status: int | None = None
    inflight: set[str] = field(default_factory=set)
    requests: int = 0
    wire_bytes: int = 0
    quiet_since: float = 0.0


class _Tab:
    def __init__(self, pool: BrowserPool, session: str, context: str, target: str) -> None:
        self.pool, self.session, self.context, self.target = pool, session, context, target
        self.loads: dict[str, _Load] = {}
        self.request_loader: dict[str, str] = {}
        self.blocked = 0
        self.changed = asyncio.Event()

    def load(self, loader: str) -> _Load:
        found = self.loads.get(loader)
        if found is None:
            found = self.loads[loader] = _Load(quiet_since=time.monotonic())
        return found

    def on_event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Fetch.requestPaused":
            self.pool._spawn(self._judge(params))
            return
        if method == "Network.requestWillBeSent":
            loader = str(params.get("loaderId", ""))
            request_id = str(params["requestId"])
            state = self.load(loader)
            if request_id not in state.inflight:
                state.requests += 1
            state.inflight.add(request_id)
            self.request_loader[request_id] = loader
        elif method == "Network.responseReceived":
            request_id = str(params["requestId"])
            document = self.request_loader.get(request_id)
            if document is not None and request_id == document:  # the document itself
                self.load(document).status = int(params["response"]["status"])
        elif method in ("Network.loadingFinished", "Network.loadingFailed"):
            request_id = str(params["requestId"])
            owner = self.request_loader.pop(request_id, None)
            if owner is not None:
                state = self.load(owner)
                state.inflight.discard(request_id)
                state.wire_bytes += int(params.get("encodedDataLength", 0) or 0)
                if not state.inflight:
                    state.quiet_since = time.monotonic()
        elif method == "Page.lifecycleEvent" and params.get("name") == "load":
            self.load(str(params.get("loaderId", ""))).loaded = True
        else:
            return
        self.changed.set()

    async def _judge(self, params: dict[str, Any]) -> None:
        url = str(params["request"]["url"])
        refusal = self.pool._refusal(url)
        skipped = params.get("resourceType") in self.pool.settings.skipped_resources
        skipped = skipped or urlsplit(url).path == "/favicon.ico"
        with contextlib.suppress(Exception):  # the tab may have moved on or closed
            if refusal is None and skipped:
                await self.pool._send(
                    "Fetch.failRequest",
                    {"requestId": params["requestId"], "errorReason": "BlockedByClient"},
                    self.session,
                )
            elif refusal is None:
                await self.pool._send(
                    "Fetch.continueRequest", {"requestId": params["requestId"]}, self.session
                )
            else:
                self.blocked += 1
                log.info("render: refused %s (%s)", url, refusal)
                await self.pool._send(
                    "Fetch.failRequest",
                    {"requestId": params["requestId"], "errorReason": "BlockedByClient"},
                    self.session,
                )

    async def render(self, url: str, settings: RenderSettings) -> Rendered:
        self.loads.clear()
        self.request_loader.clear()
        self.blocked = 0
        nav = await self.pool._send("Page.navigate", {"url": url}, self.session)
        if nav.get("errorText"):
            return Rendered(url, "error", reason=str(nav["errorText"]), blocked=self.blocked)
        loader = str(nav.get("loaderId", ""))
        deadline = time.monotonic() + settings.page_timeout_s
        state = self.load(loader)
        while True:
            now = time.monotonic()
            quiet_for = now - state.quiet_since
            if state.loaded and not state.inflight and quiet_for >= settings.quiet_s:
                break
            if now >= deadline:
                return Rendered(
                    url,
                    "timeout",
                    status=state.status,
                    wire_bytes=state.wire_bytes,
                    requests=state.requests,
                    blocked=self.blocked,
                    reason="page_timeout",
                )
            self.changed.clear()
            wait = deadline - now
            if state.loaded and not state.inflight:
                wait = min(wait, settings.quiet_s - quiet_for)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=max(wait, 0.001))
        result = await self.pool._send(
            "Runtime.evaluate",
            {"expression": "document.documentElement.outerHTML", "returnByValue": True},
            self.session,
        )
        html = str(result.get("result", {}).get("value", "")).encode()
        return Rendered(
            url,
            "ok",
            html=b"<!doctype html>\n" + html,
            status=state.status,
            wire_bytes=state.wire_bytes,
            requests=state.requests,
            blocked=self.blocked,
        )

    async def reset(self) -> None:
        """Leave the page (its renderer process can go) before the next render."""
        with contextlib.suppress(Exception):
            await self.pool._send("Page.navigate", {"url": "about:blank"}, self.session)


class BrowserPool:
    """A headless Chromium with ``settings.slots`` tabs; use as ``async with``."""

    def __init__(self, settings: RenderSettings | None = None) -> None:
        self.settings = settings or RenderSettings()
        self.stats = PoolStats()
        self._policy = AddressPolicy.from_strings(self.settings.allowed_networks)
        self._process: subprocess.Popen[bytes] | None = None
        self._folder: Path | None = None
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._tabs: dict[str, _Tab] = {}
        self._free: asyncio.Queue[_Tab] = asyncio.Queue()
        self._room = asyncio.Semaphore(self.settings.slots + self.settings.queue_size)
        self._admitted = 0
        self._measure_due = 0.0  # time.monotonic() from which the next memory sample is due
        self._rendering = 0
        self._background: set[asyncio.Task[None]] = set()

    # -- life cycle ---------------------------------------------------------------------

    async def __aenter__(self) -> BrowserPool:
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def _start(self) -> None:
        executable = browser_executable(self.settings)
        if executable is None:
            raise BrowserUnavailableError(
                f"no Chromium at {self.settings.executable} (apt-get install -y chromium)"
            )
        self._folder = Path(tempfile.mkdtemp(prefix="recrawl-chromium-"))
        profile = self._folder / "profile"
        scratch = self._folder / "tmp"
        scratch.mkdir()
        env = {
            **os.environ,
            # Chromium's singleton socket folders (org.chromium.Chromium.*) and other scratch
            # files go where close() removes them, even after a killed browser
            "TMPDIR": str(scratch),
            "HOME": str(self._folder),
            "XDG_CONFIG_HOME": str(self._folder / "config"),
            "XDG_CACHE_HOME": str(self._folder / "cache"),
        }
        args = [
            executable,
            *QUIET_FLAGS,
            f"--renderer-process-limit={self.settings.slots + 1}",
            resolver_rules(self.settings.allowed_networks),
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        self._process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group: killed whole on exit
        )
        ws_url = await self._devtools_url(profile / "DevToolsActivePort")
        self._http = aiohttp.ClientSession()
        self._ws = await self._http.ws_connect(ws_url, max_msg_size=256 << 20)
        self._reader = asyncio.create_task(self._read())
        for _ in range(self.settings.slots):
            tab = await self._open_tab()
            self._free.put_nowait(tab)
        self.stats.start_renderers = self._count_renderers()

    async def _devtools_url(self, port_file: Path) -> str:
        deadline = time.monotonic() + self.settings.launch_timeout_s
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise BrowserUnavailableError(
                    f"Chromium exited with status {self._process.returncode} at start"
                )
            with contextlib.suppress(OSError, ValueError):
                lines = port_file.read_text().split()
                if len(lines) >= 2:
                    return f"ws://127.0.0.1:{int(lines[0])}{lines[1]}"
            await asyncio.sleep(0.05)
        raise BrowserUnavailableError(
            f"Chromium did not open its DevTools port in {self.settings.launch_timeout_s:g} s"
        )

    async def _open_tab(self) -> _Tab:
        context = (await self._send("Target.createBrowserContext", {}))["browserContextId"]
        target = (
            await self._send(
                "Target.createTarget", {"url": "about:blank", "browserContextId": context}
            )
        )["targetId"]
        session = (
            await self._send("Target.attachToTarget", {"targetId": target, "flatten": True})
        )["sessionId"]
        tab = _Tab(self, session, context, target)
        self._tabs[session] = tab
        setup: list[tuple[str, dict[str, Any]]] = [
            ("Page.enable", {}),
            ("Page.setLifecycleEventsEnabled", {"enabled": True}),
            ("Network.enable", {}),
            ("Network.setCacheDisabled", {"cacheDisabled": True}),
            ("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}),
        ]
        if self.settings.user_agent:
            setup.append(("Network.setUserAgentOverride", {"userAgent": self.settings.user_agent}))
        for method, params in setup:
            await self._send(method, params, session)
        return tab

    async def close(self) -> None:
        """Close the connection, kill the browser's process group, remove its folder."""
        for task in list(self._background):
            task.cancel()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        if self._ws is not None:
            await self._ws.close()
        if self._http is not None:
            await self._http.close()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(BrowserUnavailableError("the browser pool closed"))
        if self._process is not None:
            await asyncio.to_thread(_kill_group, self._process)
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
        self._reader = self._ws = self._http = None
        self._folder = None

    # -- rendering -----------------------------------------------------------------------

    async def render(self, url: str) -> Rendered:
        """Render one page in a free slot (waiting, or shed when the queue is full)."""
        if self._ws is None:
            raise BrowserUnavailableError("the browser pool is not running")
        full = self._admitted >= self.settings.slots + self.settings.queue_size
        if full and self.settings.when_full == "shed":
            self.stats.shed += 1
            return Rendered(url, "shed", reason="render_queue_full")
        async with self._room:
            self._admitted += 1
            waiting = self._admitted - self._rendering
            self.stats.peak_waiting = max(self.stats.peak_waiting, waiting)
            try:
                tab = await self._free.get()
                self._rendering += 1
                self.stats.peak_rendering = max(self.stats.peak_rendering, self._rendering)
                try:
                    refusal = self._refusal(url)
                    if refusal is not None:
                        return Rendered(url, "error", reason=f"address_refused: {refusal}")
                    try:
                        result = await tab.render(url, self.settings)
                    finally:
                        self._measure()
                        await tab.reset()
                finally:
                    self._rendering -= 1
                    self._free.put_nowait(tab)
            finally:
                self._admitted -= 1
        self.stats.rendered += result.outcome == "ok"
        return result

    async def render_all(self, urls: Iterable[str]) -> list[Rendered]:
        """Render every URL through the pool (in order of the answers: the URLs' order)."""
        return list(await asyncio.gather(*(self.render(u) for u in urls)))

    def _count_renderers(self, pids: list[int] | None = None) -> int:
        """The browser's renderer processes now (``pids``: its tree, if already walked)."""
        if self._process is None:
            return 0
        if pids is None:
            pids = tree_pids(self._process.pid)
        renderers = sum(_is_renderer(pid) for pid in pids)
        self.stats.peak_renderers = max(self.stats.peak_renderers, renderers)
        return renderers

    def _measure(self) -> None:
        """After a render: count the renderers; sample the memory when it is due
        (``RenderSettings.measure_every_s``)."""
        if self._process is None:
            return
        now = time.monotonic()
        if self.stats.measurements and now < self._measure_due:
            self._count_renderers()
            return
        cpu = time.thread_time()
        pids = tree_pids(self._process.pid)
        rss = sum(_rss(pid) for pid in pids)
        self._count_renderers(pids)
        self.stats.measurements += 1
        self.stats.peak_rss_bytes = max(self.stats.peak_rss_bytes, rss)
        every = self.settings.measure_every_s
        self._measure_due = now + (every and max(every, 50 * (time.thread_time() - cpu)))

    def rss_bytes(self) -> int:
        """Resident memory of the browser's whole process group (0 where /proc is missing)."""
        if self._process is None:
            return 0
        return sum(_rss(pid) for pid in tree_pids(self._process.pid))

    # -- DevTools plumbing -----------------------------------------------------------------

    def _refusal(self, url: str) -> str | None:
        parts = urlsplit(url)
        if parts.scheme in ("data", "about", "blob"):
            return None
        refusal = self._policy.scheme_refusal(parts.scheme)
        if refusal is not None:
            return refusal
        host = parts.hostname or ""
        if parse_address(host) is None:
            return f"host name {host!r}: the browser resolves no names"
        return self._policy.host_refusal(host)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _send(
        self, method: str, params: dict[str, Any], session: str | None = None
    ) -> dict[str, Any]:
        if self._ws is None:
            raise BrowserUnavailableError("the browser pool is not running")
        message: dict[str, Any] = {"id": next(self._ids), "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message["id"]] = future
        try:
            await self._ws.send_str(json.dumps(message))
            return await asyncio.wait_for(future, timeout=self.settings.page_timeout_s)
        finally:
            self._pending.pop(message["id"], None)

    async def _read(self) -> None:
        assert self._ws is not None
        async for message in self._ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(message.data)
            if "id" in data:
                future = self._pending.get(int(data["id"]))
                if future is not None and not future.done():
                    if "error" in data:
                        future.set_exception(
                            RuntimeError(f"DevTools error: {data['error'].get('message')}")
                        )
                    else:
                        future.set_result(data.get("result", {}))
                continue
            tab = self._tabs.get(str(data.get("sessionId", "")))
            if tab is not None:
                tab.on_event(str(data.get("method", "")), data.get("params", {}))
        for future in self._pending.values():
            if not future.done():
                future.set_exception(BrowserUnavailableError("the browser closed its connection"))


def resolver_rules(allowed_networks: Iterable[str]) -> str:
    """``--host-resolver-rules`` that resolve nothing: every name fails as not found.

    Chromium applies the rules to IP literals too, so the literals of an allowed loopback
    network are excluded (``127.*`` for ``127.0.0.0/8``; a name that happens to start with
    ``127.`` is still refused by the request guard before anything is sent). Other allowed
    networks are reached by IP literal only where they are loopback; nothing else resolves.
    """
    excludes = ["127.0.0.1"]
    for network in allowed_networks:
        if network.startswith("127."):
            excludes = ["127.*"]
    return "--host-resolver-rules=MAP * ~NOTFOUND, " + ", ".join(f"EXCLUDE {e}" for e in excludes)


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants (``/proc/<pid>/task/*/children``: a few files, not a scan
    of every process on the machine; the kill check at close scans the group instead)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError, ValueError):
                todo.extend(int(c) for c in children.read_text().split())
    return found


def group_pids(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` (from /proc; empty where it is missing)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _rss(pid: int) -> int:
    """Proportional set size (shared pages split between the processes sharing them): the
    processes' RSS would count Chromium's shared memory once per process."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def _is_renderer(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return False


def _kill_group(process: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM the browser's process group, SIGKILL what is left after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    deadline = time.monotonic() + grace_s
    while group_pids(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
