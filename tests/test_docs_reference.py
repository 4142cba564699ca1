"""The reference pages are generated from the code (docs/_ext/rewyn_docs.py): every setting, every
command and option, every field of an event, a run log line, a cell's record and ``isolation``
is on its page, with a description, so a page cannot drift from the code nor have a hole."""

from __future__ import annotations

import argparse
import importlib
import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from rewyn_kernel.cli import build_parser
from rewyn_kernel.kernel import record
from rewyn_kernel.runtime import events
from rewyn_kernel.runtime.sandbox import Isolation, SandboxResult, SandboxSpec, create
from rewyn_kernel.settings import OPTIONS, SETTINGS, KernelSettings, Surface
from rewyn_kernel.tools import PermissionDecision

ROOT = Path(__file__).resolve().parents[1]
EXT = ROOT / "docs" / "_ext"
sys.path.insert(0, str(EXT))
docs: Any = importlib.import_module("rewyn_docs")

RENDERED_MODELS: list[type[BaseModel]] = [
    events.SandboxEvent,
    events.ToolCall,
    events.ToolResult,
    Isolation,
    SandboxResult,
    SandboxSpec,
    PermissionDecision,
]
"""The models the pages render with ``rewyn-model`` (python-api, events, isolation)."""


def _models() -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    for model in RENDERED_MODELS:
        for one in [model, *docs.nested_models(model)]:
            if one not in found:
                found.append(one)
    return found


# -- settings ------------------------------------------------------------------------------------


def test_every_setting_is_on_the_settings_page() -> None:
    rows = {row.name: row for row in docs.settings_rows()}
    create_keywords = set(inspect.signature(create).parameters) - {"spec", "provider", "listeners"}
    assert "ipython" not in create_keywords  # (a spec's field that create() does not take)
    assert list(rows) == list(SETTINGS)
    assert set(rows) == set(KernelSettings.model_fields)
    for name, row in rows.items():
        assert row.type, name
        assert row.default, name
        option = OPTIONS.get(name)
        assert row.flag.split(" ")[0] == (option.flag if option else ""), name
        kernel = Surface.KERNEL in SETTINGS[name].surfaces
        assert row.traitlet == (f"SandboxKernel.{name}" if kernel else ""), name
        assert ("SandboxSpec" in row.surfaces) == (name in SandboxSpec.model_fields), name
        assert ("create()" in row.surfaces) == (name in create_keywords), name


def test_a_setting_without_a_description_fails_here() -> None:
    """A new setting with no description (nor a docstring under it) would leave a hole in the
    settings page and in every command's --help."""
    holes = [row.name for row in docs.settings_rows() if not row.description]
    assert holes == [], f"settings without a description: {holes}"


def test_the_hole_check_can_fail() -> None:
    class Bare(BaseModel):
        undescribed: int = 0

    assert docs.field_description(Bare, "undescribed") == ""


def test_where_the_defaults_differ_both_are_given() -> None:
    rows = {row.name: row for row in docs.settings_rows()}
    assert rows["timeout"].default == "600.0"
    assert rows["timeout"].create_default == "30.0"
    assert rows["ipython"].create_default == "False"
    assert rows["memory_limit_mb"].create_default == ""  # (the same: not said twice)
    assert rows["timeout"].bounds == "> 0, ≤ 604800"
    assert rows["timeout"].create_description.startswith("Seconds one execution may run")


def test_every_surface_has_a_name_and_a_meaning() -> None:
    surfaces = dict(docs.surface_rows())
    assert len(surfaces) == len(Surface) + 2
    assert all(surfaces.values()), surfaces
    assert {member.name for member in Surface} == set(docs.SURFACE_NAMES)


# -- the command line ----------------------------------------------------------------------------


UNDESCRIBED: dict[str, list[str]] = {}
"""Arguments with no help of their own (the command's description says what they are)."""


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser, parsers = build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert parsers == dict(action.choices)  # main dispatches to exactly what --help lists
    return parsers


def test_every_subcommand_and_option_is_on_the_cli_page() -> None:
    parsers = _subcommands()
    top, commands = docs.cli_commands()
    assert [command.name for command in commands] == list(parsers)
    assert list(parsers) == [
        "demo",
        "doctor",
        "install",
        "run",
        "review",
        "mcp",
        "files",
        "grants",
        "packages",
        "agent-token",
    ]
    assert "--version" in " ".join(row.flags for row in top.options)
    for command in commands:
        assert command.summary, command.name
        assert command.usage.startswith("usage: rewyn-kernel "), command.name
        flags = " ".join(row.flags for row in command.options)
        for action in parsers[command.name]._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings or [str(action.metavar or action.dest)]:
                assert option in flags, (command.name, option)
        holes = [row.flags for row in command.options if not row.help]
        assert holes == UNDESCRIBED.get(command.name, []), command.name


