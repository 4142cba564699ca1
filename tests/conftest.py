"""Shared fixtures: real sandboxes, closed after each test, and a /proc scan for survivors."""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NoReturn

import pytest

from rewyn_kernel.runtime import create
from rewyn_kernel.runtime.container import ContainerProvider
from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.providers import registry
from rewyn_kernel.runtime.providers.bubblewrap import probe_bubblewrap
from rewyn_kernel.runtime.providers.landlock import LandlockProvider, probe_landlock
from rewyn_kernel.runtime.sandbox import (
    BubblewrapProvider,
    Sandbox,
    SandboxProvider,
    SubprocessProvider,
)

PROVIDERS = ("subprocess", "bubblewrap", "landlock", "docker", "docker+runsc", "podman")
"""The built-in providers (containers use TEST_IMAGE)."""
SHARED = (*PROVIDERS, "relay")
"""What the shared behaviour tests (those that name no providers) run against: the built-in
providers and ``relay``, a provider from a package of its own registered by entry point
(tests/provider_package; tasks.py installs it), made through the registry as a setting would."""
TEST_IMAGE = os.environ.get("REWYN_TEST_IMAGE", "rewyn-test-python:3.11")
DATASCIENCE_IMAGE = os.environ.get("REWYN_DS_IMAGE", "rewyn-datascience:bookworm-3")
"""IPython, NumPy, pandas and matplotlib (scripts/container-engines.sh builds it)."""
PODMAN_OCI_RUNTIME = os.environ.get("REWYN_PODMAN_RUNTIME", "/usr/sbin/runc")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "provider" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("providers")
        kinds = marker.args if marker else SHARED
        metafunc.parametrize("provider", kinds, indirect=True)


def build_provider(kind: str) -> SandboxProvider:
    """The provider a test kind names: 'subprocess', 'bubblewrap', 'landlock', 'docker',
    'docker+runsc', 'podman', 'docker+volume' (its scratch a volume of the engine), or 'relay'
    (registered by entry point)."""
    if kind == "relay":
        if "relay" not in registry.names():
            unavailable(
                "the test provider package is not installed: "
                "pip install --no-deps ./tests/provider_package (tasks.py does)"
            )
        return registry.make("relay")
    if kind == "subprocess":
        return SubprocessProvider()
    if kind == "bubblewrap":
        return BubblewrapProvider()
    if kind == "landlock":
        return LandlockProvider()
    cli, *options = kind.split("+")
    scratch: Literal["host", "volume"] = "volume" if "volume" in options else "host"
    oci = next((option for option in options if option != "volume"), "")
    if cli == "podman":
        oci = oci or PODMAN_OCI_RUNTIME  # podman's default crun fails on hybrid cgroups
    return ContainerProvider(
        image=TEST_IMAGE, runtime=cli, oci_runtime=oci or None, pull="never", scratch=scratch
    )


def unavailable(message: str) -> NoReturn:
    """Skip a test whose tool is missing here; under CI (which installs it), fail instead."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@functools.cache
def engine_problem(kind: str) -> str | None:
    """Why a container provider cannot run here, or None when it can."""
    for item in build_provider(kind).check():
        if not item.ok:
            return f"{item.name}: {item.detail}"
    return None


@pytest.fixture
def provider(request: pytest.FixtureRequest) -> SandboxProvider:
    """The provider under test. A missing engine skips, except under CI, where it fails."""
    kind: str = request.param
    if kind == "bubblewrap" and not (found := probe_bubblewrap()).works:
        unavailable(f"bubblewrap is not usable here ({found.detail}); apt-get install bubblewrap")
    if kind == "landlock" and not (support := probe_landlock()).works:
        unavailable(f"landlock is not usable here ({support.detail})")
    local = ("subprocess", "bubblewrap", "landlock", "relay")
    if kind not in local and (problem := engine_problem(kind)) is not None:
        unavailable(f"{kind} is not usable here ({problem}); run scripts/container-engines.sh")
    return build_provider(kind)


def leftover_containers(provider: SandboxProvider, timeout: float = 5.0) -> list[str]:
    """Containers of this process still listed after ``timeout`` (none for subprocess)."""
    if not isinstance(provider, ContainerProvider):
        return []
    deadline = time.monotonic() + timeout
    while (left := provider.containers()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@contextmanager
def sandboxes(**defaults: Any) -> Iterator[Callable[..., Sandbox]]:
    """``create(**defaults, **kwargs)`` for a test; every sandbox it made is closed after."""
    boxes: list[Sandbox] = []

    def make(**kwargs: Any) -> Sandbox:
        box = create(**{**defaults, **kwargs})
        boxes.append(box)
        return box

    try:
        yield make
    finally:
        for box in boxes:
            box.close()


@pytest.fixture
def make_box(provider: SandboxProvider) -> Iterator[Callable[..., Sandbox]]:
    """Create sandboxes on the provider under test; afterwards, check none is left behind."""
    with sandboxes(provider=provider) as make:
        yield make
    assert leftover_containers(provider) == []


def inside_workdir(box: Sandbox) -> str:
    """The scratch directory as the code in ``box`` sees it."""
    return box.provider.worker_config(box.spec, box.files).cwd


@pytest.fixture
def events() -> Iterator[list[SandboxEvent]]:
    """Collect every SANDBOX_EXECUTED event of the process while the test runs."""
    from rewyn_kernel.runtime.events import add_listener, remove_listener

    seen: list[SandboxEvent] = []
    add_listener(seen.append)
    yield seen
    remove_listener(seen.append)


@pytest.fixture
def marker() -> str:
    """A unique value to put in a sandbox's environment and find again in /proc."""
    return f"rewyn-test-{uuid.uuid4().hex}"


def processes_with(marker: str) -> list[int]:
    """Host pids whose environment holds ``marker`` (any process of that sandbox)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ:
            found.append(int(entry.name))
    return found


def wait_until_gone(marker: str, timeout: float = 3.0) -> list[int]:
    """Return the survivors of ``marker`` once none are left or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        left = processes_with(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)
