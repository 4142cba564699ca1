"""Each setting is declared once (rewyn_kernel.settings); the kernel's traits, the kernelspec's
flags, the command's options and the magic's options are derived from that declaration."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from traitlets.config import Application

from rewyn_kernel.kernel._settings import SandboxSettings, settings_from_argv
from rewyn_kernel.kernel.kernel import SandboxKernel
from rewyn_kernel.kernel.magic import MAGIC_SETTINGS, SandboxMagics
from rewyn_kernel.runtime.container import DEFAULT_IMAGE
from rewyn_kernel.runtime.sandbox import SandboxSpec
from rewyn_kernel.settings import (
    KERNEL_TIMEOUT,
    OPTIONS,
    KernelSettings,
    add_options,
    from_options,
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
    assert spelt == [Path("runtime/providers/container.py")]