def test_a_settings_option_has_its_setting_description_as_help() -> None:
    _, commands = docs.cli_commands()
    [install] = [command for command in commands if command.name == "install"]
    [timeout] = [row for row in install.options if row.flags.startswith("--timeout")]
    assert timeout.group == "kernel settings"
    assert timeout.help.startswith("Seconds a cell may run")
    assert "(default: 600.0)" in timeout.help
    [sys_prefix] = [row for row in install.options if row.flags == "--sys-prefix"]
    assert sys.prefix not in sys_prefix.help  # (the build's own venv is not the reader's)


# -- events, run log lines, records and isolation ------------------------------------------------


@pytest.mark.parametrize("model", _models(), ids=lambda model: model.__name__)
def test_every_field_of_a_rendered_model_has_a_description(model: type[BaseModel]) -> None:
    rows = docs.model_rows(model)
    assert [row.name for row in rows][: len(model.model_fields)] == list(model.model_fields)
    holes = [row.name for row in rows if not row.description]
    assert holes == [], f"{model.__name__}: fields without a description: {holes}"


def test_the_event_page_renders_what_the_event_is_made_of() -> None:
    nested = [model.__name__ for model in docs.nested_models(events.SandboxEvent)]
    assert nested == [
        "Isolation",
        "WorkspaceFiles",
        "NetworkLog",
        "NetworkAttempt",
        "ErrorInfo",
        "OutputSummary",
    ]
    nested = [model.__name__ for model in docs.nested_models(events.ToolCall)]
    assert nested == ["LoggedImage", "LoggedFile"]


def test_the_isolation_page_gives_each_literal_field_its_values() -> None:
    rows = {row.name: row for row in docs.model_rows(Isolation)}
    assert set(rows) == set(Isolation.model_fields)
    assert rows["network"].type == '"isolated" | "filtered" | "allowed" | "not_isolated"'
    assert rows["files"].type == '"isolated" | "open"'
    assert rows["workspace"].type == '"versioned" | "direct" | "read_only" | None'


def test_every_key_of_a_cell_record_is_described() -> None:
    keys = docs.record_keys()
    assert set(keys) == set(docs.RECORD_NOTES), "RECORD_NOTES is out of step with compact_record"
    assert {"id", "ending", "code_hash", "message", "files", "stdout_bytes", "timed_out"} <= set(
        keys
    )
    assert all(row.description for row in docs.record_rows())
    assert set(docs.summary_fields()) == set(record._SUMMARY_FIELDS)


def test_the_events_page_names_the_constants_it_describes() -> None:
    page = (ROOT / "docs" / "reference" / "events.md").read_text()
    for text in (
        events.EVENT_TYPE,
        events.TOOL_CALL_TYPE,
        events.TOOL_RESULT_TYPE,
        record.METADATA_KEY,
        record.EVENT_MIME,
        f"{record.MAX_RECORD_BYTES} bytes",
        f"{record.MAX_FILES_BYTES} bytes",
    ):
        assert text in page, text


# -- what the directives render ------------------------------------------------------------------

PAGE = """\
# All

```{rewyn-cli}
```

```{rewyn-settings}
```

```{rewyn-model} rewyn_kernel.runtime.events.SandboxEvent
:nested:
```

```{rewyn-model} rewyn_kernel.runtime.events.ToolCall
:nested:
```

```{rewyn-model} rewyn_kernel.runtime.events.ToolResult
```

```{rewyn-record}
```
"""


@pytest.mark.timeout(120)
def test_the_directives_render_every_row(tmp_path: Path) -> None:
    """One page with every directive, built as text (a small Sphinx project: about 3 s)."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text(
        f"import sys\nsys.path[:0] = [{str(EXT)!r}, {str(ROOT)!r}]\n"
        'extensions = ["myst_parser", "rewyn_docs"]\n'
        'source_suffix = {".md": "markdown"}\n'
    )
    (source / "index.md").write_text(PAGE)
    argv = [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "text", str(source)]
    done = subprocess.run(
        [*argv, str(tmp_path / "out")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "out" / "index.txt").read_text()
    words = " ".join(text.split())
    for row in docs.settings_rows():  # (its first words: the text builder wraps long paths)
        assert row.name in text
        assert " ".join(row.description.split()[:6]) in words, row.name
    _, commands = docs.cli_commands()
    for command in commands:
        assert f"rewyn-kernel {command.name}" in text
        for option in command.options:
            assert option.flags.split(" ")[0] in text, (command.name, option.flags)
    for model in [events.SandboxEvent, events.ToolCall, events.ToolResult]:
        for one in [model, *docs.nested_models(model)]:
            for name in one.model_fields:
                assert name in text, (one.__name__, name)
    for key in docs.record_keys():
        assert key in text, key
