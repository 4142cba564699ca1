"""Typed, frozen records for what crosses into the sandbox as JSON: declared once, checked on
both sides of the wall.

A record's fields are its class annotations and their defaults (a field without a default is
required), in the typing forms of Python 3.8, which this module reads as text: the worker
imports no ``typing`` (it costs milliseconds), and type checkers see the fields as a frozen
dataclass's (``dataclass_transform``). So:

- the host builds a record by keyword (``WorkerConfig(cwd=...)``): a misspelt or missing field,
  or a value of the wrong type, is a ``WireError`` (a TypeError) there, before anything starts,
  and mypy reports it before that;
- ``to_wire()`` is the JSON object sent, every field in it;
- the worker reads what arrived with ``from_wire(data)``: the same checks, every field present
  (defaults are for the host's construction), JSON arrays read as tuples and objects as the
  records their fields name; anything else is a ``WireError`` that says which field of what,
  and why.

Annotations understood: ``str``, ``int`` (not a bool), ``bool``, ``None``, ``Optional[X]``,
``Union[X, Y, ...]``, ``Tuple[X, ...]``, ``Tuple[X, Y]``, ``Literal[...]`` (strings, numbers,
booleans) and a record class of the same module. Anything else is refused when the class is
made, so no field goes unchecked.
"""

from __future__ import annotations

import re
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, Callable, ClassVar, Dict, List, Tuple

    from typing_extensions import Self, dataclass_transform

    Check = Callable[[Any, bool, str], Any]
    """Return the value (from the wire: as the record holds it) or raise WireError; the flag
    says the value came from the wire (JSON), the text names the field."""
else:

    def dataclass_transform(**_):  # noqa: ANN003, ANN201 (typing's, for type checkers only)
        return lambda cls: cls


class WireError(TypeError, ValueError):
    """A record was given a field it does not have, lacks one it needs, or holds a value of
    the wrong type. A TypeError, as a bad keyword argument is; a ValueError to code that
    reads data."""


MISSING = object()
TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z_0-9]*)|('[^']*'|\"[^\"]*\")|(\.\.\.)|(-?\d+)|(.))")
SIMPLE = {"str": str, "int": int, "bool": bool}


@dataclass_transform(kw_only_default=True, frozen_default=True)
class Record:
    """A frozen record of typed fields; subclasses declare them as annotations."""

    _fields: ClassVar[Dict[str, Tuple[Check, object]]] = {}
    """Each field's check and default (``MISSING``: required), in declaration order."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields: Dict[str, Tuple[Check, object]] = {}
        for base in reversed(cls.__mro__[1:]):
            fields.update(base.__dict__.get("_fields") or {})
        scope = sys.modules[cls.__module__].__dict__
        # (this class's own: Python 3.8 has no inspect.get_annotations, nor may the worker
        # import inspect, for the milliseconds it costs)
        for name, text in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063
            if str(text).startswith("ClassVar"):
                continue
            where = "%s.%s" % (cls.__name__, name)
            check = _parse(str(text), scope, where, cls)
            fields[name] = (check, cls.__dict__.get(name, MISSING))
        cls._fields = fields

    def __init__(self, **values: Any) -> None:
        self._take(values, wire=False)

    def _take(self, values: Dict[str, Any], wire: bool) -> None:
        name = type(self).__name__
        unknown = [key for key in values if key not in self._fields]
        if unknown:
            raise WireError(
                "%s has no field %s (a misspelt name?); its fields are: %s"
                % (name, ", ".join(repr(key) for key in unknown), ", ".join(self._fields))
            )
        # (A record's JSON holds every field, as ``to_wire`` writes it: one missing there
        # means the two sides disagree on what the record is.)
        needed = [f for f, (_, default) in self._fields.items() if wire or default is MISSING]
        missing = [f for f in needed if f not in values]
        if missing:
            raise WireError("%s needs %s" % (name, ", ".join(repr(f) for f in missing)))
        for field, (check, default) in self._fields.items():
            value = values.get(field, default)
            object.__setattr__(self, field, check(value, wire, "%s.%s" % (name, field)))

    @classmethod
    def from_wire(cls, data: object) -> Self:
        """Read a record from a JSON object (a dict): raise WireError, saying what is wrong,
        where it is not one of these."""
        if not isinstance(data, dict):
            raise WireError("%s: expected a JSON object, got %s" % (cls.__name__, _shown(data)))
        record = cls.__new__(cls)
        record._take(data, wire=True)
        return record

    def to_wire(self) -> Dict[str, Any]:
        """This record as a JSON object: every field, records inside as objects."""
        return {name: _to_wire(getattr(self, name)) for name in self._fields}

    def given(self) -> Dict[str, Any]:
        """The fields whose values are not their defaults (what its maker set), by name: to
        make a record of this and more, each field given once (``Record(**a.given(), x=1)``;
        one given twice is a TypeError)."""
        values = {}
        for name, (_, default) in self._fields.items():
            value = getattr(self, name)
            if default is MISSING or value != default or type(value) is not type(default):
                values[name] = value
        return values

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` (checked as the constructor checks them)."""
        values = {name: getattr(self, name) for name in self._fields}
        values.update(changes)
        return type(self)(**values)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("%s is frozen (make another: replace)" % type(self).__name__)

    def __delattr__(self, name: str) -> None:
        raise AttributeError("%s is frozen" % type(self).__name__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._fields)

    def __hash__(self) -> int:
        return hash((type(self).__name__, *(getattr(self, name) for name in self._fields)))

    def __repr__(self) -> str:
        shown = ", ".join("%s=%r" % (name, getattr(self, name)) for name in self._fields)
        return "%s(%s)" % (type(self).__name__, shown)


