"""The sandbox kernel's settings: traitlets mirroring SandboxSpec and the provider choice.

A mixin of ``SandboxKernel``, so they are configured as ``SandboxKernel.<name>`` from
kernel.json argv, Jupyter config files or the command line. ``kernelspec.KernelSettings`` is
their pydantic twin that writes those argv flags (tests/test_kernelspec.py parses the flags it
writes with these traits).
"""

from __future__ import annotations

from pathlib import Path

from traitlets import Bool, Dict, Enum, Float, HasTraits, Int, List, Unicode

from rewyn_kernel.runtime import ContainerProvider, JsonlRunLog, SubprocessProvider, create
from rewyn_kernel.runtime.events import EventListener
from rewyn_kernel.runtime.sandbox import (
    DEFAULT_INHERIT_ENV,
    Sandbox,
    SandboxProvider,
    SandboxSpec,
)


class SandboxSettings(HasTraits):
    """What sandbox the kernel runs its cells in, and what it keeps of them."""

    provider = Enum(
        ["subprocess", "container"],
        default_value="subprocess",
        help="Where cells run: 'subprocess' (bounds accidents) or 'container' (for code you "
        "did not write).",
    ).tag(config=True)
    image = Unicode(
        "python:3.13-slim", help="Container image (provider='container'); needs python3."
    ).tag(config=True)
    container_runtime = Unicode(
        "docker", help="Container CLI: docker, podman, nerdctl, or a path."
    ).tag(config=True)
    oci_runtime = Unicode(
        None,
        allow_none=True,
        help="OCI runtime for containers, e.g. 'runsc' (gVisor); None: the engine's default.",
    ).tag(config=True)
    timeout = Float(
        30.0,
        allow_none=True,
        help="Seconds a cell may run before the sandbox is killed (its state is lost); None: "
        "no limit.",
    ).tag(config=True)
    memory_limit_mb = Int(
        None, allow_none=True, help="Memory cap of the sandbox in MiB; None: no cap."
    ).tag(config=True)
    network = Enum(
        ["none", "allow"], default_value="none", help="'none' cuts the sandbox off any network."
    ).tag(config=True)
    inherit_env = List(
        Unicode(),
        default_value=list(DEFAULT_INHERIT_ENV),
        help="Variables of the kernel's environment passed into the sandbox ('PREFIX*' allowed).",
    ).tag(config=True)
    env = Dict(
        value_trait=Unicode(),
        help="Variables set in the sandbox (keep secrets out of kernel.json).",
    ).tag(config=True)
    output_limit_bytes = Int(
        1024 * 1024, help="Bytes of stdout and of stderr shown per cell (head and tail kept)."
    ).tag(config=True)
    workdir = Unicode(
        None,
        allow_none=True,
        help="Scratch directory (the code's cwd and HOME); None: a fresh "
        "one, removed when the kernel stops.",
    ).tag(config=True)
    run_log = Unicode(
        None, allow_none=True, help="Append every SANDBOX_EXECUTED event to this JSONL file."
    ).tag(config=True)
    event_output = Bool(
        True, help="Add a one-line persisted output per cell with its SANDBOX_EXECUTED event."
    ).tag(config=True)
    trust_output = Bool(
        False,
        help="Relay the sandbox's rich output unfiltered (HTML with scripts, JavaScript). Only "
        "for code you trust: in a live frontend it runs with your Jupyter credentials.",
    ).tag(config=True)

    def make_sandbox(self, listeners: list[EventListener]) -> Sandbox:
        """Create the sandbox these settings describe; ``listeners`` get its events."""
        provider: SandboxProvider
        if self.provider == "container":
            provider = ContainerProvider(
                image=self.image, runtime=self.container_runtime, oci_runtime=self.oci_runtime
            )
        else:
            provider = SubprocessProvider()
        if self.run_log:
            listeners = [*listeners, JsonlRunLog(self.run_log)]
        spec = SandboxSpec.model_validate(
            {
                "timeout": self.timeout,
                "network": self.network,
                "memory_limit_mb": self.memory_limit_mb,
                "inherit_env": tuple(self.inherit_env),
                "env": dict(self.env),
                "output_limit_bytes": self.output_limit_bytes,
                "workdir": Path(self.workdir) if self.workdir else None,
            }
        )
        return create(spec, provider=provider, listeners=listeners)
