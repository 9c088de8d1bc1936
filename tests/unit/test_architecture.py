"""The package map of ``docs/architecture.md`` is the code's: derived from the imports, compared
line by line, and the import rules the document states hold."""

from __future__ import annotations

import ast

from _support.package_map import DOC, SRC, derive_map, documented_map, imports_of, render

# rules of docs/architecture.md: these packages never import those
FORBIDDEN = {
    "client": {"broker", "store", "namesrv", "proxy", "spark", "testing", "cli"},
    "protocol": {"broker", "store", "namesrv", "client", "proxy", "spark", "testing", "remoting", "cli"},
    "remoting": {"broker", "store", "namesrv", "client", "proxy", "spark", "testing", "cli"},
    "store": {"broker", "namesrv", "client", "proxy", "spark", "testing", "remoting", "cli"},
    "namesrv": {"broker", "store", "client", "proxy", "spark", "testing", "cli"},
    "broker": {"client", "proxy", "spark", "testing", "namesrv", "cli"},
    "acl": {"broker", "store", "namesrv", "client", "proxy", "spark", "testing", "cli"},
    "errors": {"broker", "store", "namesrv", "client", "proxy", "spark", "testing", "remoting", "cli"},
}


def test_documented_package_map_is_the_code_s() -> None:
    derived = derive_map()
    documented = documented_map(DOC.read_text(encoding="utf-8"))
    assert documented == derived, (
        "docs/architecture.md's package map disagrees with the code; the code's map is:\n" + render(derived)
    )


def test_import_rules_hold() -> None:
    derived = derive_map()
    broken = {pkg: sorted(derived.get(pkg, set()) & banned) for pkg, banned in FORBIDDEN.items()}
    assert {pkg: deps for pkg, deps in broken.items() if deps} == {}


def test_every_package_is_on_the_map() -> None:
    names = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    names |= {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    assert names == set(derive_map())


def test_map_derivation_sees_lazy_and_relative_imports() -> None:
    """The deriver itself: an import inside a function counts, one under TYPE_CHECKING does not."""
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from ..store import commitlog\n"
        "if TYPE_CHECKING:\n    from rocketq.broker import server\n"
        "def f():\n    import rocketq.spark.batch\n"
    )
    found = imports_of(tree, "rocketq.client.aio", is_package=False)
    assert "rocketq.store" in found
    assert "rocketq.spark.batch" in found
    assert "rocketq.client" in found
    assert not any(name.startswith("rocketq.broker") for name in found)