def _to_wire(value: object) -> object:
    if isinstance(value, Record):
        return value.to_wire()
    if isinstance(value, tuple):
        return [_to_wire(item) for item in value]
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return "%s %s" % (type(value).__name__, text if len(text) <= 60 else text[:57] + "...")


# -- reading annotations into checks ---------------------------------------------------------


def _parse(text: str, scope: Dict[str, Any], where: str, owner: type) -> Check:
    tokens = [t for t in TOKEN.findall(text)]
    position = [0]

    def peek() -> Tuple[str, ...]:
        return tokens[position[0]] if position[0] < len(tokens) else ("", "", "", "", "")

    def take(symbol: str) -> None:
        if peek()[4] != symbol:
            raise TypeError("%s: cannot read the annotation %r" % (where, text))
        position[0] += 1

    def opening() -> bool:
        """Take ``[``, and the ``(`` Python 3.8 writes after it where the items are all
        constants (``Literal[('a', 'b')]``); True if it did."""
        take("[")
        if peek()[4] == "(":
            take("(")
            return True
        return False

    def closing(parenthesised: bool) -> None:
        if parenthesised:
            take(")")
        take("]")

    def expression() -> Check:
        name = peek()[0]
        if not name:
            raise TypeError("%s: cannot read the annotation %r" % (where, text))
        position[0] += 1
        if name == "None":
            return _check_none
        if name in SIMPLE:
            return _simple(SIMPLE[name])
        if name == "Literal":
            return _literal(literals())
        if name in ("Optional", "Union", "Tuple"):
            parenthesised = opening()
            inner: List[Check] = [expression()]
            repeated = False
            while peek()[4] == ",":
                take(",")
                if peek()[2]:
                    position[0] += 1
                    repeated = True
                else:
                    inner.append(expression())
            closing(parenthesised)
            if name == "Optional" and len(inner) == 1:
                return _union([_check_none, inner[0]])
            if name == "Union":
                return _union(inner)
            if name == "Tuple":
                return _tuple(inner, repeated)
            raise TypeError("%s: cannot read the annotation %r" % (where, text))
        found = scope.get(name)
        if name == owner.__name__ or (isinstance(found, type) and issubclass(found, Record)):
            return _record(name, scope)
        raise TypeError("%s: %r is not a type a record field may have" % (where, name))

    def literals() -> Tuple[object, ...]:
        parenthesised = opening()
        values: List[object] = []
        while True:
            name, quoted, _, number, _ = peek()
            position[0] += 1
            if quoted:
                values.append(quoted[1:-1])
            elif number:
                values.append(int(number))
            elif name in ("True", "False", "None"):
                values.append({"True": True, "False": False, "None": None}[name])
            else:
                raise TypeError("%s: cannot read the annotation %r" % (where, text))
            if peek()[4] != ",":
                break
            take(",")
        closing(parenthesised)
        return tuple(values)

    check = expression()
    if position[0] != len(tokens):
        raise TypeError("%s: cannot read the annotation %r" % (where, text))
    return check


def _check_none(value: Any, wire: bool, where: str) -> Any:
    if value is not None:
        raise WireError("%s: expected None, got %s" % (where, _shown(value)))
    return None


def _simple(kind: type) -> Check:
    def check(value: Any, wire: bool, where: str) -> Any:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise WireError("%s: expected %s, got %s" % (where, kind.__name__, _shown(value)))
        return value

    return check


def _literal(allowed: Tuple[object, ...]) -> Check:
    def check(value: Any, wire: bool, where: str) -> Any:
        for one in allowed:
            if type(one) is type(value) and one == value:
                return value
        wanted = " or ".join(repr(one) for one in allowed)
        raise WireError("%s: expected %s, got %s" % (where, wanted, _shown(value)))

    return check


def _union(options: List[Check]) -> Check:
    def check(value: Any, wire: bool, where: str) -> Any:
        wanted, other = [], []
        for option in options:
            try:
                return option(value, wire, where)
            except WireError as exc:
                text = str(exc)[len(where) + 2 :] if str(exc).startswith(where) else str(exc)
                head, got, tail = text.partition(", got ")
                if got and tail == _shown(value) and head.startswith("expected "):
                    wanted.append(head[len("expected ") :])
                else:
                    other.append(text)  # (deeper: the value is of this kind, its inside not)
        if other:
            raise WireError("%s: %s" % (where, "; or ".join(other)))
        expected = " or ".join(wanted)  # ("expected None or str, got int 5")
        raise WireError("%s: expected %s, got %s" % (where, expected, _shown(value)))

    return check


def _tuple(items: List[Check], repeated: bool) -> Check:
    def check(value: Any, wire: bool, where: str) -> Any:
        # (JSON has arrays, read as tuples; the host builds tuples: a list there is a mistake)
        if not isinstance(value, tuple) and not (wire and isinstance(value, list)):
            raise WireError("%s: expected a tuple, got %s" % (where, _shown(value)))
        if not repeated and len(value) != len(items):
            raise WireError("%s: expected %d items, got %d" % (where, len(items), len(value)))
        return tuple(
            (items[0] if repeated else items[index])(item, wire, "%s[%d]" % (where, index))
            for index, item in enumerate(value)
        )

    return check


def _record(name: str, scope: Dict[str, Any]) -> Check:
    def check(value: Any, wire: bool, where: str) -> Any:
        kind = scope[name]  # (looked up now: the class may be the one being made)
        if isinstance(value, kind):
            return value
        if wire and isinstance(value, dict):
            try:
                return kind.from_wire(value)
            except WireError as exc:
                raise WireError("%s: %s" % (where, exc)) from None
        raise WireError("%s: expected %s, got %s" % (where, name, _shown(value)))

    return check
