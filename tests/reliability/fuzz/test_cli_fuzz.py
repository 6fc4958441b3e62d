"""Fuzz: the whole ``recrawl`` command line (``flows.cli.main``) on generated argument vectors.

Argument vectors for every sub-command, built from its own options with values valid, odd
and broken (negative, huge, NaN/inf, non-numbers, missing and odd paths, long and odd
URLs, unknown options, random tokens), and catalog files to import (CSV and Parquet with odd
columns and types, NaN/inf/huge values, long and odd URLs; empty files, binary junk).

Properties, for every vector:

- no traceback reaches the user: ``main`` returns 0 or 2, or argparse exits (``SystemExit``
  0 for ``--help``, 2 for a usage error);
- on a return of 2, stderr is exactly one line, ``recrawl <command>: <what was wrong>``;
  on argparse's exit 2, stderr is argparse's usage text followed by exactly one line
  ``recrawl ...: error: <what was wrong>`` (argparse's own format, accepted as is; it
  echoes a token as given, so a token holding a newline continues that line);
- whenever the command failed, every file under the store (``data/``, prepared once per
  test: a small synthetic history and its catalog) is byte-identical afterwards.

Commands that would start Prefect, serve, or send traffic run only up to their expensive
call, which is stubbed to raise ``ReachedExpensiveCall`` (counted as "arguments accepted"):
``flows.evaluation.demo.run_demo`` (demo), ``flows.local_prefect.start_local_prefect`` (run),
``tasks.fetch.engine.fetch_batch_sync`` (fetch), ``tasks.discovery.run.discover_sync`` (discover),
``sandbox.cli.SandboxWeb.generate`` and ``serve_foreground`` (sandbox),
``flows.evaluation.policy_backtest.run_policy_backtest`` (backtest), and
``flows.evaluation.estimation_demo.run_estimation_demo`` above 2,000 page-cycles (synthetic; smaller
runs are real). ``flows.cli.apply_prefect_defaults`` is a no-op here (it sets process-wide
environment variables). Nothing leaves the process, let alone loopback.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from flows import cli
from tests.reliability.fuzz.budget import BUDGETS, TRIED

pytestmark = pytest.mark.reliability

STORE = "data"  # the commands' default --root, relative to the working folder


class ReachedExpensiveCall(Exception):  # noqa: N818 - not an error: the arguments passed
    """A stubbed call past a command's argument checks (Prefect, network, serving)."""


# ---------------------------------------------------------------- values of options


_ANY_CHAR = st.characters(codec="utf-8", exclude_categories=("Cs",))
junk_token = st.one_of(
    st.text(_ANY_CHAR, max_size=12),
    st.text(st.sampled_from(string.printable), max_size=12),
    st.sampled_from(["-", "--", "-x", "--nope", "=", "--root=", "\x00", " ", "-1", "--help"]),
)
ints = st.one_of(
    st.integers(-3, 40).map(str),
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(["0", "-1", "1e3", "nan", "", "٣", "0x10", "9" * 30, "1_000", " 5"]),
)
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(-10, 1_000).map(lambda f: f"{f:g}"),
    st.sampled_from(
        ["nan", "inf", "-inf", "1e308", "1e400", "-1", "0", "-0", "1e-300", "x", "", "١"]
    ),
)
odd_url = st.one_of(
    st.sampled_from(
        [
            "http://127.0.0.1:1/p",
            "http://user:pw@127.0.0.1:1/p",
            "ftp://x/y",
            "http://",
            "http://[::1",
            "javascript:alert(1)",
            "http://a.test/" + "x" * 3_000,
            "http://h:" + "9" * 5_000 + "/",
            "not a url",
        ]
    ),
    st.text(_ANY_CHAR, max_size=30).map(lambda t: "http://a.test/" + t),
    st.text(_ANY_CHAR, max_size=30),
)
# Paths relative to the working folder: the store, a missing folder, a plain file, a
# folder that is no store, the empty path (the working folder), odd names.
paths = st.sampled_from(
    [
        STORE,
        f"{STORE}/",
        "missing",
        "missing/deeper",
        "in/cat.csv",
        "in",
        "",
        "out",
        "out/x.parquet",
        "out/missing/x.parquet",
        f"{STORE}/pages/catalog.parquet",
        "nul\x00byte",
        "a" * 300,
    ]
)
out_paths = st.sampled_from(
    [
        "out/e.parquet",
        "out",
        "out/missing/e.parquet",
        "in/cat.csv",
        STORE,
        f"{STORE}/est.parquet",
        "",
        "nul\x00byte",
    ]
)

