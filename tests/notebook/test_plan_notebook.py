"""The example notebook, executed by nbclient in a real Jupyter kernel of this virtualenv
without ipywidgets (issue 15, item 4): no cell fails, DataFrames and a plot come out.

Inside a Jupyter kernel DuckDB's Python client refuses any progress-bar setting when
ipywidgets is missing; every call that opened the store failed there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).parents[2] / "examples" / "plan_in_a_notebook.ipynb"
KERNEL = "recrawl-test"
#: Runs the kernel with ipywidgets unimportable, whatever is installed, then starts it as
#: ``python -m ipykernel_launcher`` does.
LAUNCHER = """\
import importlib.abc
import sys


class NoWidgets(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "ipywidgets":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoWidgets())
from ipykernel import kernelapp

kernelapp.launch_new_instance()
"""
#: Cells run in the same kernel before the notebook's: they check the kernel is this
#: virtualenv's Python, without ipywidgets, in a Jupyter kernel.
PREAMBLE = """\
import sys

try:
    import ipywidgets  # noqa: F401
except ImportError:
    pass
else:
    raise AssertionError("ipywidgets is importable in the kernel")
print(sys.executable)
print(type(get_ipython()).__name__)
"""
#: And after: both DuckDB connection helpers of the store work in the kernel.
POSTAMBLE = """\
import tempfile
from pathlib import Path

from tasks.store.history import commit_connection, connect

spill = Path(tempfile.mkdtemp()) / "spill"
for con in (connect(), commit_connection(spill, "64MB")):
    print(con.sql("SELECT current_setting('enable_progress_bar') AS bar, 42 AS answer").df())
"""


@pytest.fixture
def kernel_manager(tmp_path):
    """A kernel of ``sys.executable`` (this virtualenv) from a kernel spec in a temp dir."""
    spec_dir = tmp_path / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    kernel_tmp = tmp_path / "kernel-tmp"
    kernel_tmp.mkdir()
    (spec_dir / "launch.py").write_text(LAUNCHER)
    spec = {
        "argv": [sys.executable, str(spec_dir / "launch.py"), "-f", "{connection_file}"],
        "display_name": KERNEL,
        "language": "python",
        "env": {  # MPLBACKEND: a Jupyter kernel's default (the environment may say Agg)
            "MPLBACKEND": "module://matplotlib_inline.backend_inline",
            "TMPDIR": str(kernel_tmp),  # the notebook's sample store, removed with tmp_path
        },
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    specs = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    return KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)


def outputs(cell) -> list[dict]:
    return [dict(o) for o in cell.get("outputs", [])]


def test_the_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the notebook has no code"
    assert all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.slow
def test_the_notebook_runs_in_a_kernel_without_ipywidgets(kernel_manager, tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    first, last = nbformat.v4.new_code_cell(PREAMBLE), nbformat.v4.new_code_cell(POSTAMBLE)
    nb.cells = [first, *nb.cells, last]
    client = NotebookClient(
        nb,
        km=kernel_manager,
        timeout=600,  # a cell's limit, not a measurement: the store is built in the first
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},  # as Jupyter runs it
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on an error

    printed = "".join(o.get("text", "") for o in outputs(first))
    assert printed.splitlines() == [sys.executable, "ZMQInteractiveShell"]

    every = [o for c in nb.cells for o in outputs(c)]
    assert not [o for o in every if o["output_type"] == "error"]
    html = [o["data"]["text/html"] for o in every if "text/html" in o.get("data", {})]
    assert any("<table" in h and "http://" in h for h in html), "no DataFrame with URLs"
    assert any("image/png" in o.get("data", {}) for o in every), "no plot"

    helpers = "".join(o.get("text", "") for o in outputs(last))
    assert helpers.count("False") == 2 and helpers.count("42") == 2, helpers
