"""``rewyn-kernel mcp``'s options: each server option declared once, on its ServerOptions field,
and the command's flags, defaults and errors derived from it (needs no MCP SDK)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from rewyn_kernel.mcp.command import add_parser, options_from
from rewyn_kernel.mcp.options import SANDBOX_OPTIONS, ServerOptions
from rewyn_kernel.settings import OPTIONS
from rewyn_kernel.tools import RiskLevel

TRANSPORT = {"--http", "--token"}
"""The command's own options, which are not the server's (how it is reached)."""


def parser() -> argparse.ArgumentParser:
    return add_parser(argparse.ArgumentParser().add_subparsers())


def test_each_server_option_is_a_field_with_its_flag_and_nothing_else_is_declared() -> None:
    fields = [item for item in dataclasses.fields(ServerOptions) if item.name != "settings"]
    assert all("flag" in item.metadata for item in fields), "give the new field a flag"
    server_flags = {item.metadata["flag"].flag for item in fields}
    sandbox_flags = {OPTIONS[name].flag for name in SANDBOX_OPTIONS}
    sandbox_flags |= {"--allow-host", "--deny-host"}  # (entries of --network's allow-list)
    flags = {flag for action in parser()._actions for flag in action.option_strings}
    assert flags - {"-h", "--help"} == server_flags | sandbox_flags | TRANSPORT
    assert not server_flags & sandbox_flags


def test_the_defaults_are_the_fields_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rewyn_kernel.mcp.command.choose", pytest.fail)  # (a provider given)
    command = parser()
    options, said = options_from(command.parse_args(["--provider", "subprocess"]), command)
    assert options == ServerOptions(settings=options.settings)
    assert said == "subprocess (--provider subprocess)"


def test_each_option_reaches_its_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    command = parser()
    argv = [
        *("--provider", "subprocess", "--max-sessions", "3", "--idle-ttl", "0"),
        *("--max-output-chars", "4000", "--max-risk", "low", "--approve-above", "none"),
        *("--run-log", "calls.jsonl", "--undo-depth", "2", "--approve-all"),
    ]
    options, _ = options_from(command.parse_args(argv), command)
    assert dataclasses.replace(options, settings=ServerOptions().settings) == ServerOptions(
        max_sessions=3,
        idle_ttl=None,  # (0: never)
        max_output_chars=4000,
        deny_above=RiskLevel.LOW,
        approve_above=None,
        approve_all=True,
        run_log=tmp_path / "calls.jsonl",
        undo_depth=2,
    )
    assert options.settings.run_log is None  # (the server's run log is not the kernel's)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-sessions", "0"], "--max-sessions must be at least 1"),
        (["--idle-ttl", "-1"], "--idle-ttl must be positive"),
        (["--max-output-chars", "10"], "--max-output-chars must be at least 2000"),
        (["--max-risk", "low"], "--approve-above (medium) is above --max-risk (low)"),
        (["--undo-depth", "99"], "--undo-depth must be between 0 and"),
    ],
)
def test_a_bad_option_is_named_by_its_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    command = parser()
    with pytest.raises(SystemExit):
        options_from(command.parse_args(["--provider", "subprocess", *argv]), command)
    assert message in capsys.readouterr().err
