"""Every option of every ``rocketq`` subcommand explains itself in ``--help``, default included."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from rocketq.cli import build_parser


def _options(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _options(child, (*path, name))
        elif not isinstance(action, argparse._HelpAction):
            yield " ".join((*path, "/".join(action.option_strings) or action.dest)), action


def _all_options() -> list[tuple[str, argparse.Action]]:
    return list(_options(build_parser(), ("rocketq",)))


def test_the_walk_reaches_every_subcommand() -> None:
    names = {name.rsplit(" ", 1)[0] for name, _ in _all_options()}
    for command in ("rocketq serve", "rocketq namesrv", "rocketq broker", "rocketq demo", "rocketq proxy"):
        assert command in names
    assert "rocketq admin updateTopic" in names and "rocketq bench consume" in names
    assert "rocketq spark export" in names


def test_every_option_has_help_text_naming_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)  # the admin and bench defaults read it
    missing: list[str] = []
    no_default: list[str] = []
    for name, action in _all_options():
        if not action.help or action.help == argparse.SUPPRESS:
            missing.append(name)
            continue
        default = action.default
        if default is None or default is False or default == argparse.SUPPRESS:
            continue
        rendered = action.help % {**vars(action), "prog": "rocketq"}
        if str(default) not in rendered:
            no_default.append(f"{name} (default {default!r}): {rendered!r}")
    assert not missing, f"options without help text: {missing}"
    assert not no_default, f"help text without the default: {no_default}"


def test_serve_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["serve", "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for text in (
        "default rocketq-data",
        "default 9876",
        "default 10911",
        "default broker-a",
        "default ASYNC_FLUSH",
    ):
        assert text in out
