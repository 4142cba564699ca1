"""Every setting of the sandbox kernel, the ``%%sandbox`` magic and the commands, declared once.

``KernelSettings`` is the one declaration. The sandbox's limits are ``SandboxSpec``'s own fields
(inherited with their defaults, bounds and descriptions); which provider runs the sandbox and what
the kernel keeps of each cell are declared here. ``SETTINGS``, beside it, tags each setting with
the surfaces that take it (``Surface``) and its command-line flag. Everything else is derived:

- the kernel's traitlets, ``SandboxKernel.<name>`` (``kernel/_settings.py``);
- the argv flags a kernelspec carries (``KernelSettings.flags``: only the fields given);
- the options of ``rewyn-kernel install``, ``run`` and ``mcp`` and of the magic
  (``add_options`` / ``from_options``), and the magic's defaults (``kernel/magic.py``);
- the limits a review's kernel pins (``notebooks/_review_notebook.py``),

each from ``taken_by(surface)``; tests/test_settings.py checks every surface against its tags.
"""

from __future__ import annotations

import argparse
import os
import re
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Flag, auto
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from rewyn_kernel.runtime import (
    ContainerProvider,
    JsonlRunLog,
    create,
    local_provider,
    registry,
)
from rewyn_kernel.runtime.container import DEFAULT_IMAGE
from rewyn_kernel.runtime.events import EventListener
from rewyn_kernel.runtime.network import NetworkPolicy, UpstreamProxy
from rewyn_kernel.runtime.sandbox import Sandbox, SandboxProvider, SandboxSpec
from rewyn_kernel.runtime.workspace import not_a_workspace

__all__ = [
    "CONTAINER_CLIS",
    "CONTAINER_ONLY",
    "KERNEL_CLASS",
    "KERNEL_TIMEOUT",
    "KernelSettings",
    "OPTIONS",
    "Option",
    "SANDBOX_SETTINGS",
    "add_options",
    "default_run_log",
    "describe_error",
    "from_options",
    "option_arguments",
    "plain_type",
]

KERNEL_TIMEOUT = 600.0
"""The kernel's default limit per cell: a notebook cell that trains a model runs for minutes."""
KERNEL_CLASS = "SandboxKernel"
"""The traitlets class name the flags configure (``--SandboxKernel.<setting>=<value>``)."""
CONTAINER_CLIS = ("docker", "podman", "nerdctl")
CONTAINER_ONLY = ("image", "container_runtime", "oci_runtime")
"""The settings only the container provider reads."""
_PROVIDER_FIELDS = ("provider", *CONTAINER_ONLY)
# One argv token that no CLI can read as an option: no leading '-', no whitespace, and no
# leading quote (traitlets strips a pair of surrounding quotes from string values).
_TOKEN = re.compile(r"^[A-Za-z0-9_./][^\s]*$")


