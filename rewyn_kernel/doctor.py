"""``rewyn-kernel doctor``: what each provider can do on this machine, proven by a real sandbox.

Each provider first checks its pieces (the interpreter, bwrap and the namespaces, the engine
and its image). A provider whose pieces are all there then starts a real sandbox, with the
interpreter it will use, and runs code in it: only a provider that did is reported usable, and
one that did not shows what its start wrote to stderr (a path the sandbox cannot see, an
interpreter that fails). Then which provider ``create()``, the kernel and ``rewyn-kernel mcp``
choose here, with what the chosen one stops on this host (its column of the declared table,
``runtime/stops.py``), and the kernel's own pieces: the kernelspec Jupyter would
start and the JupyterLab extension.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from rewyn_kernel.kernel import kernelspec
from rewyn_kernel.mcp.provider_choice import choose
from rewyn_kernel.runtime import (
    BubblewrapProvider,
    LandlockProvider,
    create,
    local_provider,
    registry,
)
from rewyn_kernel.runtime.container import DEFAULT_IMAGE, ContainerProvider
from rewyn_kernel.runtime.machine import cgroup_support
from rewyn_kernel.runtime.sandbox import (
    CheckItem,
    SandboxProvider,
    SandboxSpec,
    SubprocessProvider,
)
from rewyn_kernel.runtime.stops import Condition, Verdict, settle, stops_for

PROBE = "import sys\nprint('Python %d.%d.%d' % sys.version_info[:3])"
"""What the trial sandbox runs (the worker needs Python 3.8 or newer; so does this)."""
START_SECONDS = 60.0
"""How long the trial sandbox may take to start (a container engine's first start is slow)."""
SHOWN_LINES = 12
"""The last lines of a failed start's stderr that are shown."""


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "doctor",
        help="check what each provider can do here (starting a real sandbox of each), the "
        "kernelspec and the JupyterLab extension",
        description="Check each provider's pieces, then start a real sandbox of each provider "
        "that has them all and run code in it; a start that fails shows what it wrote to "
        "stderr. Exits 1 when no provider could run code.",
    )
    parser.add_argument(
        "--image", default=DEFAULT_IMAGE, help=f"image the containers use (default {DEFAULT_IMAGE})"
    )
    parser.add_argument(
        "--oci-runtime",
        action="append",
        default=[],
        help="also check this OCI runtime (e.g. runsc for gVisor); repeatable",
    )
    parser.add_argument(
        "--python",
        metavar="PATH",
        help="the interpreter the local sandboxes run (default: this one, which the kernel and "
        "rewyn-kernel mcp use)",
    )
    return parser


def main(args: argparse.Namespace) -> int:
    return doctor(args.image, args.oci_runtime, python=args.python)


def doctor(image: str, oci_runtimes: Sequence[str], *, python: str | None = None) -> int:
    """Print, per provider (the built-in ones, then those packages register), its pieces and
    a real sandbox's start; then the memory cgroups, the default provider and the kernel's
    pieces. 0 when some provider ran code, else 1."""
    providers: list[SandboxProvider] = [
        BubblewrapProvider(python=python),
        LandlockProvider(python=python),
        SubprocessProvider(python=python),
    ]
    for cli in ("docker", "podman", "nerdctl"):
        providers.append(ContainerProvider(image=image, runtime=cli))
        providers += [
            ContainerProvider(image=image, runtime=cli, oci_runtime=oci) for oci in oci_runtimes
        ]
    # (and every provider a package registers: made with no options, as a setting names it)
    unmade: list[tuple[str, str]] = []
    for name, entry in registry.entries().items():
        if not entry.builtin:
            try:
                providers.append(registry.make(name))
            except (TypeError, ValueError) as exc:
                unmade.append((f"{name} (from {entry.distribution})", str(exc)))
    usable = 0
    for name, why in unmade:
        print(f"{name}: NOT usable")
        print_items([CheckItem("made", False, why)])
    for problem in registry.problems():
        print(f"registered providers: {problem}")
    for provider in providers:
        items = list(provider.check())
        said: list[str] = []
        if all(item.ok for item in items):
            started, said = start(provider)
            items.append(started)
        ok = all(item.ok for item in items)
        usable += ok
        print(f"{provider.name}: {'usable' if ok else 'NOT usable'}")
        print_items(items)
        for line in said:
            print(f"        stderr| {line}")
    support = cgroup_support()
    mark = "ok" if support.parent is not None else "!!"
    print("memory cgroups (one memory cap for all of a local sandbox's processes):")
    print(f"   [{mark}] {support.detail}" + ("" if support.parent else ": the cap is per process"))
    default = local_provider()
    print(f"default provider (create() and the kernel's provider=auto): {default.name}")
    if isinstance(default, SubprocessProvider) and default.instead_of_bubblewrap:
        print(f"   the host's files are open to the code: {default.instead_of_bubblewrap}")
    print_stops(default)
    print(f"rewyn-kernel mcp without --provider (and --image {image}): {choose(image).said}")
    print("jupyter:")
    print_items(jupyter_checks())
    return 0 if usable else 1


