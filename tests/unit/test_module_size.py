"""Hand-written modules stay small enough to read in one sitting: at most 600 lines, unless the
module's opening docstring has a line starting with ``One idea:`` that names the single idea the
whole file serves (a file format, a language, a table). Generated code (the gRPC stubs under
``rocketq/proxy/v2``) is not counted.

``PENDING_SPLIT`` lists the modules over the limit that are known to hold more than one idea and
are being split. It may only shrink: a listed module that is back under the limit, or that gained
a ``One idea:`` line, fails the test until it is taken off the list."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MAX_LINES = 600
ONE_IDEA = "One idea:"

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "rocketq"
GENERATED = PACKAGE / "proxy" / "v2"

# Over the limit and more than one idea; each is being split. Remove an entry once its module is
# split (the test fails while a module listed here is within the limit or has a One idea: line).
PENDING_SPLIT: set[str] = set()


def hand_written_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if GENERATED not in p.parents)


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def says_one_idea(path: Path) -> bool:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=True) or ""
    return any(line.startswith(ONE_IDEA) and line[len(ONE_IDEA) :].strip() for line in doc.splitlines())


def name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_the_walk_finds_the_package_and_skips_generated_stubs() -> None:
    names = {name(p) for p in hand_written_modules()}
    assert "remoting/connection.py" in names
    assert not any(n.startswith("proxy/v2/") for n in names)
    assert names >= PENDING_SPLIT, f"listed modules that do not exist: {sorted(PENDING_SPLIT - names)}"


def test_long_modules_say_which_one_idea_they_are() -> None:
    too_long = [
        f"{name(p)}: {line_count(p)} lines"
        for p in hand_written_modules()
        if name(p) not in PENDING_SPLIT and line_count(p) > MAX_LINES and not says_one_idea(p)
    ]
    assert not too_long, (
        f"modules over {MAX_LINES} lines without a '{ONE_IDEA}' line in their opening docstring "
        f"(split them, or say which one idea they are): {too_long}"
    )


@pytest.mark.parametrize("module", sorted(PENDING_SPLIT))
def test_pending_split_list_only_shrinks(module: str) -> None:
    path = PACKAGE / module
    assert path.is_file(), f"{module} is gone: take it off PENDING_SPLIT"
    assert line_count(path) > MAX_LINES, f"{module} is within {MAX_LINES} lines: take it off PENDING_SPLIT"
    assert not says_one_idea(path), f"{module} says its one idea: take it off PENDING_SPLIT"


def test_the_one_idea_line_is_read_from_the_opening_docstring(tmp_path: Path) -> None:
    said = tmp_path / "said.py"
    said.write_text('"""A format.\n\nOne idea: the file format of X.\n"""\n\nx = 1\n', encoding="utf-8")
    empty = tmp_path / "empty.py"
    empty.write_text('"""A format.\n\nOne idea:\n"""\n', encoding="utf-8")
    later = tmp_path / "later.py"
    later.write_text('"""A format."""\n\n# One idea: not in the docstring\nx = 1\n', encoding="utf-8")
    assert says_one_idea(said)
    assert not says_one_idea(empty)
    assert not says_one_idea(later)
