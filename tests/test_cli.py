import subprocess
import sys
from types import SimpleNamespace


def run(*args, cwd):
    """``python -m flows.cli ARGS`` in a process of its own (the entry point itself)."""
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], capture_output=True, text=True, cwd=cwd
    )


def recrawl(monkeypatch, capsys, *args):
    """``recrawl ARGS`` in this process, as ``run`` gives it: returncode, stdout, stderr.

    Neither the Prefect environment defaults nor glibc's keep-freed-memory policy (both
    process-wide, for a process of its own) are applied to the test process. A subprocess
    start costs 1-2 CPU seconds of imports; ``run`` is kept for the entry point itself."""
    import flows.cli

    monkeypatch.setattr(flows.cli, "apply_prefect_defaults", lambda **_: None)
    monkeypatch.setattr(flows.cli, "keep_freed_memory", lambda: False)
    capsys.readouterr()  # what earlier calls printed is theirs
    code = flows.cli.main(list(args))
    out, err = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


def in_process(monkeypatch, capsys, *args):
    """``recrawl ARGS`` in this process: code, stderr."""
    done = recrawl(monkeypatch, capsys, *args)
    return done.returncode, done.stderr


def test_synthetic_runs_and_prints_the_comparison(tmp_path, monkeypatch, capsys):
    root = str(tmp_path / "d")
    done = recrawl(
        monkeypatch, capsys, "synthetic", "--root", root, "--pages", "1000", "--cycles", "4"
    )
    assert done.returncode == 0, done.stderr
    assert "MLE + empirical Bayes" in done.stdout
    assert "90% interval" in done.stdout
    listing = recrawl(monkeypatch, capsys, "history", "cycles", "--root", root)
    assert listing.stdout.count("cycle ") == 4