class KernelSettings(SandboxSpec):
    """Where the kernel's cells run, under which limits, and what is kept of them.

    The limits are ``SandboxSpec``'s (same names, defaults and bounds). A field left unset
    writes no flag into a kernelspec, so the kernel's own default (or a Jupyter config file)
    stays in charge; a field set explicitly, even to its default, is pinned there.
    """

    # (an error does not repeat what it was given: upstream_proxy may hold a password)
    model_config = ConfigDict(**SandboxSpec.model_config, hide_input_in_errors=True)

    timeout: Annotated[float, Field(gt=0, le=7 * 24 * 3600)] | None = Field(
        default=KERNEL_TIMEOUT,
        description="Seconds a cell may run; past it the code is interrupted and keeps its "
        "state if it stops, else the sandbox restarts; none: no limit.",
    )
    ipython: bool = Field(
        default=True,
        description="Run the cells through IPython, as ipykernel does (magics, !commands, rich "
        "display, inline plots), where the sandbox's Python has it; else plain Python.",
    )
    notebook_workspace: bool = Field(
        default=True,
        description="Where workspace is not given, the kernel's own working directory (the "
        "notebook's: Jupyter starts each kernel there) is the workspace: the code works there "
        "as on ipykernel, what it writes published when each cell ends, the versions it "
        "replaces kept in .rewyn/versions, protected paths read-only.",
    )
    provider: str = Field(
        default="auto",
        max_length=40,
        description='"auto": bubblewrap where it works here, else landlock, else subprocess '
        '(and the banner says so); "bubblewrap": the host\'s files and sockets out of reach; '
        '"landlock": the same without namespaces (Landlock and seccomp: the workspace '
        "read-only, an allow-list through the supervisor's connect broker); "
        '"subprocess": against accidents, the host\'s files open; '
        '"container": for code you did not write; or the name a package registers a provider '
        "under (rewyn-kernel doctor lists them).",
    )
    image: str = Field(
        default=DEFAULT_IMAGE,
        max_length=512,
        description="Container image with python3 (3.8+); container provider only.",
    )
    container_runtime: str = Field(
        default="docker",
        max_length=4096,
        description="Container CLI: docker, podman or nerdctl, by name or absolute path; "
        "container provider only.",
    )
    oci_runtime: str | None = Field(
        default=None,
        max_length=4096,
        description='OCI runtime as registered with the engine ("runsc" for gVisor; a path for '
        "podman); none: the engine's default. Container provider only.",
    )
    run_log: Path | None = Field(
        default=None,
        description="JSONL file each cell's whole SANDBOX_EXECUTED event is appended to; none: "
        "the kernel's own, <Jupyter data dir>/rewyn-kernel/runs/<notebook>-<hash>.events.jsonl "
        "(see keep_run_log). A relative path is made absolute against the current directory, "
        "because the kernel runs in each notebook's directory.",
    )
    keep_run_log: bool = Field(
        default=True,
        description="Whether the kernel appends every cell's whole event to a run log (run_log, "
        "or its own one) for rewyn-kernel review; the notebook keeps a compact record either "
        "way. The %sandbox magic keeps no run log.",
    )
    event_output: bool = Field(
        default=False,
        description="Whether each cell also ends with a small output summarising its event "
        "(the cell's metadata keeps its record either way).",
    )
    checkpoints: int = Field(
        default=10,
        ge=0,
        le=20,
        description="How many cells back %undo can go (%undo N: the last N cells; %undo --to N: "
        "back to before cell [N]; the Kernel menu's undo and a cell's Undo back to this cell): "
        "before each cell the kernel keeps the state as a paused copy-on-write fork of the "
        "code's process, dropped oldest first when memory runs short, and never one the memory "
        "cap has no room for; 0: off. Files are not part of it.",
    )
    upstream_proxy: UpstreamProxy = Field(
        default="env",
        max_length=2048,
        repr=False,
        description="With an allow-list (network=[...]): the proxy the host's proxy connects "
        "through, for a host that reaches the internet only so. 'env': the host's HTTPS_PROXY "
        "and HTTP_PROXY (and NO_PROXY), where set; 'none': directly; or a URL "
        "http://[user:password@]host:port (Basic auth; never shown, nor written into a "
        "kernelspec). The allow-list is still decided on the host; isolation.upstream_proxy "
        "says which is used.",
    )
    keep_packages: bool = Field(
        default=True,
        description="Whether what the code installs (%pip install, !pip install) is kept for "
        "the notebook: later kernels of the same notebook have it, from <Jupyter data "
        "dir>/rewyn-kernel/packages/<notebook>-<hash> (rewyn-kernel packages lists and removes "
        "them); it counts against disk_limit_mb. The kernel's alone: the runtime, the MCP "
        "server and %%sandbox keep nothing.",
    )
    trust_output: bool = Field(
        default=False,
        description="Relay the sandbox's HTML and JavaScript unfiltered. Dangerous: output runs "
        "in the frontend with the user's Jupyter credentials, outside any sandbox.",
    )

    @field_validator("provider")
    @classmethod
    def _check_provider_name(cls, value: str) -> str:
        known = (registry.AUTO, *registry.names())
        if value not in known:
            raise ValueError(f"{value!r} is no provider here: use one of {', '.join(known)}")
        return value

    @field_validator("image", "oci_runtime")
    @classmethod
    def _check_token(cls, value: str | None) -> str | None:
        if value is not None and not _TOKEN.match(value):
            raise ValueError(
                f"{value!r} is not usable: no spaces, and it must start with a letter, "
                "digit, '_', '.' or '/'"
            )
        return value

    @field_validator("container_runtime")
    @classmethod
    def _check_cli(cls, value: str) -> str:
        path = Path(value)
        if path.name not in CONTAINER_CLIS or (value != path.name and not path.is_absolute()):
            raise ValueError(
                f"{value!r} is not a container CLI: use docker, podman or nerdctl, "
                "or an absolute path to one of them"
            )
        return value

    @field_validator("run_log")
    @classmethod
    def _absolute_log(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        if not str(value).strip():
            raise ValueError("run_log is empty: give a file path")
        path = Path(os.path.abspath(value.expanduser()))
        if path.is_dir():
            raise ValueError(f"run_log {str(path)!r} is a directory: give a file path")
        return path

    @model_validator(mode="after")
    def _check_provider(self) -> KernelSettings:
        stray = [name for name in CONTAINER_ONLY if name in self.model_fields_set]
        if stray and self.provider != "container":
            raise ValueError(
                f"only the container provider uses {', '.join(stray)}: "
                "also set provider='container'"
            )
        return self

    # -- what is derived ---------------------------------------------------------------------

    def spec(self) -> SandboxSpec:
        """The sandbox's limits alone (with the notebook's directory, for a kernel)."""
        values = {name: getattr(self, name) for name in SandboxSpec.model_fields}
        if isinstance(self.network, NetworkPolicy) and "upstream_proxy" in self.model_fields_set:
            values["network"] = self.network.model_copy(
                update={"upstream_proxy": self.upstream_proxy}
            )
        here = Path.cwd().resolve()
        if self.workspace is None and self.notebook_workspace and not not_a_workspace(here):
            values["workspace"] = here
            if "workspace_name" not in self.model_fields_set:
                values["workspace_name"] = notebook_name()
        return SandboxSpec.model_validate(values)

    def make_provider(self) -> SandboxProvider:
        if self.provider == "container":
            return ContainerProvider(
                image=self.image, runtime=self.container_runtime, oci_runtime=self.oci_runtime
            )
        if self.provider == registry.AUTO:
            return local_provider()
        return registry.make(self.provider)

    def for_kernel(self) -> KernelSettings:
        """These settings as the kernel runs them: with its own run log where none is given,
        and its installs sent where it keeps them (``keep_packages``)."""
        update: dict[str, Any] = {}
        if self.run_log is None and self.keep_run_log:
            update["run_log"] = default_run_log()
        if self.keep_packages:  # (the worker sends installs where the kernel keeps them)
            from rewyn_kernel.kernel.packages import ENV_NAME

            update["env"] = {**self.env, ENV_NAME: "keep"}
        return self.model_copy(update=update) if update else self

    def make_sandbox(self, listeners: Sequence[EventListener] = ()) -> Sandbox:
        """Create the sandbox these settings describe; ``listeners`` get its events."""
        if self.run_log is not None and self.keep_run_log:
            listeners = [*listeners, JsonlRunLog(self.run_log)]
        return create(self.spec(), provider=self.make_provider(), listeners=listeners)

    def flags(self) -> list[str]:
        """The traitlets flags for the fields that were set, in declaration order.

        ``env`` is written only where it was given (``rewyn-kernel install --env``), one flag
        per variable: a kernelspec is a file anyone with the notebook server can read, so a
        secret belongs in ``inherit_env`` (its name only) or a Jupyter config file.
        """
        if "@" in self.upstream_proxy.partition("://")[2].partition("/")[0]:
            raise ValueError(
                "an upstream_proxy with credentials is not written into a kernelspec: set "
                "c.SandboxKernel.upstream_proxy in a Jupyter config file, or leave it 'env' "
                "and give the kernel's process HTTPS_PROXY"
            )
        return [
            f"--{KERNEL_CLASS}.{name}={text}"
            for name in self._given()
            for text in _flag_values(getattr(self, name))
        ]

    def summary(self) -> dict[str, Any]:
        """The fields that were set, as JSON values (for the spec's metadata)."""
        values = self.model_dump(mode="json")
        return {name: values[name] for name in self._given()}

    def _given(self) -> list[str]:
        """The fields set that a kernelspec takes, where the sandbox runs first, then
        in declaration order."""
        written = taken_by(Surface.KERNELSPEC)
        names = [name for name in type(self).model_fields if name in self.model_fields_set]
        names = [name for name in names if name in written]
        return sorted(names, key=lambda name: name not in _PROVIDER_FIELDS)


# -- where each setting is taken -----------------------------------------------------------------


class Surface(Flag):
    """A place that takes settings. ``SETTINGS`` tags each setting with the surfaces that take
    it, and each surface takes exactly those (``taken_by``; tests/test_settings.py checks)."""

    KERNEL = auto()
    """The kernel's traitlets, ``SandboxKernel.<name>``: kernel.json argv, Jupyter config files."""
    KERNELSPEC = auto()
    """The flags a kernelspec's argv carries (``KernelSettings.flags``; a kernel started from one,
    by Jupyter, ``rewyn-kernel run`` or papermill, reads them as ``KERNEL``)."""
    INSTALL = auto()
    """``rewyn-kernel install``'s options (written into the kernelspec it installs)."""
    RUN = auto()
    """``rewyn-kernel run``'s options (written into the kernelspec it runs the notebook on)."""
    MAGIC = auto()
    """The options of ``%%sandbox`` and ``%sandbox config`` (a cell's own)."""
    MAGIC_DEFAULTS = auto()
    """A notebook's defaults for ``%%sandbox``: ``%sandbox config`` keeps them as the magic's
    traits, which ``c.SandboxMagics.<name>`` in an IPython config file also sets."""
    MCP = auto()
    """``rewyn-kernel mcp``'s sandbox options."""
    REVIEW = auto()
    """The limits a review notebook's kernel pins to replay a recorded run (read from its
    events; ``rewyn-kernel install`` options in the command the review prints)."""


@dataclass(frozen=True)
class Option:
    """How one setting is written on a command line (``rewyn-kernel`` and ``%%sandbox``)."""

    flag: str
    metavar: str | None = None
    const: bool | None = None
    """For a boolean setting: the flag alone sets it to this."""


@dataclass(frozen=True)
class Setting:
    """Where one setting is taken, and its flag where a command line takes it."""

    surfaces: Surface
    option: Option | None = None


_KERNEL = Surface.KERNEL | Surface.KERNELSPEC
_COMMANDS = Surface.INSTALL | Surface.RUN
_MAGIC = Surface.MAGIC | Surface.MAGIC_DEFAULTS
_EVERYWHERE = _KERNEL | _COMMANDS | _MAGIC | Surface.MCP
SETTINGS: dict[str, Setting] = {
    # Where the code runs and under which limits.
    "provider": Setting(_EVERYWHERE | Surface.REVIEW, Option("--provider")),
    "image": Setting(_EVERYWHERE, Option("--image")),
    "container_runtime": Setting(
        _EVERYWHERE | Surface.REVIEW, Option("--runtime", "{docker,podman,nerdctl}")
    ),
    "oci_runtime": Setting(_EVERYWHERE | Surface.REVIEW, Option("--oci-runtime", "RUNTIME")),
    "timeout": Setting(_EVERYWHERE | Surface.REVIEW, Option("--timeout", "SECONDS|none")),
    "memory_limit_mb": Setting(_EVERYWHERE | Surface.REVIEW, Option("--memory", "MB|none")),
    "pids_limit": Setting(_EVERYWHERE | Surface.REVIEW, Option("--pids", "N|none")),
    "disk_limit_mb": Setting(_EVERYWHERE | Surface.REVIEW, Option("--disk", "MB|none")),
    "network": Setting(_EVERYWHERE | Surface.REVIEW, Option("--network", "none|allow|HOST,...")),
    "inherit_env": Setting(_EVERYWHERE, Option("--inherit-env", "NAME,...")),
    # Written into a kernelspec only by install's --env, which names the variables a person
    # types (not run's, nor kept as a notebook's default by %sandbox config).
    "env": Setting(
        _KERNEL | Surface.INSTALL | Surface.MAGIC | Surface.MCP, Option("--env", "NAME=VALUE")
    ),
    "output_limit_bytes": Setting(
        _KERNEL | _COMMANDS | Surface.MCP, Option("--output-limit", "BYTES")
    ),
    "ipython": Setting(
        _KERNEL | _COMMANDS | Surface.MCP | Surface.REVIEW, Option("--no-ipython", const=False)
    ),
    # The files the code works on.
    "workspace": Setting(_KERNEL | _MAGIC | Surface.MCP, Option("--workspace", "DIR")),
    "notebook_workspace": Setting(
        _KERNEL | _COMMANDS, Option("--no-notebook-workspace", const=False)
    ),
    "protected": Setting(_EVERYWHERE, Option("--protect", "PATTERN,...")),
    "read_dirs": Setting(_EVERYWHERE, Option("--read", "DIR,...")),
    # What the kernel keeps of each cell, and what it shows.
    "run_log": Setting(_KERNEL | _COMMANDS, Option("--run-log", "PATH")),
    "keep_run_log": Setting(_KERNEL | _COMMANDS, Option("--no-run-log", const=False)),
    "event_output": Setting(_KERNEL | _COMMANDS, Option("--event-output", const=True)),
    "checkpoints": Setting(_KERNEL | _COMMANDS, Option("--checkpoints", "N")),
    "keep_packages": Setting(_KERNEL | _COMMANDS, Option("--no-keep-packages", const=False)),
    "trust_output": Setting(_KERNEL | _COMMANDS, Option("--trust-output", const=True)),
    "upstream_proxy": Setting(
        _KERNEL | _COMMANDS | Surface.MCP, Option("--upstream-proxy", "env|none|URL")
    ),
    # The kernel's alone (traits and config files): no command takes them.
    "workdir": Setting(_KERNEL),
    "startup_timeout": Setting(_KERNEL),
    "python": Setting(_KERNEL),
    "workspace_name": Setting(_KERNEL),
}
"""Every field of ``KernelSettings``: the surfaces that take it, and its flag on a command line,
in the order commands list their options. A new setting gets its row here, and nowhere else."""


@cache
def taken_by(surface: Surface) -> tuple[str, ...]:
    """The settings ``surface`` takes, in ``SETTINGS``' order."""
    return tuple(name for name, setting in SETTINGS.items() if surface in setting.surfaces)


OPTIONS: dict[str, Option] = {
    name: setting.option for name, setting in SETTINGS.items() if setting.option is not None
}
"""The flag of every setting a command line may give, by setting name."""
SANDBOX_SETTINGS = tuple(
    name for name, setting in SETTINGS.items() if _EVERYWHERE in setting.surfaces
)
"""The settings every surface but a review takes (the kernel, its kernelspecs, ``rewyn-kernel
install``/``run``/``mcp`` and the magic), in the order commands list their options."""


def notebook_name(notebook: str | None = None) -> str:
    """The name of the notebook a kernel runs for (or of ``notebook``, a path), as a folder
    name: JupyterLab, Notebook 7 and ``rewyn-kernel run`` tell the kernel its notebook's path in
    ``JPY_SESSION_NAME``."""
    from rewyn_kernel.runtime.workspace import safe_name

    session = notebook or os.environ.get("JPY_SESSION_NAME", "")
    return safe_name(Path(session).stem) if session else "kernel"


def notebook_key(notebook: str | None = None) -> str:
    """What names the notebook a kernel runs for (or ``notebook``, a path) among the host's
    files: its name and a hash of its absolute path (``analysis-1a2b3c4d``); with no notebook
    known, of the working folder."""
    import hashlib

    where = os.path.abspath(notebook or os.environ.get("JPY_SESSION_NAME") or os.getcwd())
    tag = hashlib.sha256(where.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{notebook_name(notebook)}-{tag}"


def host_data_dir(kind: str) -> Path:
    """``kind``'s folder (``runs``, ...) in rewyn-kernel's part of Jupyter's data directory:
    the host's, where no sandbox can write."""
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir(), "rewyn-kernel", kind)


def default_run_log() -> Path:
    """The kernel's own run log when no run_log is given: one per notebook (``notebook_key``),
    in Jupyter's data directory (where no sandbox can write)."""
    return host_data_dir("runs") / f"{notebook_key()}.events.jsonl"


def _flag_values(value: object) -> list[str]:
    # traitlets parses "None", "True" and "False" for Float(allow_none=True) and Bool traits;
    # a List takes one flag per item, or the literal [] for none.
    # A Dict takes one KEY=VALUE flag per item.
    if isinstance(value, tuple):
        return [str(item) for item in value] or ["[]"]
    if isinstance(value, dict):
        return [f"{name}={item}" for name, item in value.items()]
    return [str(value)]  # (an allow-list: its comma form, see NetworkPolicy.__str__)


# -- command-line options ------------------------------------------------------------------------


def plain_type(annotation: Any) -> tuple[Any, bool]:
    """(the type without Annotated or None, whether None is allowed) of a field annotation."""
    nullable = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            nullable = nullable or len(args) < len(typing.get_args(annotation))
            annotation = args[0] if len(args) == 1 else annotation
            if len(args) != 1:
                return annotation, nullable
        else:
            return annotation, nullable


def _number_or_none(kind: type[float] | type[int]) -> Any:
    def parse(text: str) -> float | int | None:
        if text.strip().lower() == "none":
            return None
        try:
            return kind(text)
        except ValueError:
            unit = "seconds" if kind is float else "a whole number"
            what = "a number of seconds" if kind is float else unit
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} or 'none'") from None

    return parse