# option -> strategy of its value (None: a flag). Store-writing commands default --root to
# the store.
_FETCH = {
    "--mode": st.sampled_from(["direct", "api", "proxy", "bogus"]),
    "--api-url": odd_url,
    "--proxy-url": odd_url,
    "--concurrency": ints,
    "--allow-network": st.sampled_from(["127.0.0.0/8", "::1/128", "10.0.0.0/33", "x", ""]),
}
_PRIORS = st.sampled_from(["mixture", "empirical", "none", "bogus", ""])
OPTIONS: dict[str, dict[str, st.SearchStrategy[str] | None]] = {
    "demo": {
        "--root": paths,
        "--hosts": ints,
        "--pages-per-host": ints,
        "--cycles": ints,
        "--budget-share": floats,
        "--seed": ints,
        "--verbose": None,
    },
    "synthetic": {"--root": paths, "--pages": ints, "--cycles": ints, "--seed": ints},
    "estimate": {"--root": paths, "--out": out_paths, "--prior": _PRIORS},
    "plan": {
        "--root": paths,
        "--cycle": ints,
        "--budget": floats,
        "--name": st.one_of(st.sampled_from(["try-1", "../x", "a/b", ""]), junk_token),
        "--host-capacity": floats,
        "--seed": ints,
        "--cost-model": st.sampled_from(["credits", "bandwidth", "catalog", "x"]),
        "--prior": _PRIORS,
    },
    "run": {
        "--root": paths,
        "--budget": floats,
        "--cycle": ints,
        "--host-capacity": floats,
        "--cost-model": st.sampled_from(["credits", "bandwidth", "catalog", "x"]),
        "--prior": _PRIORS,
        "--seed": ints,
        "--window": floats,
        "--replace": None,
        "--verbose": None,
        **_FETCH,
    },
    "fetch": {
        "--urls": paths,
        "--out": out_paths,
        "--window": floats,
        "--cycle": ints,
        **_FETCH,
    },
    "discover": {
        "--root": paths,
        "--seed": odd_url,
        "--sitemap": odd_url,
        "--max-pages": ints,
        "--min-delay": floats,
        "--allow-network": _FETCH["--allow-network"],
    },
    "history": {"--root": paths, "--cycle": ints, "--limit": ints},
    "backtest": {
        "--pages": ints,
        "--days": ints,
        "--cold-start": None,
        "--budget-share": floats,
        "--workload": st.sampled_from(["measured", "shop", "shift", "x"]),
        "--objective": st.sampled_from(["freshness", "age", "change_capture", "x"]),
        "--policies": st.sampled_from(["uniform", "planner,uniform", "nope", "", ","]),
        "--seed": ints,
        "--host-capacity": floats,
        "--solve-every": ints,
        "--window": st.sampled_from(["0-5", "5-0", "1-", "a-b", "-1-3", "1-2-3", ""]),
        "--lm-honest": floats,
        "--lm-now": floats,
        "--out": out_paths,
    },
    "sandbox": {
        "--hosts": ints,
        "--pages-per-host": ints,
        "--port": ints,
        "--seed": ints,
        "--manifest": out_paths,
        "--days-per-second": floats,
        "--start": st.sampled_from(["2026-01-01T00:00:00Z", "yesterday", "", "9999-12-31"]),
        "--latency": floats,
        "--no-gzip": None,
        "--log-max-entries": ints,
        "--no-warmup": None,
    },
    "catalog": {"--root": paths},
}
POSITIONALS: dict[str, st.SearchStrategy[list[str]]] = {
    "catalog": st.tuples(st.sampled_from(["import", "export", ""]), paths).map(list),
    "history": st.sampled_from(["cycles", "rebuild-stats", "show", "nope"]).map(lambda a: [a]),
    "fetch": st.lists(odd_url, max_size=3),
}


