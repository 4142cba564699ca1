"""Sphinx extension: the reference pages generated from the code (CLI, settings, schemas).

Four directives, each rendering what the code declares, so a page cannot drift from it:

- ``rewyn-cli``: every ``rewyn-kernel`` subcommand, from the real argparse parsers
  (``rewyn_kernel.cli.build_parser``): usage, description, each option with its help and default;
- ``rewyn-settings``: every setting of ``rewyn_kernel.settings`` (``KernelSettings`` and
  ``SETTINGS``): type, defaults, bounds, description, the surfaces that take it, its spellings;
- ``rewyn-model``: a pydantic model's fields as a table (name, type, default, description), and
  the models it is made of (``:nested:``);
- ``rewyn-record``: the compact record a kernel keeps in each cell's metadata.

The rows come from pure functions (``cli_commands``, ``settings_rows``, ``model_rows``,
``record_rows``), which tests/test_docs_reference.py checks without building the site.
The extension also mocks ``ray`` for autodoc, so the Python API page builds without it (Read the
Docs installs the ``docs`` extra, which has no Ray).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
import re
import sys
import types
import typing
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util.docutils import SphinxDirective

MOCKED = ("ray",)
"""Modules autodoc mocks: ``rewyn_kernel.runtime.cluster`` imports Ray, which the docs extra
does not install."""

# -- types, bounds, defaults and descriptions of pydantic fields ---------------------------------


def type_text(annotation: Any) -> str:
    """A field's type as a reader reads it: ``float | None``, ``"none" | "allow"``,
    ``tuple[str, ...]``, a model's class name."""
    if annotation is None or annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(arg) for arg in args)
    if origin is typing.Literal:
        return " | ".join(json.dumps(arg) for arg in args)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"tuple[{type_text(args[0])}, ...]"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_text(arg) for arg in args)}]" if args else name
    if annotation is Any:
        return "Any"
    return str(getattr(annotation, "__name__", annotation))


_BOUND_WORDS = (
    ("gt", "> {}"),
    ("ge", "≥ {}"),
    ("lt", "< {}"),
    ("le", "≤ {}"),
    ("min_length", "length ≥ {}"),
    ("max_length", "length ≤ {}"),
    ("pattern", "matches {}"),
)


def _constraints(annotation: Any) -> list[Any]:
    """The constraint objects inside ``Annotated[...]`` anywhere in ``annotation``."""
    found: list[Any] = []
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        for item in args[1:]:
            found += list(item.metadata) if isinstance(item, FieldInfo) else [item]
        found += _constraints(args[0])
    elif origin in (typing.Union, types.UnionType):
        for arg in args:
            found += _constraints(arg)
    return found


def bounds_text(field: FieldInfo) -> str:
    """The bounds a field's value must keep (``> 0, ≤ 604800``), or ''."""
    found = [*field.metadata, *_constraints(field.annotation)]
    words = []
    for name, form in _BOUND_WORDS:
        for item in found:
            value = getattr(item, name, None)
            if value is not None:
                words.append(form.format(value))
    return ", ".join(dict.fromkeys(words))


def value_text(value: Any) -> str:
    """A default as Python spells it (the tuples of a setting as tuples)."""
    if isinstance(value, Path):
        return repr(str(value))
    if isinstance(value, str | int | float | bool | tuple | dict) or value is None:
        return repr(value)
    return str(value)


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    return value_text(field.get_default(call_default_factory=True))


@functools.cache
def attribute_docs(module: str) -> dict[tuple[str, str], str]:
    """The docstrings written under class attributes in ``module`` (a field with no
    ``description`` may have one), by (class name, attribute)."""
    from sphinx.pycode import ModuleAnalyzer

    analyzer = ModuleAnalyzer.for_module(module)
    return {key: " ".join(lines).strip() for key, lines in analyzer.find_attr_docs().items()}


def field_description(model: type[BaseModel], name: str) -> str:
    """A field's ``description``, else the docstring written under it (in any base class)."""
    field = model.model_fields[name]
    if field.description:
        return field.description
    for cls in model.__mro__:
        if name in getattr(cls, "__annotations__", {}):
            text = attribute_docs(cls.__module__).get((cls.__qualname__, name), "")
            if text:
                return text
    return ""


@dataclass(frozen=True)
class FieldRow:
    name: str
    type: str
    default: str
    bounds: str
    description: str


