"""The production recrawl flow takes no sandbox and imports nothing of the evaluation wing.

Ground truth exists only on the sandbox; the harness (``flows.evaluation``) adds it to a
cycle's report after the flow ran. The production flows (``flows.*`` but the wing itself)
never import the wing, lazily or not; ``flows.cli`` may, inside the functions of the
demo, backtest and sandbox commands only, so ``recrawl run`` never loads it.
"""

from __future__ import annotations

import ast
import inspect

from prefect.utilities.callables import parameter_schema

from flows.recrawl import recrawl_flow, report_cycle_task
from tests.test_layout import REPO, imports_of, project_modules

WING = "flows.evaluation"
#: May import the wing, but only inside functions (commands that run the harness).
LAZY_USERS = ("flows.cli",)


def _is_wing(target: str) -> bool:
    return target == WING or target.startswith(WING + ".")


def test_the_recrawl_flow_has_no_sandbox_parameter():
    assert "sandbox" not in parameter_schema(recrawl_flow).properties
    assert "sandbox" not in inspect.signature(report_cycle_task.fn).parameters


def test_no_production_flow_imports_the_evaluation_wing():
    modules = project_modules()
    production = [m for m in modules if m.startswith("flows.") and not _is_wing(m)]
    assert "flows.recrawl" in production and "flows.cli" in production  # not vacuous
    wrong = []
    for name in production:
        if name in LAZY_USERS:
            continue
        for target, line in imports_of(modules[name], name, modules):
            if _is_wing(target):
                wrong.append(f"{modules[name].relative_to(REPO)}:{line} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_the_cli_imports_the_evaluation_wing_only_inside_functions():
    modules = project_modules()
    path = modules["flows.cli"]
    tree = ast.parse(path.read_text(), filename=str(path))
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside |= {id(n) for n in ast.walk(node) if n is not node}
    module_level = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        and id(node) not in inside
        and any(
            _is_wing(alias.name if isinstance(node, ast.Import) else (node.module or ""))
            for alias in node.names
        )
    ]
    assert not module_level, f"{path.relative_to(REPO)} imports {WING} at lines {module_level}"