@st.composite
def argument_vectors(draw: st.DrawFn) -> list[str]:
    """A sub-command and a few of its options, each valid, odd or broken; sometimes junk."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.lists(junk_token, max_size=5))
    command = draw(st.sampled_from(sorted(OPTIONS)))
    argv = [command]
    if command in POSITIONALS:
        argv += draw(POSITIONALS[command])
    options = OPTIONS[command]
    for name in draw(st.lists(st.sampled_from(sorted(options)), max_size=6)):
        value = options[name]
        argv.append(name)
        if value is not None:
            argv.append(draw(value))
    if draw(st.integers(0, 9)) == 0:
        argv.insert(draw(st.integers(0, len(argv))), draw(junk_token))
    return argv


# ---------------------------------------------------------------- catalog files

_CELL = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 1e-320, 0.0, -1.0, 1e6, 1e6 + 1]),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.text(_ANY_CHAR, max_size=10),
    odd_url,
)
_COLUMN_NAMES = st.sampled_from(
    [
        "url",
        "url",
        "value",
        "cost",
        "host",
        "group",
        "source",
        "discovered_at",
        "lastmod",
        "changefreq",
        "canonical",
        "near_duplicate_of",
        "url_id",
        "",
        "URL",
        " url",
        "extra",
        "0",
    ]
)


@st.composite
def catalog_frames(draw: st.DrawFn) -> pd.DataFrame:
    """Rows of a catalog file: usually a url column of odd URLs, other columns of anything."""
    names = draw(st.lists(_COLUMN_NAMES, max_size=5, unique=True))
    if draw(st.booleans()) and "url" not in names:
        names.insert(0, "url")
    rows = draw(st.integers(0, 6))
    data: dict[str, list[Any]] = {}
    for name in names:
        if name == "url":
            cells = st.one_of(odd_url, _CELL)
        elif name in ("value", "cost"):
            cells = st.one_of(
                st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1.0, 2.5]), _CELL
            )
        else:
            cells = _CELL
        data[name] = draw(st.lists(cells, min_size=rows, max_size=rows))
    return pd.DataFrame(data, columns=names)


@st.composite
def catalog_files(draw: st.DrawFn) -> tuple[str, bytes]:
    """(file name, content): a CSV or Parquet of generated rows, empty, or binary junk."""
    kind = draw(st.sampled_from(["csv", "parquet", "empty", "junk", "csv-text", "other"]))
    if kind == "empty":
        return draw(st.sampled_from(["cat.csv", "cat.parquet"])), b""
    if kind == "junk":
        return draw(st.sampled_from(["cat.csv", "cat.parquet", "cat"])), draw(
            st.binary(max_size=200)
        )
    if kind == "csv-text":
        text = draw(
            st.text(st.sampled_from("url,value\n\"'\r;\t\x00 http://a.test/é1e308nan"), max_size=80)
        )
        return "cat.csv", text.encode("utf-8", "surrogatepass")
    frame = draw(catalog_frames())
    if kind in ("csv", "other"):
        return ("cat.csv" if kind == "csv" else "cat.txt"), frame.to_csv(index=False).encode(
            "utf-8", "surrogatepass"
        )
    buffer = io.BytesIO()
    try:
        frame.to_parquet(buffer, index=False)
    except Exception:  # a frame pyarrow cannot store (mixed types): store it as text
        buffer = io.BytesIO()
        frame.astype(str).to_parquet(buffer, index=False)
    return "cat.parquet", buffer.getvalue()


# ---------------------------------------------------------------- the harness


def _digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` by relative path (and the empty folders)."""
    digests: dict[str, str] = {}
    if not root.exists():
        return digests
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_file():
            digests[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir() and not any(path.iterdir()):
            digests[rel] = "<empty folder>"
    return digests


class Workspace:
    """A working folder holding a pristine copy of the sample store under ``data/``."""

    def __init__(self, pristine: Path, base: Path) -> None:
        self.pristine = pristine
        self.work = base / "work"
        self.digest = _digest(self.pristine)
        self.dirty = True

    def reset(self) -> None:
        """Back to the pristine store, an ``in/`` folder with a catalog, an empty ``out/``."""
        if self.dirty:
            self.work.mkdir(exist_ok=True)
            for path in self.work.iterdir():  # the folder itself stays: it is the cwd
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            shutil.copytree(self.pristine, self.work / STORE)
            (self.work / "in").mkdir()
            (self.work / "out").mkdir()
            self.dirty = False
        (self.work / "in" / "cat.csv").write_text("url,value\nhttp://a.test/x,2\n")
        shutil.rmtree(self.work / "out")
        (self.work / "out").mkdir()


@pytest.fixture(scope="module")
def pristine_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic history and its catalog, written once; each test works on a copy."""
    from flows.evaluation.estimation_demo import run_estimation_demo

    root = tmp_path_factory.mktemp("cli_fuzz") / "pristine"
    run_estimation_demo(root, pages=120, cycles=3, seed=7)
    return root


@pytest.fixture
def workspace(pristine_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """The prepared store; the commands' expensive calls stubbed; cwd the working folder."""
    space = Workspace(pristine_store, tmp_path)

    def reached(*args: Any, **kwargs: Any) -> Any:
        raise ReachedExpensiveCall

    import flows.evaluation.demo
    import flows.evaluation.estimation_demo
    import flows.evaluation.policy_backtest
    import flows.local_prefect
    import sandbox.cli
    import tasks.discovery.run
    import tasks.fetch.engine

    real_synthetic = flows.evaluation.estimation_demo.run_estimation_demo

    def synthetic(root: Path, *, pages: int, cycles: int, seed: int) -> Any:
        if pages * cycles > 2_000:
            raise ReachedExpensiveCall
        return real_synthetic(root, pages=pages, cycles=cycles, seed=seed)

    monkeypatch.setattr(cli, "apply_prefect_defaults", lambda **kw: None)
    monkeypatch.setattr(flows.evaluation.demo, "run_demo", reached)
    monkeypatch.setattr(flows.local_prefect, "start_local_prefect", reached)
    monkeypatch.setattr(tasks.fetch.engine, "fetch_batch_sync", reached)
    monkeypatch.setattr(tasks.discovery.run, "discover_sync", reached)
    monkeypatch.setattr(sandbox.cli.SandboxWeb, "generate", classmethod(reached))
    monkeypatch.setattr(sandbox.cli, "serve_foreground", reached)
    monkeypatch.setattr(sandbox.cli, "raise_open_file_limit", lambda n: None)
    monkeypatch.setattr(flows.evaluation.policy_backtest, "run_policy_backtest", reached)
    monkeypatch.setattr(flows.evaluation.estimation_demo, "run_estimation_demo", synthetic)
    space.reset()
    monkeypatch.chdir(space.work)
    return space


def run_cli(space: Workspace, argv: list[str], catalog: tuple[str, bytes] | None = None) -> None:
    """Run ``recrawl argv`` in the workspace and assert the three properties."""
    space.reset()
    if catalog is not None:
        (space.work / "in" / catalog[0]).write_bytes(catalog[1])
    store = space.work / STORE
    before = _digest(store)
    assert before == space.digest
    out, err = io.StringIO(), io.StringIO()
    kind = "returned"
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main(argv)
        except SystemExit as exc:
            kind, status = "exited", exc.code
        except ReachedExpensiveCall:
            kind, status = "reached", 0
        except BaseException as exc:
            raise AssertionError(
                f"recrawl {argv!r} raised {exc!r}; stderr: {err.getvalue()}"
            ) from exc
    stderr = err.getvalue()
    context = f"recrawl {argv!r} {kind} {status!r}; stderr: {stderr!r}"
    assert "Traceback" not in stderr, context
    assert status in (0, 2, None), context
    if status == 2:
        lines = stderr.rstrip("\n").split("\n")
        if kind == "returned":
            assert len(lines) == 1 and lines[0].startswith("recrawl "), context
            assert len(lines[0]) > len("recrawl x: "), context
        else:  # argparse: usage, then one "prog: error: ..." line
            assert lines[0].startswith("usage: recrawl"), context
            errors = [i for i, line in enumerate(lines) if line.startswith("recrawl")]
            assert len(errors) == 1 and ": error: " in lines[errors[0]], context
            assert all(line.startswith(("usage:", " ")) for line in lines[: errors[0]]), context
            # argparse echoes a token as given: one holding a newline continues the line
            echoed = "\n".join(lines[errors[0] :])
            assert echoed.count("\n") <= sum(t.count("\n") for t in argv), context
        after = _digest(store)
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        assert not changed, f"{context}; changed under {STORE}/: {changed[:5]}"
    others = {p.name for p in space.work.iterdir()} - {STORE, "in", "out"}
    if others or kind == "reached" or _digest(store) != space.digest:
        space.dirty = True  # the next example starts from a fresh copy


def _fuzz(
    name: str,
    examples: float,
    prop: Callable[..., None],
    explicit: list[dict[str, Any]],
    **strategies: st.SearchStrategy[Any],
) -> None:
    """``budget.check`` with explicit examples (the findings) run first."""

    def counted(**kwargs: Any) -> None:
        TRIED[name] += 1
        prop(**kwargs)

    counted.__name__ = counted.__qualname__ = "fuzz_" + name.replace(".", "_")
    test = given(**strategies)(counted)
    for kwargs in explicit:
        test = example(**kwargs)(test)
    settings(
        max_examples=max(1, round(examples)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )(test)()


#: Argument vectors the fuzzer found failing, each fixed (see the module's report).
ARGV_FINDINGS: list[list[str]] = [
    ["synthetic", "--root", STORE, "--pages", "0"],  # 1. the store wiped, then refused
    ["synthetic", "--root", STORE, "--cycles", "0"],  # 1. was exit 0: the store replaced by NaNs
    ["estimate", "--out", "out/missing/e.parquet"],  # 2. OSError traceback after estimating
    ["estimate", "--out", "out"],  # 2. IsADirectoryError traceback
    ["history", "show", "--limit", "9" * 30],  # 3. DuckDB's LIMIT overflowed: a traceback
    ["synthetic", "--root", f"{STORE}/pages/catalog.parquet"],  # 5. NotADirectoryError
    ["catalog", "import", STORE],  # 6. a folder to import: IsADirectoryError
    ["catalog", "import", "in/cat.csv", "--root", "in/cat.csv"],  # 7. NotADirectoryError
    ["fetch", "--urls", STORE, "--out", "out/r.parquet"],  # 8. IsADirectoryError
    ["catalog", "import", "a" * 300],  # 10. ENAMETOOLONG from Path.is_file(): an OSError
    ["plan", "--budget", "1", "--root", "a" * 300],  # 10. the same in require_store
]
#: Catalog files the fuzzer found failing.
CATALOG_FINDINGS: list[tuple[str, bytes]] = [
    ("cat.csv", b"url\n"),  # 4. no rows: IndexError in check_value_and_cost
]


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_command_answers_0_or_one_line_and_2_and_a_failure_changes_nothing(
    budget: int, workspace: Workspace
) -> None:
    _fuzz(
        "cli.argv",
        60 * budget,
        lambda argv: run_cli(workspace, argv),
        [{"argv": argv} for argv in ARGV_FINDINGS],
        argv=argument_vectors(),
    )


@pytest.mark.parametrize("budget", BUDGETS)
def test_catalog_import_of_any_file_answers_0_or_one_line_and_2_and_a_failure_changes_nothing(
    budget: int, workspace: Workspace
) -> None:
    def prop(catalog: tuple[str, bytes], root: str) -> None:
        run_cli(workspace, ["catalog", "import", f"in/{catalog[0]}", "--root", root], catalog)

    _fuzz(
        "cli.catalog_import",
        60 * budget,
        prop,
        [{"catalog": c, "root": STORE} for c in CATALOG_FINDINGS],
        catalog=catalog_files(),
        root=st.sampled_from([STORE, STORE, "missing"]),
    )


@pytest.mark.parametrize(
    "argv",
    [
        # 9. each of these reached the fetch, the backtest or the server, then failed there
        # with a traceback (rows or a run lost): refused first now, nothing started.
        ["fetch", "http://127.0.0.1:1/", "--out", "out"],
        ["backtest", "--out", "in/cat.csv"],
        ["sandbox", "--port", "70000"],
        ["sandbox", "--port", "-1"],
        ["sandbox", "--manifest", "out/missing/m.json"],
        ["sandbox", "--manifest", "out"],
    ],
)
def test_an_output_or_port_that_cannot_work_is_refused_before_the_expensive_call(
    argv: list[str], workspace: Workspace
) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = cli.main(argv)  # ReachedExpensiveCall would fail the test
    assert status == 2 and err.getvalue().count("\n") == 1, err.getvalue()
    assert _digest(workspace.work / STORE) == workspace.digest
