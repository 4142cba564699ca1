"""The sandbox kernel's settings as traitlets, derived from ``rewyn_kernel.settings``.

A mixin of ``SandboxKernel``, so they are configured as ``SandboxKernel.<name>`` from
kernel.json argv, Jupyter config files or the command line. The kernel has a trait for each
setting tagged ``Surface.KERNEL``, and each trait's type, default and help come from the field of
``KernelSettings`` with the same name; nothing is declared twice.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError
from traitlets import Bool, Dict, Enum, Float, HasTraits, Int, List, TraitType, Unicode

from rewyn_kernel.settings import (
    KERNEL_CLASS,
    KernelSettings,
    Surface,
    describe_error,
    plain_type,
    taken_by,
)


def trait_for(name: str) -> TraitType[Any, Any]:
    """The configurable trait of the setting ``name`` (see ``KernelSettings``)."""
    field = KernelSettings.model_fields[name]
    kind, nullable = plain_type(field.annotation)
    default = field.get_default(call_default_factory=True)
    text = field.description or ""
    trait: TraitType[Any, Any]
    if name == "network":  # "none", "allow", or an allow-list in its comma form
        trait = Unicode(str(default), help=text)
    elif typing.get_origin(kind) is Literal:
        trait = Enum(list(typing.get_args(kind)), default_value=default, help=text)
    elif kind is bool:
        trait = Bool(default, help=text)
    elif kind in (int, float, str, Path):
        scalar = {int: Int, float: Float, str: Unicode, Path: Unicode}[kind]
        value = str(default) if isinstance(default, Path) else default
        trait = scalar(value, help=text, **({"allow_none": True} if nullable else {}))
    elif typing.get_origin(kind) is tuple:
        trait = List(Unicode(), default_value=list(default), help=text)
    elif typing.get_origin(kind) is dict:
        trait = Dict(value_trait=Unicode(), default_value=dict(default), help=text)
    else:  # pragma: no cover - a new kind of setting needs a line here
        raise TypeError(f"no trait for setting {name!r} of type {kind!r}")
    return trait.tag(config=True)


def traits_for(surface: Surface) -> dict[str, TraitType[Any, Any]]:
    """A configurable trait for each setting ``surface`` takes, by name (see ``trait_for``)."""
    return {name: trait_for(name) for name in taken_by(surface)}


def trait_value(value: object) -> object:
    """A setting's value as its trait holds it: a list for a tuple, text for a path."""
    if isinstance(value, tuple):
        return [trait_value(item) for item in value]
    return str(value) if isinstance(value, Path) else value


def configured(owner: HasTraits, names: typing.Iterable[str]) -> KernelSettings:
    """The settings ``owner``'s traits hold. Only those that differ from their default count as
    given (so a container-only setting left alone does not count as set); a bad value raises
    ValueError that names the setting."""
    traits = type(owner).class_traits()
    values = {
        name: getattr(owner, name)
        for name in names
        if getattr(owner, name) != traits[name].default()
    }
    try:
        return KernelSettings.model_validate(values)
    except ValidationError as exc:
        raise ValueError(f"invalid sandbox settings: {describe_error(exc)}") from exc


class SandboxSettings(HasTraits):
    """What sandbox the kernel runs its cells in, and what it keeps of them."""

    # A trait for each setting the kernel takes. At class scope, locals() is the namespace the
    # class is made from (https://docs.python.org/3/library/functions.html#locals), which is
    # where traitlets' metaclass finds traits.
    locals().update(traits_for(Surface.KERNEL))

    # The traits the kernel reads as attributes, typed (the values the traits above hold).
    timeout: float | None
    ipython: bool
    event_output: bool
    checkpoints: int
    keep_packages: bool
    trust_output: bool

    def settings(self) -> KernelSettings:
        """The kernel's settings, validated (a bad value raises pydantic's ValidationError)."""
        return configured(self, taken_by(Surface.KERNEL))


def settings_from_argv(argv: typing.Sequence[str]) -> KernelSettings:
    """The settings a kernelspec's argv flags give, read as the kernel itself reads them."""
    from traitlets.config import Application, Configurable

    prefix = f"--{KERNEL_CLASS}."
    app = Application()
    app.parse_command_line([arg for arg in argv if arg.startswith(prefix)])
    reader = type(KERNEL_CLASS, (Configurable, SandboxSettings), {})(config=app.config)
    return typing.cast(SandboxSettings, reader).settings()
