"""SPEC §1: an ``opsctl`` usage error exits 2 with one line on stderr, for every subcommand;
``--help`` still prints the whole page."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from durable_ops.cli import EXIT_USAGE, OneLineParser, build_parser, main


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == EXIT_USAGE
    shown = capsys.readouterr()
    assert shown.out == ""
    assert shown.err.endswith("\n")
    assert shown.err.count("\n") == 1, shown.err  # one line: no usage block
    assert "usage:" not in shown.err
    return shown.err.rstrip("\n")


def test_every_subcommand_parser_answers_a_usage_error_in_one_line() -> None:
    parsers = list(_parsers(build_parser()))
    assert len(parsers) > 20
    assert all(isinstance(parser, OneLineParser) for parser in parsers)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["users", "set-plan", "bogus", "platinum"],
            "opsctl users set-plan: argument plan: invalid choice: 'platinum'"
            " (choose from 'free', 'pro')",
        ),
        (
            ["operations", "list", "--older-than", "0s"],
            "opsctl operations list: argument --older-than: '0s' is not a positive duration",
        ),
        (["token"], "opsctl token: the following arguments are required: --user"),
        (["tasks", "pause"], "opsctl tasks pause: the following arguments are required: TYPE"),
        ([], "opsctl: the following arguments are required: COMMAND"),
        (
            ["keys", "issue", "Bad Name"],
            "opsctl keys issue: argument label: 'Bad Name' is not a key label: use 1-48"
            " lowercase letters, digits, '-' or '_'",
        ),
        # What a parser does not know, it names itself as the one refusing it; argparse
        # leaves it to the top parser, whose line said only `opsctl: unrecognized …`.
        (
            ["operations", "list", "--bogus"],
            "opsctl operations list: unrecognized arguments: --bogus",
        ),
        (
            ["operations", "cancel", "--limit", "1"],
            "opsctl operations cancel: unrecognized arguments: --limit",
        ),
        (["operations", "--bogus", "list"], "opsctl operations: unrecognized arguments: --bogus"),
        (
            ["users", "set-plan", "alice", "pro", "gold"],
            "opsctl users set-plan: unrecognized arguments: gold",
        ),
        (["migrate", "--bogus"], "opsctl migrate: unrecognized arguments: --bogus"),
        (["--bogus", "migrate"], "opsctl: unrecognized arguments: --bogus"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_command(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _usage_error(argv, capsys) == line


@pytest.mark.parametrize(
    "argv",
    [
        ["operations", "list", "--state", "nope"],
        ["operations", "cancel", "--older-than", "soon"],
        ["ai", "maybe"],
        ["keys", "rotate", "nobody"],
        ["console", "link", "--bogus"],
        ["nope"],
        ["serve", "everything"],
        ["token", "--user", "u", "--ttl", "soon"],
    ],
)
def test_usage_errors_of_other_subcommands_are_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _usage_error(argv, capsys).startswith("opsctl")


def test_every_subcommand_names_itself_for_an_argument_it_does_not_know(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for parser in _parsers(build_parser()):
        if parser.prog == "opsctl":
            continue
        line = _usage_error([*parser.prog.split()[1:], "--no-such-option"], capsys)
        assert line.startswith(f"{parser.prog}: "), line


def test_help_is_still_the_whole_page(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["users", "set-plan", "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert shown.startswith("usage: opsctl users set-plan")
    assert "{free,pro}" in shown