def test_a_root_without_a_store_is_named_not_read_as_empty(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "typo"
    for args in (
        ["estimate", "--out", str(tmp_path / "e.parquet")],
        ["plan", "--budget", "10"],
        ["history", "cycles"],
        ["run", "--budget", "10"],
    ):
        code, err = in_process(monkeypatch, capsys, *args, "--root", str(missing))
        assert code == 2, (args, err)
        assert f"no store at {missing}" in err and "Traceback" not in err
        assert err.count("\n") == 1
    assert not missing.exists() and not (tmp_path / "e.parquet").exists()


def test_bad_numbers_are_echoed_as_given(tmp_path, monkeypatch, capsys):
    root = tmp_path / "d"
    code, err = in_process(
        monkeypatch, capsys, "synthetic", "--root", str(root), "--pages", "300", "--cycles", "2"
    )
    assert code == 0, err
    for args, said in (
        (["--budget", "-1"], "--budget must be a finite number >= 0, got -1"),
        (["--budget", "nan"], "got nan"),
        (["--budget", "5", "--cycle", "-1"], "--cycle must be >= 0, got -1"),
        (["--budget", "5", "--host-capacity", "0"], "--host-capacity must be"),
    ):
        for command in ("plan", "run"):
            code, err = in_process(monkeypatch, capsys, command, "--root", str(root), *args)
            assert code == 2 and said in err and err.count("\n") == 1, (command, args, err)
    assert not (root / "plans").exists()


def test_corrupt_history_gives_a_clear_error(tmp_path, monkeypatch, capsys):
    root = tmp_path / "d"
    args = ("synthetic", "--root", str(root), "--pages", "300", "--cycles", "2")
    assert recrawl(monkeypatch, capsys, *args).returncode == 0
    (root / "history" / "_manifest.json").write_text("{not json")
    done = recrawl(monkeypatch, capsys, "estimate", "--root", str(root))
    assert done.returncode == 2
    assert "manifest" in done.stderr and "Traceback" not in done.stderr


def test_catalog_import_normalizes_and_is_idempotent(tmp_path, monkeypatch, capsys):
    import pyarrow.parquet as pq

    csv = tmp_path / "c.csv"
    csv.write_text(
        "url,value\nHTTP://Example.com:80/a/./b?utm_source=x#top,2\nhttp://example.com/a/b,5\n"
    )
    for _ in range(2):
        done = recrawl(monkeypatch, capsys, "catalog", "import", str(csv), "--root", str(tmp_path))
        assert done.returncode == 0, done.stderr
    table = pq.read_table(tmp_path / "pages" / "catalog.parquet").to_pylist()
    assert [(r["url"], r["value"], r["group"]) for r in table] == [
        ("http://example.com/a/b", 5.0, "example.com")
    ]


def test_catalog_import_rejects_bad_urls_by_row(tmp_path):
    """Through ``python -m flows.cli``: the entry point's exit code and stderr."""
    csv = tmp_path / "c.csv"
    csv.write_text("url\nhttp://ok.test/\nftp://nope.test/x\n")
    done = run("catalog", "import", str(csv), "--root", str(tmp_path), cwd=None)
    assert done.returncode == 2
    assert "row 1" in done.stderr and "ftp://nope.test/x" in done.stderr
    assert not (tmp_path / "pages" / "catalog.parquet").exists()


def test_plan_writes_a_plan_within_budget(tmp_path, monkeypatch, capsys):
    import pandas as pd

    root = tmp_path / "d"
    args = ("synthetic", "--root", str(root), "--pages", "600", "--cycles", "3")
    assert recrawl(monkeypatch, capsys, *args).returncode == 0
    args = ("plan", "--root", str(root), "--budget", "300", "--name", "try-1")
    done = recrawl(monkeypatch, capsys, *args)
    assert done.returncode == 0, done.stderr
    assert "expected_cost_per_change" in done.stdout and "plan of cycle 3" in done.stdout
    assert not (root / "plans" / "cycle=3.parquet").exists()  # a cycle's own plan: untouched
    plan = pd.read_parquet(root / "plans" / "adhoc" / "try-1.parquet")
    assert 0 < plan["cost"].sum() <= 300
    assert set(plan["reason"]) <= {"due", "discovery", "re-estimation", "verification", "ahead"}
    assert plan["url_id"].is_unique
    # the periodicity detector is off unless asked for, and runs when it is
    counted = [line.split() for line in done.stdout.splitlines() if "periodic_pages" in line]
    assert counted == [["periodic_pages", "0.000"]]
    import tasks.cycle.planning as planning
    from models.estimation.periodic import DEFAULT_RULE

    rules = []
    detector = planning.periodic_outlook

    def spy(con, url_ids, cycle_id, rule, cycle_days=1.0):
        rules.append(rule)
        return detector(con, url_ids, cycle_id, rule, cycle_days)

    monkeypatch.setattr(planning, "periodic_outlook", spy)
    args = ("plan", "--root", str(root), "--budget", "300", "--name", "try-2", "--periodic")
    done = recrawl(monkeypatch, capsys, *args)
    assert done.returncode == 0, done.stderr
    assert rules == [DEFAULT_RULE]


def test_synthetic_never_replaces_a_folder_it_did_not_write(tmp_path, monkeypatch, capsys):
    real = tmp_path / "data"
    (real / "pages").mkdir(parents=True)
    (real / "pages" / "catalog.parquet").write_bytes(b"a user's catalog")
    done = recrawl(
        monkeypatch, capsys, "synthetic", "--root", str(real), "--pages", "300", "--cycles", "2"
    )
    assert done.returncode == 2 and "holds files that no synthetic run wrote" in done.stderr
    assert (real / "pages" / "catalog.parquet").read_bytes() == b"a user's catalog"
    again = tmp_path / "synth"
    for _ in range(2):  # its own output it replaces
        args = ("synthetic", "--root", str(again), "--pages", "300", "--cycles", "2")
        done = recrawl(monkeypatch, capsys, *args)
        assert done.returncode == 0, done.stderr