def option_arguments(
    names: Iterable[str], *, defaults: bool = True
) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """The ``add_argument`` arguments of the settings ``names``: (flags, keywords) each.

    A setting not typed stays absent from the parsed namespace (``from_options`` then leaves
    it unset). ``defaults``: say each default in the help.
    """
    fields = KernelSettings.model_fields
    arguments: list[tuple[tuple[str, ...], dict[str, Any]]] = []
    for name in names:
        option, field = OPTIONS[name], fields[name]
        kind, nullable = plain_type(field.annotation)
        text = (field.description or "").rstrip(".")
        kwargs: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS}
        if name == "network":
            arguments += _host_arguments()
        if option.const is not None:
            kwargs.update(action="store_const", const=option.const)
            if option.const is False:  # the flag turns off what is on by default
                text = f"turn off (on by default): {text[:1].lower()}{text[1:]}"
        elif typing.get_origin(kind) is Literal:
            kwargs["choices"] = typing.get_args(kind)
        elif name == "network":
            kwargs["type"] = _network
        elif kind in (float, int):
            kwargs["type"] = _number_or_none(kind) if nullable else kind
        elif typing.get_origin(kind) is tuple:  # (a list: A,B,...)
            kwargs["type"] = _names
        elif typing.get_origin(kind) is dict:  # (a mapping: one NAME=VALUE per flag)
            kwargs.update(action="append", type=_pair)
        if option.metavar:
            kwargs["metavar"] = option.metavar
        if defaults and option.const is None and kwargs.get("action") != "append":
            text += f" (default: {_shown(field.get_default(call_default_factory=True))})"
        kwargs["help"] = text.replace("%", "%%")
        arguments.append(((option.flag,), kwargs))
    return arguments