def model_rows(model: type[BaseModel]) -> list[FieldRow]:
    """One row per field of ``model`` (and per computed field), in declaration order."""
    rows = [
        FieldRow(
            name=name,
            type=type_text(field.annotation),
            default=default_text(field),
            bounds=bounds_text(field),
            description=field_description(model, name),
        )
        for name, field in model.model_fields.items()
    ]
    for name, computed in model.model_computed_fields.items():
        description = computed.description or inspect.getdoc(getattr(model, name)) or ""
        rows.append(
            FieldRow(name, type_text(computed.return_type), "computed", "", description.strip())
        )
    return rows


def nested_models(model: type[BaseModel]) -> list[type[BaseModel]]:
    """The models ``model``'s fields are made of, recursively, each once, in field order."""
    found: list[type[BaseModel]] = []

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found and annotation is not model:
                found.append(annotation)
                for field in annotation.model_fields.values():
                    visit(field.annotation)
            return
        for arg in typing.get_args(annotation):
            visit(arg)

    for field in model.model_fields.values():
        visit(field.annotation)
    return found


def import_object(path: str) -> Any:
    """``package.module.Name`` -> the object."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


# -- settings ------------------------------------------------------------------------------------

SURFACE_NAMES = {
    "KERNEL": "kernel",
    "KERNELSPEC": "kernelspec",
    "INSTALL": "rewyn-kernel install",
    "RUN": "rewyn-kernel run",
    "MAGIC": "%%sandbox",
    "MAGIC_DEFAULTS": "%sandbox config",
    "MCP": "rewyn-kernel mcp",
    "REVIEW": "review notebook",
}
"""How the settings page names each ``Surface`` (a new surface without a name here fails the
tests)."""
SPEC = "SandboxSpec"
CREATE = "create()"
RUNTIME_SURFACES = {
    SPEC: "A field of ``SandboxSpec``: what ``create(spec)``, ``acreate(spec)``, "
    "``SandboxPool(spec)`` and ``RaySandboxPool(spec)`` take.",
    CREATE: "A keyword argument of ``create()`` and ``acreate()`` (over the spec's).",
}
"""The runtime's own surfaces, beyond ``SETTINGS``' tags: read from ``SandboxSpec``'s fields
and ``create()``'s signature."""


@dataclass(frozen=True)
class SettingRow:
    name: str
    type: str
    default: str
    create_default: str
    """The default of ``SandboxSpec`` (and so ``create()``) where it differs from the kernel's,
    else ''."""
    bounds: str
    description: str
    create_description: str
    """``SandboxSpec``'s description where the kernel's says something else, else ''."""
    surfaces: tuple[str, ...]
    flag: str
    """The command-line option (with its metavar), '' where no command line takes it."""
    traitlet: str
    """``SandboxKernel.<name>``, '' where the kernel does not take it."""


def surface_rows() -> list[tuple[str, str]]:
    """(name on the page, what it is) of the runtime's surfaces and each ``Surface``."""
    from rewyn_kernel.settings import Surface

    docs = attribute_docs(Surface.__module__)
    rows = list(RUNTIME_SURFACES.items())
    for member in Surface:
        assert member.name is not None
        rows.append((SURFACE_NAMES[member.name], docs.get(("Surface", member.name), "")))
    return rows


