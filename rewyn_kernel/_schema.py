"""Check a tool call's arguments against the flat JSON Schema subset tools declare.

A tool's input is a JSON object of named scalar arguments, which is what models are good at
filling in. This checks exactly that subset (types string, number, integer and boolean;
``required``; ``additionalProperties: false``; bounds, lengths and ``enum``) and refuses, when the
tool is made, a schema that uses anything else, so that no keyword is silently left unchecked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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
    found = [
        f"missing required argument {name!r}"
        for name in schema.get("required", ())
        if name not in arguments
    ]
    if schema.get("additionalProperties", True) is False:
        extra = sorted(set(arguments) - set(properties))
        if extra:
            allowed = ", ".join(repr(name) for name in properties) or "none"
            found.append(
                f"unknown argument{'s' if len(extra) > 1 else ''} "
                f"{', '.join(repr(name) for name in extra)} (allowed: {allowed})"
            )
    for name, value in arguments.items():
        if name in properties:
            found.extend(_value_problems(name, properties[name], value))
    return found


def _value_problems(name: str, prop: Mapping[str, Any], value: Any) -> list[str]:
    kind = prop["type"]
    if not _has_type(value, kind):
        return [f"{name!r} must be {_JSON_TYPES[kind]}, not {_describe(value)}"]
    if "enum" in prop and value not in prop["enum"]:
        return [f"{name!r} must be one of {', '.join(map(repr, prop['enum']))}"]
    found = []
    if kind in ("number", "integer"):
        if not math.isfinite(value):
            return [f"{name!r} must be a finite number"]
        if "minimum" in prop and value < prop["minimum"]:
            found.append(f"{name!r} must be at least {prop['minimum']} (got {value})")
        if "exclusiveMinimum" in prop and value <= prop["exclusiveMinimum"]:
            found.append(f"{name!r} must be greater than {prop['exclusiveMinimum']} (got {value})")
        if "maximum" in prop and value > prop["maximum"]:
            found.append(f"{name!r} must be at most {prop['maximum']} (got {value})")
        if "exclusiveMaximum" in prop and value >= prop["exclusiveMaximum"]:
            found.append(f"{name!r} must be less than {prop['exclusiveMaximum']} (got {value})")
    if kind == "string":
        if "minLength" in prop and len(value) < prop["minLength"]:
            found.append(f"{name!r} must have at least {prop['minLength']:,} characters")
        if "maxLength" in prop and len(value) > prop["maxLength"]:
            found.append(
                f"{name!r} must have at most {prop['maxLength']:,} characters (got {len(value):,})"
            )
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
