"""Package exports imported on first use (PEP 562), for the packages whose ``__init__`` should
cost nothing until a name is asked for.

``__getattr__, __dir__ = lazy_exports(__name__, {"Name": "package.module", ...})`` at the end of
a package's ``__init__``: ``package.Name`` (or ``from package import Name``) imports
``package.module`` the first time and keeps the value in the package's namespace, so later
lookups never reach ``__getattr__``; an unknown name raises AttributeError as usual; ``dir()``
lists the exports before they are loaded.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    module_name: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``module_name`` (already in sys.modules)
    that import each name of ``exports`` (name → module) on first use."""
    namespace = vars(sys.modules[module_name])

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