def settings_rows() -> list[SettingRow]:
    """Every setting of ``KernelSettings``, in ``SETTINGS``' order."""
    from rewyn_kernel.runtime.sandbox import SandboxSpec, create
    from rewyn_kernel.settings import KERNEL_CLASS, SETTINGS, KernelSettings, Surface

    keywords = {
        name
        for name, parameter in inspect.signature(create).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    rows = []
    for name, setting in SETTINGS.items():
        field = KernelSettings.model_fields[name]
        default = default_text(field)
        spec_field = SandboxSpec.model_fields.get(name)
        create_default = default_text(spec_field) if spec_field is not None else ""
        description = field_description(KernelSettings, name)
        create_description = field_description(SandboxSpec, name) if spec_field else ""
        surfaces = [SPEC] if spec_field is not None else []
        surfaces += [CREATE] if spec_field is not None and name in keywords else []
        surfaces += [
            SURFACE_NAMES[str(member.name)] for member in Surface if member in setting.surfaces
        ]
        flag = ""
        if setting.option is not None:
            flag = setting.option.flag
            if setting.option.metavar:
                flag += f" {setting.option.metavar}"
        rows.append(
            SettingRow(
                name=name,
                type=type_text(field.annotation),
                default=default,
                create_default="" if create_default == default else create_default,
                bounds=bounds_text(field),
                description=description,
                create_description="" if create_description == description else create_description,
                surfaces=tuple(surfaces),
                flag=flag,
                traitlet=f"{KERNEL_CLASS}.{name}" if Surface.KERNEL in setting.surfaces else "",
            )
        )
    return rows


# -- the command line ----------------------------------------------------------------------------

WIDTH = 78
"""Columns the usage lines are wrapped to (argparse would take the terminal's)."""


@dataclass(frozen=True)
class OptionRow:
    flags: str
    """``-o, --output OUTPUT``; a positional argument's name."""
    help: str
    default: str
    """The default argparse fills in, where it has one to say; '' otherwise (a setting's
    default is in its help)."""
    group: str


@dataclass(frozen=True)
class CommandDoc:
    name: str
    summary: str
    usage: str
    description: str
    epilog: str
    options: tuple[OptionRow, ...]
    groups: tuple[tuple[str, str], ...] = ()
    """(title, description) of each group of options, in order."""


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(parser.prog, width=WIDTH)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


_NO_DEFAULT = (
    argparse._StoreTrueAction,
    argparse._StoreFalseAction,
    argparse._StoreConstAction,
    argparse._HelpAction,
    argparse._VersionAction,
    argparse._CountAction,
)


def _option_row(parser: argparse.ArgumentParser, action: argparse.Action, group: str) -> OptionRow:
    formatter = _formatter(parser)
    if action.option_strings:
        flags = ", ".join(action.option_strings)
        if action.nargs != 0:
            flags += " " + formatter._format_args(action, action.dest.upper())
    else:
        flags = formatter._format_args(action, action.dest)
    text = formatter._expand_help(action) if action.help else ""
    text = text.replace(f"({sys.prefix})", "(``sys.prefix``)")  # (not the build's own)
    default = ""
    shown = action.default not in (None, argparse.SUPPRESS, [], ())
    if shown and not isinstance(action, _NO_DEFAULT) and "default" not in text.lower():
        default = value_text(action.default)
    return OptionRow(flags, " ".join(text.split()), default, group)


def command_doc(name: str, parser: argparse.ArgumentParser, summary: str) -> CommandDoc:
    options = []
    groups = []
    for group in parser._action_groups:
        shown = [action for action in group._group_actions if action.help != argparse.SUPPRESS]
        if shown:
            groups.append((group.title or "", " ".join((group.description or "").split())))
        for action in group._group_actions:
            if action.help == argparse.SUPPRESS:
                continue
            options.append(_option_row(parser, action, group.title or ""))
    return CommandDoc(
        name=name,
        summary=summary,
        usage=_usage(parser),
        description=parser.description or "",
        epilog=parser.epilog or "",
        options=tuple(options),
        groups=tuple(groups),
    )


def cli_commands() -> tuple[CommandDoc, list[CommandDoc]]:
    """``rewyn-kernel`` itself, and each subcommand, from ``rewyn_kernel.cli.build_parser``."""
    from rewyn_kernel.cli import build_parser

    parser, parsers = build_parser()
    summaries: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
    top = CommandDoc(
        name=parser.prog,
        summary="",
        usage=_usage(parser),
        description=parser.description or "",
        epilog=parser.epilog or "",
        options=tuple(
            _option_row(parser, action, "options")
            for action in parser._actions
            if not isinstance(action, argparse._SubParsersAction)
        ),
    )
    commands = [command_doc(name, sub, summaries.get(name, "")) for name, sub in parsers.items()]
    return top, commands


# -- the record a cell keeps ---------------------------------------------------------------------

RECORD_NOTES = {
    "id": "",
    "ending": "",
    "exit_code": "",
    "duration_ms": "Rounded to 0.1 ms.",
    "provider": "At most 64 characters.",
    "execution_count": "",
    "isolation": "Only its ``network`` and ``files``.",
    "spec": "Only ``timeout``, ``memory_limit_mb`` and ``network``.",
    "code_hash": "Its first 32 hex digits (128 bits): enough to find the whole event in the "
    "run log.",
    "timed_out": "Present only when true.",
    "interrupted": "Present only when true.",
    "memory_exceeded": "Present only when true.",
    "state_lost": "Present only when true.",
    "sandbox_restarted": "Present only when true.",
    "stdout_truncated": "Present only when true.",
    "stderr_truncated": "Present only when true.",
    "stdout_bytes": "Dropped when the record would pass its size bound.",
    "stderr_bytes": "Dropped when the record would pass its size bound.",
    "code_bytes": "Dropped when the record would pass its size bound.",
    "message": "Only when the execution did not end well; cut to 80 characters, shorter when "
    "the record would pass its size bound.",
    "files": "Only when the cell created, changed or deleted files in its workspace: the "
    "paths of each kind that fit, and ``counts`` (always whole).",
}
"""What the record keeps of each of the event's fields, where it keeps less than the event
(tests/test_docs_reference.py checks these keys against what ``compact_record`` writes)."""


def _sample_event(*, flags: bool) -> Any:
    """A SANDBOX_EXECUTED event that failed: with every flag set and a file created
    (``flags``), or with a message alone (a record has no room for all of it at once)."""
    from rewyn_kernel.runtime._result import Isolation, WorkspaceFiles
    from rewyn_kernel.runtime.events import SandboxEvent

    isolation = Isolation(
        provider="subprocess",
        network="isolated",
        pid_namespace=True,
        user_namespace=True,
        memory=None,
        files="open",
        filesystem="host",
    )
    when = datetime(2026, 1, 1)
    files = WorkspaceFiles(created=("a.csv",), counts={"created": 1})
    return SandboxEvent(
        id="e",
        sandbox_id="s",
        session_id="s",
        execution_count=1,
        started_at=when,
        finished_at=when,
        duration_ms=1.0,
        provider="subprocess",
        isolation=isolation,
        spec={},
        code="",
        code_hash="0" * 64,
        code_bytes=0,
        code_truncated=False,
        exit_code=124,
        ending="timeout",
        ok=False,
        timed_out=flags,
        interrupted=flags,
        memory_exceeded=flags,
        files=files if flags else None,
        state_lost=flags,
        sandbox_restarted=flags,
        message="ran too long",
        stdout="",
        stderr="",
        stdout_bytes=0,
        stderr_bytes=0,
        stdout_truncated=flags,
        stderr_truncated=flags,
        error=None,
    )


def record_keys() -> list[str]:
    """The keys ``compact_record`` can write, in the order it writes them."""
    from rewyn_kernel.kernel.record import compact_record

    keys = [*compact_record(_sample_event(flags=False)), *compact_record(_sample_event(flags=True))]
    return list(dict.fromkeys(keys))


def summary_fields() -> list[str]:
    """The event's fields the persisted event output keeps (``event_output``)."""
    from rewyn_kernel.kernel.record import event_summary

    return list(event_summary(_sample_event(flags=True)))


def record_rows() -> list[FieldRow]:
    """The record's keys: the event field each one keeps, its type there, what it keeps."""
    from rewyn_kernel.runtime.events import SandboxEvent

    fields = SandboxEvent.model_fields
    rows = []
    for key in record_keys():
        event = fields.get(key)
        kind = type_text(event.annotation) if event is not None else "dict"
        if key == "files":
            kind = "dict[str, list[str] | dict[str, int]]"
        if key in ("isolation", "spec"):
            kind = "dict"
        described = field_description(SandboxEvent, key) if event is not None else ""
        note = RECORD_NOTES.get(key, "")
        rows.append(FieldRow(key, kind, "", "", " ".join(p for p in (described, note) if p)))
    return rows


# -- rendering: docutils nodes -------------------------------------------------------------------

_CODE = re.compile(r"``(.+?)``|`([^`]+)`")


def inline(text: str) -> list[nodes.Node]:
    """``text`` as nodes: code in single or double backticks as literals, the rest as text."""
    found: list[nodes.Node] = []
    at = 0
    for match in _CODE.finditer(text):
        if match.start() > at:
            found.append(nodes.Text(text[at : match.start()]))
        code = match.group(1) or match.group(2)
        found.append(nodes.literal(code, code))
        at = match.end()
    if at < len(text):
        found.append(nodes.Text(text[at:]))
    return found


def paragraph(text: str) -> nodes.paragraph:
    """``text`` as the code says it: no smart quotes (they would
    make a dash of the ``--`` of ``--help``)."""
    return nodes.paragraph("", "", *inline(text), support_smartquotes=False)


def type_paragraph(text: str) -> nodes.paragraph:
    """A type, each alternative of a union as code, so a long union wraps between them."""
    found = nodes.paragraph()
    for index, part in enumerate(text.split(" | ")):
        if index:
            found += nodes.Text(" | ")
        found += nodes.literal(part, part)
    return found


def literal_paragraph(text: str) -> nodes.paragraph:
    return nodes.paragraph("", "", nodes.literal(text, text)) if text else nodes.paragraph()


def table(headers: list[str], rows: list[list[nodes.Node]], widths: list[int]) -> nodes.table:
    """A table of ``rows`` (one node per cell) under ``headers``."""
    group = nodes.tgroup(cols=len(headers))
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    head += nodes.row("", *(nodes.entry("", nodes.paragraph(text=h)) for h in headers))
    body = nodes.tbody()
    for cells in rows:
        body += nodes.row("", *(nodes.entry("", cell) for cell in cells))
    group += head
    group += body
    # (colwidths-given: Sphinx writes the widths, so a long type does not squeeze the text)
    return nodes.table("", group, classes=["rewyn-reference", "colwidths-given"])


def field_list(items: list[tuple[str, nodes.Node]]) -> nodes.field_list:
    found = nodes.field_list()
    for name, body in items:
        found += nodes.field("", nodes.field_name(text=name), nodes.field_body("", body))
    return found


class _Directive(SphinxDirective):
    def depends(self, *modules: str) -> None:
        """Read the page again when this extension, or a module it renders, changes."""
        self.env.note_dependency(__file__)
        for name in modules:
            source = inspect.getsourcefile(importlib.import_module(name))
            if source:
                self.env.note_dependency(source)

    def section(self, title: str, ident: str, *, label: bool = False) -> nodes.section:
        """A section titled ``title`` (as code); ``label``: ``ident`` is a label other pages
        can link to with ``{ref}`` (unique in the site), else an anchor of this page."""
        section = nodes.section(
            ids=[nodes.make_id(ident)], names=[nodes.fully_normalize_name(ident)]
        )
        section += nodes.title("", "", nodes.literal(title, title))
        if label:
            self.state.document.note_explicit_target(section, section)
        else:
            self.state.document.note_implicit_target(section, section)
        return section

    def code(self, text: str) -> nodes.literal_block:
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return block


class CliDirective(_Directive):
    """``rewyn-cli``: the whole command line, one section per subcommand."""

    def run(self) -> list[nodes.Node]:
        self.depends("rewyn_kernel.cli", "rewyn_kernel.settings")
        top, commands = cli_commands()
        found: list[nodes.Node] = [self.code(top.usage), paragraph(top.description)]
        found.append(
            table(
                ["command", "what it does"],
                [[literal_paragraph(c.name), paragraph(c.summary)] for c in commands],
                [20, 80],
            )
        )
        found.append(self.option_table(list(top.options)))
        for command in commands:
            section = self.section(
                f"rewyn-kernel {command.name}", f"cli-{command.name}", label=True
            )
            section += self.code(command.usage)
            section += paragraph(command.description or command.summary)
            for group, text in command.groups:
                section += nodes.rubric(text=group[:1].upper() + group[1:])
                if text:
                    section += paragraph(text[:1].upper() + text[1:])
                section += self.option_table([o for o in command.options if o.group == group])
            if command.epilog:
                section += paragraph(command.epilog)
            found.append(section)
        return found

    def option_table(self, rows: list[OptionRow]) -> nodes.table:
        """The options' table; a default column only where argparse has a default to say."""
        if not any(row.default for row in rows):
            return table(
                ["option", "what it does"],
                [[literal_paragraph(row.flags), paragraph(row.help)] for row in rows],
                [30, 70],
            )
        return table(
            ["option", "what it does", "default"],
            [
                [literal_paragraph(row.flags), paragraph(row.help), literal_paragraph(row.default)]
                for row in rows
            ],
            [28, 60, 12],
        )


class SettingsDirective(_Directive):
    """``rewyn-settings``: the surfaces, then one section per setting."""

    def run(self) -> list[nodes.Node]:
        self.depends("rewyn_kernel.settings", "rewyn_kernel.runtime._spec")
        found: list[nodes.Node] = [
            table(
                ["surface", "what takes the setting there"],
                [[literal_paragraph(name), paragraph(text)] for name, text in surface_rows()],
                [20, 80],
            )
        ]
        for row in settings_rows():
            section = self.section(row.name, f"setting-{row.name}", label=True)
            section += paragraph(row.description)
            if row.create_description:
                section += nodes.paragraph(
                    "",
                    "",
                    nodes.literal(CREATE, CREATE),
                    nodes.Text(": "),
                    *inline(row.create_description),
                )
            items: list[tuple[str, nodes.Node]] = [
                ("Type", type_paragraph(row.type)),
                ("Default", literal_paragraph(row.default)),
            ]
            if row.create_default:
                items.append(("SandboxSpec default", literal_paragraph(row.create_default)))
            if row.bounds:
                items.append(("Bounds", literal_paragraph(row.bounds)))
            if row.flag:
                items.append(("Option", literal_paragraph(row.flag)))
            if row.traitlet:
                items.append(("Traitlet", literal_paragraph(row.traitlet)))
            taken = nodes.paragraph()
            for index, surface in enumerate(row.surfaces):
                if index:
                    taken += nodes.Text(", ")
                taken += nodes.literal(surface, surface)
            items.append(("Taken by", taken))
            section += field_list(items)
            found.append(section)
        return found


def _model_table(rows: list[FieldRow], *, record: bool = False) -> nodes.table:
    """``record``: the model is written by the code (a result, an event), so a field with no
    default is one every record has, not one a caller must give."""

    def default(row: FieldRow) -> nodes.Node:
        if record and row.default == "required":
            return nodes.paragraph(text="always there")
        return literal_paragraph(row.default)

    return table(
        ["field", "type", "default", "description"],
        [
            [
                literal_paragraph(row.name),
                type_paragraph(row.type),
                default(row),
                paragraph(row.description + (f" Bounds: {row.bounds}." if row.bounds else "")),
            ]
            for row in rows
        ],
        [16, 22, 12, 50],
    )


class ModelDirective(_Directive):
    """``rewyn-model package.module.Model``: its fields; ``:nested:`` adds a section per model
    it is made of, ``:skip: A, B`` leaves those out (documented elsewhere); ``:record:``, for a
    model the code writes (a result, an event), says "always there" for a field with no
    default."""

    required_arguments = 1
    option_spec: ClassVar[dict[str, Any]] = {
        "nested": directives.flag,
        "skip": directives.unchanged,
        "record": directives.flag,
    }

    def run(self) -> list[nodes.Node]:
        model = import_object(self.arguments[0])
        self.depends(model.__module__, *(inner.__module__ for inner in nested_models(model)))
        skip = {name.strip() for name in self.options.get("skip", "").split(",") if name.strip()}
        record = "record" in self.options
        found: list[nodes.Node] = [_model_table(model_rows(model), record=record)]
        if "nested" in self.options:
            for inner in nested_models(model):
                if inner.__name__ in skip:
                    continue
                section = self.section(inner.__name__, f"model-{inner.__name__}")
                section += paragraph(inspect.getdoc(inner) or "")
                section += _model_table(model_rows(inner), record=record)
                found.append(section)
        return found


class RecordDirective(_Directive):
    """``rewyn-record``: the keys of a cell's compact record; ``:summary:``, the fields of the
    event that the persisted event output keeps."""

    option_spec: ClassVar[dict[str, Any]] = {"summary": directives.flag}

    def run(self) -> list[nodes.Node]:
        self.depends("rewyn_kernel.kernel.record", "rewyn_kernel.runtime.events")
        if "summary" in self.options:
            found = nodes.paragraph()
            for index, name in enumerate(summary_fields()):
                if index:
                    found += nodes.Text(", ")
                found += nodes.literal(name, name)
            return [found]
        return [
            table(
                ["key", "type", "what it holds"],
                [
                    [literal_paragraph(r.name), type_paragraph(r.type), paragraph(r.description)]
                    for r in record_rows()
                ],
                [18, 22, 60],
            )
        ]


def _mock_ray(app: Sphinx, config: Config) -> None:
    if "sphinx.ext.autodoc" in app.extensions:
        config.autodoc_mock_imports = [*config.autodoc_mock_imports, *MOCKED]


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", _mock_ray)
    app.add_directive("rewyn-cli", CliDirective)
    app.add_directive("rewyn-settings", SettingsDirective)
    app.add_directive("rewyn-model", ModelDirective)
    app.add_directive("rewyn-record", RecordDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
