"""``prior`` reaches the estimator from the plan and recrawl flows and the command line,
and the plan, the cycle report and the commands' output name the prior used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from flows.plan import plan_cycle_task, plan_flow, summary_path
from flows.recrawl import recrawl_flow, report_cycle_task
from tests.flows.conftest import BOOTSTRAP, FAST_FETCH, START, import_catalog
from tests.tasks.cycle.test_estimation_robust import stale_first_cycle

BREAK_MIXTURE = (
    "import models.estimation.mixture_prior as m\n"
    "def broken(*a, **k):\n"
    "    raise FloatingPointError('broken on purpose')\n"
    "m.fit_mixture_prior = broken\n"
    "from flows.cli import main\n"
    "raise SystemExit(main(sys.argv[1:]))\n"
)


def cli(*args: str, broken_mixture: bool = False) -> subprocess.CompletedProcess[str]:
    command = ["-c", "import sys\n" + BREAK_MIXTURE] if broken_mixture else ["-m", "flows.cli"]
    return subprocess.run([sys.executable, *command, *args], capture_output=True, text=True)


def test_plan_and_report_task_bodies_use_and_name_the_prior(tmp_path):
    """The issue's catalog (every Last-Modified 400 days old) after its first cycle."""
    root = str(tmp_path)
    stale_first_cycle(root, 400)
    for prior in ("mixture", "empirical", "none"):
        planned = plan_cycle_task.fn(root, 1, 20.0, prior=prior, adhoc_name=f"p-{prior}")
        assert planned["prior"] == f"prior: {prior}"
        assert json.loads(summary_path(planned["path"]).read_text())["prior"] == planned["prior"]
    report = report_cycle_task.fn(root, 0, planned["path"], "credits", 0, None, "none")
    assert "| rate estimates | prior: none |" in Path(report["report"]).read_text()


def test_the_commands_take_prior_and_say_which_was_used(tmp_path):
    root = tmp_path / "d"
    stale_first_cycle(root, 400)
    done = cli("estimate", "--root", str(root))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "prior: mixture"
    done = cli("plan", "--root", str(root), "--budget", "20", "--prior", "empirical")
    assert done.returncode == 0, done.stderr
    assert "prior: empirical" in done.stdout.splitlines()
    # a prior that fails at run time: a weaker one, named, and no traceback
    done = cli("plan", "--root", str(root), "--budget", "20", broken_mixture=True)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert (
        "prior: empirical (fallback: mixture prior could not be fitted (broken on purpose))"
        in done.stdout.splitlines()
    )
    bad = cli("plan", "--root", str(root), "--budget", "20", "--prior", "gamma")
    assert bad.returncode == 2 and "invalid choice: 'gamma'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_the_flows_pass_prior_to_plan_and_report(prefect_server, sandbox_web, tmp_path):
    root = str(tmp_path)
    urls = import_catalog(root, sandbox_web)
    first = recrawl_flow(
        root=root,
        budget=len(urls),
        at=START,
        fetch=FAST_FETCH,
        slices=BOOTSTRAP,
        prior="empirical",
    )
    assert first["status"] == "committed"
    plan = json.loads((tmp_path / "plans" / "cycle=0.summary.json").read_text())
    assert plan["prior"] == "prior: empirical"
    summary = (tmp_path / "reports" / "cycle=0" / "summary.md").read_text()
    assert "| rate estimates | prior: empirical |" in summary
    adhoc = plan_flow(root=root, budget=10, prior="none")
    assert adhoc["prior"] == "prior: none"
