"""Check a tool call's arguments against the flat JSON Schema subset tools declare.

A tool's input is a JSON object of named scalar arguments, which is what models are good at
filling in. This checks exactly that subset (types string, number, integer and boolean;
``required``; ``additionalProperties: false``; bounds, lengths and ``enum``) and refuses, when the
tool is made, a schema that uses anything else, so that no keyword is silently left unchecked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

OBJECT_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "description", "title", "$schema"}
)
PROPERTY_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "title",
        "default",
        "examples",
        "enum",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
    }
)
_JSON_TYPES: dict[str, str] = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "true or false",
}


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise ValueError unless ``schema`` is an object schema of the supported subset."""
    if schema.get("type") != "object":
        raise ValueError('input_schema must have "type": "object" (tool arguments are an object)')
    unknown = set(schema) - OBJECT_KEYWORDS
    if unknown:
        raise ValueError(f"input_schema uses unsupported keywords: {', '.join(sorted(unknown))}")
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise ValueError('input_schema "properties" must be an object')  # noqa: TRY004
    for name, prop in properties.items():
        unknown = set(prop) - PROPERTY_KEYWORDS
        if unknown:
            raise ValueError(
                f"property {name!r} uses unsupported keywords: {', '.join(sorted(unknown))}"
            )
        if prop.get("type") not in _JSON_TYPES:
            raise ValueError(
                f"property {name!r} must have a type among {', '.join(_JSON_TYPES)}, "
                f"not {prop.get('type')!r}"
            )
    missing = [name for name in schema.get("required", ()) if name not in properties]
    if missing:
        raise ValueError(f"required names no property: {', '.join(missing)}")


def problems(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> list[str]:
    """Return what is wrong with ``arguments`` under ``schema``, in words; [] when valid."""
    properties: Mapping[str, Any] = schema.get("properties", {})
    found = [missing(name) for name in schema.get("required", ()) if name not in arguments]
    if schema.get("additionalProperties", True) is False:
        extra = sorted(set(arguments) - set(properties))
        if extra:
            found.append(unknown(extra, properties))
    for name, value in arguments.items():
        if name in properties:
            found.extend(_value_problems(name, properties[name], value))
    return found


def message(tool: str, found: Sequence[str]) -> str:
    """The one line that refuses a call to ``tool`` for the ``found`` problems."""
    return f"invalid arguments for tool {tool!r}: " + "; ".join(found)


# -- the words for each problem (the MCP server's argument errors use them too) -----------------


def missing(name: str) -> str:
    return f"missing required argument {name!r}"


def unknown(extra: Sequence[str], allowed: Iterable[str]) -> str:
    """Arguments the tool does not take, named, with the ones it does."""
    names = ", ".join(repr(name) for name in allowed) or "none"
    plural = "s" if len(extra) > 1 else ""
    return f"unknown argument{plural} {', '.join(repr(name) for name in extra)} (allowed: {names})"


def wrong_type(name: str, kind: str, value: Any) -> str:
    """``kind``: a JSON Schema type (string, number, integer, boolean)."""
    return f"{name!r} must be {_JSON_TYPES[kind]}, not {_describe(value)}"


def not_one_of(name: str, allowed: Iterable[Any]) -> str:
    return f"{name!r} must be one of {', '.join(map(repr, allowed))}"


def not_finite(name: str) -> str:
    return f"{name!r} must be a finite number"


def out_of_bounds(name: str, keyword: str, limit: Any, value: Any) -> str:
    """``keyword``: the JSON Schema bound the value breaks (minimum, exclusiveMinimum, maximum,
    exclusiveMaximum, minLength, maxLength); ``value``: the argument."""
    if keyword == "minLength":
        return f"{name!r} must have at least {limit:,} characters"
    if keyword == "maxLength":
        return f"{name!r} must have at most {limit:,} characters (got {len(value):,})"
    return f"{name!r} must be {_BOUNDS[keyword]} {limit} (got {value})"


_BOUNDS = {
    "minimum": "at least",
    "exclusiveMinimum": "greater than",
    "maximum": "at most",
    "exclusiveMaximum": "less than",
}


def _value_problems(name: str, prop: Mapping[str, Any], value: Any) -> list[str]:
    kind = prop["type"]
    if not _has_type(value, kind):
        return [wrong_type(name, kind, value)]
    if "enum" in prop and value not in prop["enum"]:
        return [not_one_of(name, prop["enum"])]
    found = []
    if kind in ("number", "integer"):
        if not math.isfinite(value):
            return [not_finite(name)]
        if "minimum" in prop and value < prop["minimum"]:
            found.append(out_of_bounds(name, "minimum", prop["minimum"], value))
        if "exclusiveMinimum" in prop and value <= prop["exclusiveMinimum"]:
            found.append(out_of_bounds(name, "exclusiveMinimum", prop["exclusiveMinimum"], value))
        if "maximum" in prop and value > prop["maximum"]:
            found.append(out_of_bounds(name, "maximum", prop["maximum"], value))
        if "exclusiveMaximum" in prop and value >= prop["exclusiveMaximum"]:
            found.append(out_of_bounds(name, "exclusiveMaximum", prop["exclusiveMaximum"], value))
    if kind == "string":
        if "minLength" in prop and len(value) < prop["minLength"]:
            found.append(out_of_bounds(name, "minLength", prop["minLength"], value))
        if "maxLength" in prop and len(value) > prop["maxLength"]:
            found.append(out_of_bounds(name, "maxLength", prop["maxLength"], value))
    return found


def _has_type(value: Any, kind: str) -> bool:
    # bool is an int in Python but not a number in JSON; 3.0 is an integer in JSON Schema.
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return kind == "number" or isinstance(value, int) or value.is_integer()


def _describe(value: Any) -> str:
    names = {str: "a string", bool: "a boolean", int: "an integer", float: "a number"}
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return names.get(type(value), type(value).__name__)
