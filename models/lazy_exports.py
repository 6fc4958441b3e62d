"""A wing's public face, imported on first use: ``from models.allocation import allocate``.

Each wing's ``__init__.py`` names its public face (``__all__``) and where each name lives;
the module behind a name is imported only when the name is first read (PEP 562), so
importing one light module of a wing (the command line reads ``prior_names`` without
scipy) never imports the whole wing, and a wing's own modules never import its
``__init__`` (the layout test would see a circle).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, faces: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose names live in ``faces``.

    ``faces`` maps each public name to its module, relative to the package
    (``{"allocate": "allocate"}`` is ``models.allocation.allocate.allocate``).
    """

    def __getattr__(name: str) -> Any:  # noqa: N807 (the module hook's own name)
        module = faces.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(faces)

    return __getattr__, __dir__
