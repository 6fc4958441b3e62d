"""The floor plan's rules, checked on the source: no import circle, no forbidden arrow.

Every ``import`` and ``from ... import`` of the production packages is read with ``ast``,
wherever it sits (module level, inside a function, under ``TYPE_CHECKING``): a lazy
import is still an arrow, and a circle broken only by laziness is still a circle.

The rules (the README's "Wings and their rules"):

- ``models`` is pure: it never imports Prefect, httpx, DuckDB, aiohttp, ``tasks``,
  ``flows`` or ``sandbox``.
- ``tasks`` never imports ``flows`` or ``sandbox``.
- ``sandbox`` imports nothing of the project (it stands for the outside world).
- Only the evaluation wing (``flows.evaluation``) imports ``sandbox``; the production
  flows reach it only through that wing.
- No circle among the project's modules. An edge goes to the module named
  (``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``),
  so a wing's modules that import their own package's ``__init__`` (its public face)
  while it imports them make a circle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("models", "tasks", "flows", "sandbox")
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "models": ("prefect", "httpx", "duckdb", "aiohttp", "tasks", "flows", "sandbox"),
    "tasks": ("flows", "sandbox"),
    "sandbox": ("models", "tasks", "flows"),
}
#: The only modules outside ``sandbox`` that may import it.
SANDBOX_USERS = ("flows.evaluation",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imports_of(path: Path, name: str, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import statement in ``path``."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in modules else target), node.lineno


def graph() -> dict[str, set[str]]:
    modules = project_modules()
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target, _ in imports_of(path, name, modules):
            if target in modules and target != name:
                edges[name].add(target)
    return edges


def test_the_layout_reads_every_production_module():
    modules = project_modules()
    # a renamed wing or a missing package would make the rules below vacuous
    assert {"models.estimation.change_rate", "tasks.fetch.engine", "flows.recrawl"} <= set(modules)
    assert sum(1 for m in modules if m.startswith("models.")) > 30


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_forbidden_arrow(package):
    modules = project_modules()
    wrong = []
    for name, path in modules.items():
        if name.split(".")[0] != package:
            continue
        for target, line in imports_of(path, name, modules):
            top = target.split(".")[0]
            if top in FORBIDDEN[package]:
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_only_the_evaluation_wing_imports_the_sandbox():
    modules = project_modules()
    wrong = []
    for name, path in modules.items():
        if name.split(".")[0] == "sandbox" or name.startswith(SANDBOX_USERS):
            continue
        for target, line in imports_of(path, name, modules):
            if target.split(".")[0] == "sandbox":
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert not wrong, "\n".join(wrong)


def find_circle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle():
    circle = find_circle(graph())
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_the_circle_check_finds_a_circle():
    # the check itself: a two-module circle and a facade circle are found, a chain is not
    assert find_circle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert find_circle({"p": {"p.x"}, "p.x": {"p.y"}, "p.y": {"p"}}) == ["p", "p.x", "p.y", "p"]
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def wings() -> list[str]:
    """Every sub-package of models, tasks and flows (a wing)."""
    return sorted(
        module_name(init)
        for package in ("models", "tasks", "flows")
        for init in (REPO / package).glob("*/__init__.py")
    )


@pytest.mark.parametrize("wing", wings())
def test_each_wing_names_its_public_face(wing):
    import importlib

    module = importlib.import_module(wing)
    assert (module.__doc__ or "").strip(), f"{wing}/__init__.py says what lives there"
    assert module.__all__, f"{wing} names its public face"
    for name in module.__all__:
        assert getattr(module, name) is not None  # each name resolves to its module's object


def test_a_wing_module_imports_alone_without_its_wing():
    # the command line reads the prior names without scipy: the wing's face is lazy
    import subprocess
    import sys

    code = (
        "import sys; import models.estimation.prior_names; "
        "assert 'scipy' not in sys.modules, 'the wing imported its whole face'; "
        "assert 'models.estimation.change_rate' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_nothing_outside_tests_imports_tests():
    # benchmarks and production code share helpers through the wings, never through tests/
    modules = project_modules()
    paths = [*modules.values(), *sorted((REPO / "benchmarks").rglob("*.py"))]
    wrong = []
    for path in paths:
        name = module_name(path)
        for target, line in imports_of(path, name, modules):
            if target.split(".")[0] == "tests":
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert not wrong, "\n".join(wrong)