def start(provider: SandboxProvider) -> tuple[CheckItem, list[str]]:
    """Start a real sandbox of ``provider`` and run ``PROBE`` in it: the check's line, and
    the last lines the start wrote to stderr when it failed."""
    began = time.monotonic()
    spec = SandboxSpec(timeout=START_SECONDS, startup_timeout=START_SECONDS)
    try:
        with create(spec, provider=provider) as box:
            result = box.execute(PROBE)
    except Exception as exc:  # (a doctor reports what fails; it does not fail with it)
        return CheckItem("start", False, f"{type(exc).__name__}: {exc}"), []
    seconds = time.monotonic() - began
    if result.exit_code == 0 and result.stdout.startswith("Python "):
        detail = f"a sandbox ran {result.stdout.strip()} ({seconds:.1f} s)"
        return CheckItem("start", True, detail), []
    why = result.message or f"the code ended with exit code {result.exit_code}"
    return CheckItem("start", False, why), result.stderr.splitlines()[-SHOWN_LINES:]


def print_stops(provider: SandboxProvider) -> None:
    """What ``provider`` stops on this host: its column of the declared table
    (``providers/stops/``), each condition looked at here."""
    column = stops_for(provider)
    if column is None:
        print(f"   what {provider.name} stops: it declares nothing (no `stops` column)")
        return
    print(f"   what {provider.name} stops here ({column.value}'s column, conditions settled):")
    width = max(len(verdict.value) for verdict in Verdict)
    given = {}
    if isinstance(provider, SubprocessProvider) and not provider.use_namespaces:
        given[Condition.USER_NAMESPACES] = False  # (turned off: namespaces=False)
    for each in settle(column, given):
        print(f"   {each.verdict.value:<{width}}  {each.row.concern}: {each.says}")


def print_items(items: Sequence[CheckItem]) -> None:
    for item in items:
        print(f"   [{'ok' if item.ok else '!!'}] {item.name}: {item.detail}")


def jupyter_checks() -> list[CheckItem]:
    """The sandbox kernel's kernelspecs Jupyter finds here, and the frontend extension."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_core.paths import jupyter_path

    manager = KernelSpecManager()
    ours = []
    for name, folder in sorted(manager.find_kernel_specs().items()):
        try:
            argv = manager.get_kernel_spec(name).argv
        except (OSError, ValueError):
            continue
        if kernelspec.launches_sandbox_kernel(list(argv)):
            ours.append(f"{name} ({folder})")
    items = [
        CheckItem(
            "kernelspec",
            bool(ours),
            "; ".join(ours)
            or f"none: pip install rewyn-kernel puts {kernelspec.KERNEL_NAME} in place, or "
            "rewyn-kernel install --user",
        )
    ]
    extension = [
        Path(folder) / "rewyn-kernel" / "package.json"
        for folder in jupyter_path("labextensions")
        if (Path(folder) / "rewyn-kernel" / "package.json").is_file()
    ]
    items.append(
        CheckItem(
            "labextension",
            bool(extension),
            str(extension[0].parent)
            if extension
            else "not found: JupyterLab and Notebook 7 will not keep events in cell metadata "
            "(reinstall rewyn-kernel into the environment Jupyter runs in)",
        )
    )
    return items
