"""Each setting is declared once (rewyn_kernel.settings) and tagged with the surfaces that take
it; the kernel's traits, the kernelspec's flags, the commands' and the magic's options and a
review's limits are derived from that, and each surface is checked to take exactly its tags."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

import pytest
from traitlets.config import Application, Config, Configurable

from rewyn_kernel.kernel._settings import SandboxSettings, settings_from_argv, trait_value
from rewyn_kernel.kernel.kernel import SandboxKernel
from rewyn_kernel.kernel.magic import MAGIC_SETTINGS, SandboxMagics
from rewyn_kernel.runtime.container import DEFAULT_IMAGE
from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.sandbox import SandboxSpec
from rewyn_kernel.settings import (
    KERNEL_CLASS,
    KERNEL_TIMEOUT,
    OPTIONS,
    SETTINGS,
    KernelSettings,
    Surface,
    add_options,
    from_options,
    plain_type,
    taken_by,
)

PACKAGE = Path(__file__).resolve().parents[1] / "rewyn_kernel"


def test_the_limits_are_the_sandbox_specs_own_fields() -> None:
    """Inherited, but for the two defaults a notebook needs otherwise (a cell that trains a
    model runs for minutes; a notebook expects IPython), whose types and bounds stay the same."""
    for name, field in SandboxSpec.model_fields.items():
        mine = KernelSettings.model_fields[name]
        if name in ("timeout", "ipython"):
            assert repr(mine.annotation) == repr(field.annotation)
            assert mine.default != field.default
            continue
        assert (mine.annotation, mine.default, mine.description) == (
            field.annotation,
            field.default,
            field.description,
        )
    assert KernelSettings().timeout == KERNEL_TIMEOUT == 600
    assert KernelSettings().ipython is True
    assert SandboxSpec().ipython is False


def test_every_setting_is_a_kernel_trait_with_its_default_and_help() -> None:
    traits = SandboxKernel.class_traits(config=True)
    defaults = KernelSettings()
    for name, field in KernelSettings.model_fields.items():
        trait = traits[name]
        assert trait.help == field.description
        value = getattr(defaults, name)
        expected = list(value) if isinstance(value, tuple) else value
        expected = str(expected) if isinstance(expected, Path) else expected
        assert trait.default() == expected, name
    assert set(traits) >= set(KernelSettings.model_fields)
    assert {name for name in traits if name in SandboxSettings.class_traits()} == set(
        KernelSettings.model_fields
    )


def test_the_magic_takes_the_same_settings_with_the_same_defaults() -> None:
    traits = SandboxMagics.class_traits(config=True)
    for name in MAGIC_SETTINGS:
        assert traits[name].default() == SandboxKernel.class_traits()[name].default()


def test_every_option_names_a_setting_and_parses_into_it() -> None:
    assert set(OPTIONS) <= set(KernelSettings.model_fields)
    parser = argparse.ArgumentParser()
    add_options(parser, OPTIONS)
    args = parser.parse_args(
        [
            "--provider=container",
            "--runtime=podman",
            "--timeout=none",
            "--memory=256",
            "--inherit-env=PATH,LC_*",
            "--env",
            "A=1",
            "--env",
            "B==2",
            "--output-limit=4096",
            "--event-output",
            "--no-ipython",
        ]
    )
    settings = from_options(args)
    assert settings.model_fields_set == {
        "provider",
        "container_runtime",
        "timeout",
        "memory_limit_mb",
        "inherit_env",
        "env",
        "output_limit_bytes",
        "event_output",
        "ipython",
    }
    assert settings.timeout is None
    assert settings.inherit_env == ("PATH", "LC_*")
    assert settings.env == {"A": "1", "B": "=2"}
    assert settings.event_output is True
    assert settings.ipython is False


def test_the_flags_a_kernelspec_carries_read_back_as_the_same_settings() -> None:
    settings = KernelSettings(
        provider="container",
        oci_runtime="runsc",
        timeout=None,
        memory_limit_mb=256,
        inherit_env=("PATH",),
        output_limit_bytes=4096,
        trust_output=True,
    )
    assert settings_from_argv(settings.flags()) == settings
    nothing = KernelSettings(inherit_env=())
    assert nothing.flags() == ["--SandboxKernel.inherit_env=[]"]
    assert settings_from_argv(nothing.flags()).inherit_env == ()
    app = Application()
    app.parse_command_line(KernelSettings(inherit_env=("PATH", "TZ")).flags())
    assert SandboxKernel(config=app.config).settings().inherit_env == ("PATH", "TZ")


def test_a_bad_setting_in_a_config_file_names_the_setting() -> None:
    with pytest.raises(ValueError, match="--memory: Input should be greater than or equal to 32"):
        settings_from_argv(["--SandboxKernel.memory_limit_mb=8"])


def test_the_default_image_is_spelt_out_once() -> None:
    sources = [path for path in PACKAGE.rglob("*.py")]
    spelt = [path.relative_to(PACKAGE) for path in sources if DEFAULT_IMAGE in path.read_text()]
    assert spelt == [Path("runtime/providers/container/provider.py")]


# -- every surface takes exactly the settings tagged for it --------------------------------------


def samples(tmp_path: Path) -> dict[str, Any]:
    """A value for every setting, none of them its default, all valid together."""
    for folder in ("workspace", "workdir", "read"):
        (tmp_path / folder).mkdir(exist_ok=True)
    values: dict[str, Any] = {
        "provider": "container",
        "image": "python:3.12-slim",
        "container_runtime": "podman",
        "oci_runtime": "runsc",
        "timeout": 7.0,
        "memory_limit_mb": 256,
        "pids_limit": 64,
        "disk_limit_mb": None,  # (a quota cannot cover a workdir given)
        "network": "allow",
        "inherit_env": ("PATH",),
        "env": {"MODE": "sample"},
        "output_limit_bytes": 4096,
        "ipython": False,
        "workspace": tmp_path / "workspace",
        "notebook_workspace": False,
        "protected": ("*.key",),
        "read_dirs": (tmp_path / "read",),
        "run_log": tmp_path / "runs.jsonl",
        "keep_run_log": False,
        "event_output": True,
        "checkpoints": 3,
        "keep_packages": False,
        "trust_output": True,
        "upstream_proxy": "http://proxy.test:3128",
        "workdir": tmp_path / "workdir",
        "startup_timeout": 12.0,
        "python": sys.executable,
        "workspace_name": "sample",
    }
    assert list(values) == list(SETTINGS), "give the new setting a sample value here"
    defaults = KernelSettings()
    assert not [
        name
        for name in values
        if getattr(KernelSettings(**values), name) == getattr(defaults, name)
    ]
    return values


def words(names: Iterable[str], values: dict[str, Any]) -> list[str]:
    """The command-line words that give ``values`` of the settings ``names`` (their flags)."""
    out: list[str] = []
    for name in names:
        assert name in OPTIONS, f"{name} is given by a flag of its own, not its setting's"
        option, value = OPTIONS[name], values[name]
        if option.const is not None:
            assert value == option.const, name
            out.append(option.flag)
        elif isinstance(value, dict):
            out += [word for item in value.items() for word in (option.flag, "=".join(item))]
        elif isinstance(value, tuple):
            out += [option.flag, ",".join(map(str, value))]
        else:
            out += [option.flag, "none" if value is None else str(value)]
    return out


def arrived(settings: KernelSettings, names: Iterable[str], tmp_path: Path) -> set[str]:
    """Which of ``names`` hold their sample value in ``settings``."""
    expected = KernelSettings(**samples(tmp_path))
    return {name for name in names if getattr(settings, name) == getattr(expected, name)}


def offered(parser: argparse.ArgumentParser) -> set[str]:
    """The settings ``parser`` has an option for."""
    return {action.dest for action in parser._actions} & set(KernelSettings.model_fields)


def subparsers() -> argparse._SubParsersAction[argparse.ArgumentParser]:
    return argparse.ArgumentParser().add_subparsers()


def taken_by_kernel(tmp_path: Path) -> tuple[set[str], set[str]]:
    traits = set(SandboxKernel.class_traits(config=True)) & set(KernelSettings.model_fields)
    values = samples(tmp_path)
    config = Config()
    for name in traits:
        config[KERNEL_CLASS][name] = trait_value(values[name])
    reader = type(KERNEL_CLASS, (Configurable, SandboxSettings), {})(config=config)
    return traits, arrived(cast(SandboxSettings, reader).settings(), traits, tmp_path)


def taken_by_kernelspec(tmp_path: Path) -> tuple[set[str], set[str]]:
    """Each setting alone (with the container provider), written as a kernelspec's flags and
    read back as the kernel reads them; one that is refused, or not written, is not offered."""
    values, offers, written = samples(tmp_path), set(), set()
    for name, value in values.items():
        try:
            flags = KernelSettings(**{"provider": "container", name: value}).flags()
        except ValueError:
            continue
        if any(flag.startswith(f"--{KERNEL_CLASS}.{name}=") for flag in flags):
            offers.add(name)
        written |= arrived(settings_from_argv(flags), [name], tmp_path)
    return offers, written


def taken_by_install(tmp_path: Path) -> tuple[set[str], set[str]]:
    from rewyn_kernel import cli

    names = offered(cli._add_install_parser(subparsers()))
    prefix = tmp_path / "prefix"
    argv = ["install", "--prefix", str(prefix), "--name", "surfaces"]
    assert cli.main([*argv, *words(names, samples(tmp_path))]) == 0
    spec = json.loads((prefix / "share/jupyter/kernels/surfaces/kernel.json").read_text())
    return names, arrived(settings_from_argv(spec["argv"]), names, tmp_path)


def taken_by_run(tmp_path: Path) -> tuple[set[str], set[str]]:
    from rewyn_kernel import cli

    parser = cli._add_run_parser(subparsers())
    names = offered(parser)
    args = parser.parse_args(["in.ipynb", *words(names, samples(tmp_path))])
    return names, arrived(cli._settings(args, parser), names, tmp_path)


def taken_by_magic(tmp_path: Path) -> tuple[set[str], set[str]]:
    parser = SandboxMagics.sandbox.parser
    names = offered(parser)
    args = parser.parse_args(words(names, samples(tmp_path)))
    return names, arrived(SandboxMagics()._merged(args), names, tmp_path)


def taken_by_magic_defaults(tmp_path: Path) -> tuple[set[str], set[str]]:
    """What ``%sandbox config`` keeps of every option the magic has (as its traits)."""
    parser = SandboxMagics.sandbox.parser
    magics = SandboxMagics()
    magics._configure(parser.parse_args(words(offered(parser), samples(tmp_path))))
    names = set(SandboxMagics.class_traits(config=True)) & set(KernelSettings.model_fields)
    expected = KernelSettings(**samples(tmp_path))
    kept = {name for name in names if getattr(magics, name) == trait_value(getattr(expected, name))}
    return names, kept


def taken_by_mcp(tmp_path: Path) -> tuple[set[str], set[str]]:
    from rewyn_kernel.mcp.command import add_parser, options_from

    parser = add_parser(subparsers())
    names = offered(parser)
    options, _ = options_from(parser.parse_args(words(names, samples(tmp_path))), parser)
    return names, arrived(options.sandbox_settings(), names, tmp_path)


def taken_by_review(tmp_path: Path) -> tuple[set[str], set[str]]:
    """What a review pins of a recorded run whose spec holds every setting, and whether the
    install command it prints gives each."""
    from rewyn_kernel import cli
    from rewyn_kernel.notebooks.review import install_command, limits_of

    recorded = KernelSettings(**samples(tmp_path))
    event = SandboxEvent.model_construct(
        provider=f"container/{recorded.container_runtime}+{recorded.oci_runtime}",
        spec=recorded.model_dump(mode="json"),
    )
    limits = limits_of(event)
    assert limits is not None
    parser = cli._add_install_parser(subparsers())
    args = parser.parse_args(shlex.split(install_command("surfaces", limits))[2:])
    return set(limits), arrived(cli._settings(args, parser), limits, tmp_path)


TAKES: dict[Surface, Callable[[Path], tuple[set[str], set[str]]]] = {
    Surface.KERNEL: taken_by_kernel,
    Surface.KERNELSPEC: taken_by_kernelspec,
    Surface.INSTALL: taken_by_install,
    Surface.RUN: taken_by_run,
    Surface.MAGIC: taken_by_magic,
    Surface.MAGIC_DEFAULTS: taken_by_magic_defaults,
    Surface.MCP: taken_by_mcp,
    Surface.REVIEW: taken_by_review,
}
"""How each surface is given every setting it offers: (what it offers, what arrives)."""


@pytest.mark.parametrize("surface", list(Surface), ids=lambda surface: surface.name.lower())
def test_each_surface_takes_exactly_the_settings_tagged_for_it(
    surface: Surface, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A surface offering a setting not tagged for it fails here, as does a tagged one that
    it does not offer, or offers but drops on the way to the sandbox's settings."""
    monkeypatch.chdir(tmp_path)
    offers, takes = TAKES[surface](tmp_path)
    tagged = set(taken_by(surface))
    assert offers - tagged == set(), f"{surface} offers settings not tagged for it"
    assert tagged - offers == set(), f"{surface} does not offer settings tagged for it"
    assert tagged - takes == set(), f"{surface} drops settings tagged for it"


def test_every_setting_has_its_row_and_a_flag_where_a_command_takes_it() -> None:
    assert list(SETTINGS) == [name for name in SETTINGS if name in KernelSettings.model_fields]
    assert set(SETTINGS) == set(KernelSettings.model_fields)
    commands = Surface.INSTALL | Surface.RUN | Surface.MAGIC | Surface.MCP
    for name, setting in SETTINGS.items():
        assert (setting.option is not None) == bool(setting.surfaces & commands), name
    assert set(taken_by(Surface.REVIEW)) <= set(taken_by(Surface.INSTALL))  # (its command)


def test_the_traits_the_kernel_reads_are_typed_as_their_settings() -> None:
    hints = typing.get_type_hints(SandboxSettings)
    mine = {name: hints[name] for name in SandboxSettings.__annotations__}
    assert mine, "the kernel reads some traits as attributes"
    for name, hint in mine.items():
        assert name in taken_by(Surface.KERNEL)
        assert plain_type(hint) == plain_type(KernelSettings.model_fields[name].annotation)
