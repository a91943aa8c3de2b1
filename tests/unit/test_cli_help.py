"""Every ``opsctl`` help page reads as plain text: no docstring markup reaches a terminal."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from durable_ops.cli import build_parser, main, plain

# What RST or Markdown leaves in text meant for people: ``code``, `code`, :role:`x`,
# **bold** and a literal block's "::".
MARKUP = re.compile(r"`[^`\n]*`|:[a-z]+:`|\*\*[^*\n]+\*\*|::\s*$", re.MULTILINE)


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """Every command line that has a help page: opsctl itself and each subcommand, nested."""
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(build_parser()))


def test_the_markup_pattern_finds_what_it_looks_for() -> None:
    for marked in ("``opsctl``", "the `opsctl up` one", ":func:`x`", "**bold**", "Example::"):
        assert MARKUP.search(marked), marked
    assert MARKUP.search("opsctl up, 127.0.0.1:50051 (default: 3600)") is None


def test_plain_drops_backquotes_only() -> None:
    assert plain("``opsctl``: run `opsctl up`") == "opsctl: run opsctl up"


def test_every_command_is_walked() -> None:
    assert {("operations", "prune"), ("users", "set-plan"), ("host-store", "show")} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: " ".join(("opsctl", *command)))
def test_help_has_no_markup(command: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert shown.startswith("usage: opsctl")
    assert MARKUP.search(shown) is None, shown
