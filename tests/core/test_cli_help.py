"""`bot --help` says only what this version does: commands not built say so, and running them
is one line with exit 3 (never a flag that promises work, like `consolidate --now` once did)."""

from __future__ import annotations

import argparse

import pytest

from bot import cli


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli._parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_command_has_its_line_in_the_one_help_table() -> None:
    assert set(_subcommands()) <= set(cli.HELP)
    assert set(cli.NOT_BUILT) <= set(_subcommands())


def test_a_command_not_built_says_so_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    """Empty today (every contract command is built); kept so a reserved name stays honest."""
    for name, line in cli.NOT_BUILT.items():
        help_text = _subcommands()[name].format_help()
        assert "not in this version" in help_text and "not in this version" in cli.HELP[name]
        assert cli.main([name]) == cli.EXIT_UNAVAILABLE
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"bot: {line}"]


@pytest.mark.parametrize(
    "name", ["chat", "slack", "discord", "doctor", "orders-demo", "consolidate", "memory"]
)
def test_built_commands_do_not_say_not_built(name: str) -> None:
    assert name not in cli.NOT_BUILT
    assert "not in this version" not in cli.HELP[name]
