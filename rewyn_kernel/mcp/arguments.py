"""The MCP server's argument errors, in ``sandbox_tool``'s words (``rewyn_kernel/_schema.py``).

The SDK validates a call's arguments against the tool's signature (a pydantic model) before the
tool runs, and reports a failure as pydantic's own text, a documentation URL on every line; an
argument the tool does not take is dropped without a word, so a misspelt ``timout`` runs the
code under the default timeout. Here each problem names the argument and says what is wrong,
as ``sandbox_tool`` says it, and an unknown argument is refused by name, with the ones allowed
(the listed input schemas say ``additionalProperties: false`` to match).

``CheckedServer`` is the SDK's ``MCPServer`` with those two changes; ``message`` turns the SDK's
validation error into the line the model reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, InputRequiredResult
from mcp.types import Tool as ListedTool
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from rewyn_kernel import _schema

LifespanT = TypeVar("LifespanT")

_TYPES = {
    "string_type": "string",
    "string_unicode": "string",
    "int_type": "integer",
    "int_parsing": "integer",
    "int_from_float": "integer",
    "float_type": "number",
    "float_parsing": "number",
    "bool_type": "boolean",
    "bool_parsing": "boolean",
}
"""pydantic's error types for a value of the wrong type, and the JSON type it should be."""
_BOUNDS = {
    "greater_than": ("exclusiveMinimum", "gt"),
    "greater_than_equal": ("minimum", "ge"),
    "less_than": ("exclusiveMaximum", "lt"),
    "less_than_equal": ("maximum", "le"),
    "string_too_short": ("minLength", "min_length"),
    "string_too_long": ("maxLength", "max_length"),
}
"""pydantic's error types for a value out of bounds: the JSON Schema keyword, the context key."""


def unknown(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """The problem of the arguments ``schema`` does not name ([] or one line)."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    extra = sorted(name for name in arguments if name not in properties)
    return [_schema.unknown(extra, properties)] if extra else []


def message(
    tool: str,
    arguments: Mapping[str, Any],
    schema: Mapping[str, Any],
    error: ValidationError | None = None,
) -> str | None:
    """The line that refuses ``arguments`` for ``tool`` (whose input schema is ``schema``):
    missing arguments, unknown ones, then wrong values (``error``, the SDK's validation of
    them; without it, the required arguments not given), as ``sandbox_tool`` orders them;
    None when nothing is wrong."""
    details = error.errors(include_url=False) if error is not None else []
    if error is not None:
        missing = [_name(item) for item in details if item["type"] == "missing"]
    else:
        missing = [name for name in schema.get("required", ()) if name not in arguments]
    found = [_schema.missing(name) for name in missing]
    found += unknown(arguments, schema)
    found += [_problem(item, schema) for item in details if item["type"] != "missing"]
    return _schema.message(tool, found) if found else None


def _name(item: ErrorDetails) -> str:
    return ".".join(str(part) for part in item["loc"])


def _problem(item: ErrorDetails, schema: Mapping[str, Any]) -> str:
    """One pydantic error in ``_schema``'s words; an error it has no words for keeps
    pydantic's short message (never its URL), after the argument's name."""
    name, kind, value = _name(item), item["type"], item.get("input")
    context = item.get("ctx") or {}
    if kind in _TYPES:
        return _schema.wrong_type(name, _TYPES[kind], value)
    if kind == "finite_number" or (isinstance(value, float) and not math.isfinite(value)):
        return _schema.not_finite(name)
    if kind in _BOUNDS and _BOUNDS[kind][1] in context:
        keyword, key = _BOUNDS[kind]
        return _schema.out_of_bounds(name, keyword, _plain(context[key]), value)
    if kind in ("literal_error", "enum"):
        prop = (schema.get("properties") or {}).get(name) or {}
        if "enum" in prop:
            return _schema.not_one_of(name, prop["enum"])
        return f"{name!r} must be {context.get('expected', 'one of the values allowed')}"
    text = item["msg"].removeprefix("Value error, ")
    return f"{name!r}: {text[:1].lower()}{text[1:]}" if name else text


def _plain(limit: Any) -> Any:
    """A bound as a person writes it: 0, not pydantic's 0.0."""
    return int(limit) if isinstance(limit, float) and limit.is_integer() else limit


class UnknownArguments(ValueError):
    """Arguments a tool does not take (the cause of the ToolError that says so)."""


class CheckedServer(MCPServer[LifespanT]):
    """The SDK's server, with argument errors that name the argument and say what is wrong,
    and unknown arguments refused by name (see the module's docstring)."""

    async def list_tools(self) -> list[ListedTool]:
        """The tools, each input schema closed: an argument not listed is refused."""
        listed = await super().list_tools()
        return [
            tool.model_copy(
                update={"input_schema": {**tool.input_schema, "additionalProperties": False}}
            )
            for tool in listed
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[LifespanT, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Refuse unknown arguments before the SDK would drop them (with the missing ones:
        the values are checked once the names are right); say the SDK's validation errors in
        ``sandbox_tool``'s words. Both are ``ToolError``: the model reads them and retries."""
        schema = await self._schema_of(name)
        if schema is not None and unknown(arguments, schema):
            said = message(name, arguments, schema)
            raise ToolError(said) from UnknownArguments(said)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if schema is None or not isinstance(cause, ValidationError):
                raise
            said = message(name, arguments, schema, cause)
            if said is None:
                raise
            raise ToolError(said) from cause

    async def _schema_of(self, name: str) -> dict[str, Any] | None:
        for tool in await super().list_tools():
            if tool.name == name:
                return tool.input_schema
        return None