def _host_arguments() -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """``--allow-host`` and ``--deny-host``: an allow-list's entries one flag at a time (they
    make ``network`` that list; see runtime/egress/policy.py for the entries' syntax)."""
    return [
        (
            ("--allow-host",),
            {
                "dest": "allow_hosts",
                "action": "append",
                "type": _host,
                "metavar": "HOST",
                "default": argparse.SUPPRESS,
                "help": "let the code reach HOST (a name, name:port, *.domain, an address or "
                "a range; without a port, 80 and 443) through a proxy on the host, and no "
                "other: the network becomes an allow-list (repeat for more hosts)",
            },
        ),
        (
            ("--deny-host",),
            {
                "dest": "deny_hosts",
                "action": "append",
                "type": _host,
                "metavar": "HOST",
                "default": argparse.SUPPRESS,
                "help": "refuse HOST even where an --allow-host entry matches it",
            },
        ),
    ]


def _host(text: str) -> str:
    from rewyn_kernel.runtime.network import parse_rule

    try:
        parse_rule(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


def _network(text: str) -> str:
    """``--network``'s value, read as the spec reads it (an error says what is wrong)."""
    try:
        SandboxSpec._check_network(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(describe_error(exc)) from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _with_hosts(values: dict[str, Any], namespace: argparse.Namespace) -> None:
    """Fold ``--allow-host``/``--deny-host`` into ``values["network"]`` (its comma form)."""
    allow = list(getattr(namespace, "allow_hosts", None) or ())
    deny = list(getattr(namespace, "deny_hosts", None) or ())
    if not allow and not deny:
        return
    given = values.get("network")
    if given in ("none", "allow"):
        raise ValueError(f"--network {given} and --allow-host/--deny-host: give one or the other")
    if given:
        allow[:0] = [part for part in str(given).split(",") if part.strip()]
    if not [entry for entry in allow if not entry.startswith("!")]:
        raise ValueError("--deny-host needs at least one --allow-host (or --network HOST,...)")
    values["network"] = ",".join([*allow, *(f"!{entry}" for entry in deny)])


def add_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    names: Iterable[str],
    *,
    defaults: bool = True,
) -> None:
    """Add the options of the settings ``names`` to ``parser`` (see ``option_arguments``)."""
    for flags, kwargs in option_arguments(names, defaults=defaults):
        parser.add_argument(*flags, **kwargs)


def _shown(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return ",".join(value) or "nothing"
    return str(value)


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--env takes NAME=VALUE, not {text!r}")
    return name, value


def from_options(
    namespace: argparse.Namespace,
    *,
    base: KernelSettings | None = None,
    error: Any = None,
) -> KernelSettings:
    """The settings typed on a command line (over ``base``'s); bad ones go to ``error``
    (``parser.error``) as one line naming the flags, or raise ValueError without it."""
    values: dict[str, Any] = {
        name: getattr(namespace, name) for name in OPTIONS if hasattr(namespace, name)
    }
    if "env" in values:
        values["env"] = dict(values["env"])
    try:
        _with_hosts(values, namespace)
    except ValueError as exc:
        if error is None:
            raise
        error(str(exc))
    stray = [OPTIONS[name].flag for name in CONTAINER_ONLY if name in values]
    provider = values.get("provider", base.provider if base else "subprocess")
    try:
        if stray and provider != "container":
            raise ValueError(f"{', '.join(stray)}: only used with --provider container")
        given = base.model_dump(exclude_unset=True) if base else {}
        return KernelSettings.model_validate({**given, **values})
    except ValidationError as exc:
        message = describe_error(exc)
    except ValueError as exc:
        message = str(exc)
    if error is None:
        raise ValueError(message)
    error(message)
    raise AssertionError("the error callback returned")  # (parser.error exits)


def describe_error(error: ValidationError) -> str:
    """One line for a person: each problem with the flag (or setting) it is about."""
    lines = []
    for item in error.errors():
        field = str(item["loc"][0]) if item["loc"] else ""
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{OPTIONS[field].flag}: {message}" if field in OPTIONS else message)
    return "; ".join(lines)
