"""Who imports whom among rocketq's packages, derived from the code.

``docs/architecture.md`` carries the same map between ``<!-- package-map -->`` markers; the unit test
``tests/unit/test_architecture.py`` fails when the two disagree. Run this module to print the map
as the document writes it::

    python tests/_support/package_map.py

A *package* is a directory under ``src/rocketq`` (``store``, ``broker`` …) or a top-level module
(``errors``, ``message`` …); ``broker.pop`` counts as ``broker``, ``proxy.v2`` as ``proxy``.
Every ``import`` counts, at module level or inside a function (a lazy import still loads the
package when it runs), except those under ``if TYPE_CHECKING:``, which load nothing.
"""

from __future__ import annotations

import ast
import pathlib
import sys

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "rocketq"
DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
BEGIN = "<!-- package-map -->"
END = "<!-- /package-map -->"


def package_of(module: str) -> str | None:
    """``rocketq.store.commitlog`` -> ``store``; ``rocketq`` itself -> None."""
    parts = module.split(".")
    if parts[0] != "rocketq" or len(parts) < 2:
        return None
    return parts[1]


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop] if drop else base
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            # ``from rocketq import store`` names a package in the alias
            if target == "rocketq":
                found.update(f"rocketq.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def derive_map() -> dict[str, set[str]]:
    """Package -> the other rocketq packages it imports."""
    result: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        own = package_of(module) or "__init__"
        if own == "__init__":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        deps = result.setdefault(own, set())
        for target in imports_of(tree, module, path.name == "__init__.py"):
            other = package_of(target)
            if other is None or other == own:
                continue
            if (SRC / other).is_dir() or (SRC / f"{other}.py").is_file():
                deps.add(other)
    return result


def render(mapping: dict[str, set[str]]) -> str:
    """One line per package: ``name  → dep, dep`` in alphabetical order."""
    width = max(len(name) for name in mapping)
    lines = []
    for name, deps in sorted(mapping.items()):
        listed = ", ".join(sorted(deps)) if deps else "(nothing)"
        lines.append(f"{name:<{width}}  → {listed}")
    return "\n".join(lines)


def documented_map(text: str) -> dict[str, set[str]]:
    """Parse the block between the markers of ``docs/architecture.md``."""
    start = text.index(BEGIN) + len(BEGIN)
    block = text[start : text.index(END)]
    mapping: dict[str, set[str]] = {}
    for line in block.splitlines():
        if "→" not in line:
            continue
        name, deps = line.split("→", 1)
        items = deps.strip()
        mapping[name.strip()] = set() if items == "(nothing)" else {d.strip() for d in items.split(",")}
    return mapping


if __name__ == "__main__":
    sys.stdout.write(render(derive_map()) + "\n")
