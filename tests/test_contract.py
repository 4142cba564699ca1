"""The provider contract: what a provider imports, how providers are found by name, and a
provider from a package of its own (tests/provider_package) run through the registry.

The shared behaviour tests run on that provider too (tests/conftest.py: the ``relay`` kind)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib.metadata import entry_points

import pytest

from rewyn_kernel.runtime import create
from rewyn_kernel.runtime.host.base import BaseSandbox
from rewyn_kernel.runtime.providers import registry
from rewyn_kernel.runtime.providers.base import SandboxProvider, ScratchError
from rewyn_kernel.runtime.providers.local.files import LocalFiles
from rewyn_kernel.settings import KernelSettings

from .test_layers import PACKAGE, imported, module_name

RUNTIME = "rewyn_kernel.runtime"
MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """Every module of the package ``name`` imports (test_layers.py reads them: at the top, in
    a function, or for type checking alone; a cycle through type-only imports is a cycle of the
    layers all the same)."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    return {module for module in imported(MODULES[name].read_text(), package) if module in MODULES}


def reachable(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for module in imports_of(todo.pop()):
            if module not in seen:
                seen.add(module)
                todo.append(module)
    return seen


def cycles(names: list[str]) -> Iterator[list[str]]:
    """The strongly connected groups of more than one module among ``names`` (Tarjan's)."""
    graph = {name: imports_of(name) & set(names) for name in names}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for name in names:
        if name not in index:
            visit(name)
    yield from groups


def folder(name: str) -> str:
    """The layer a runtime module belongs to: host, providers, worker, egress or the top."""
    parts = name.split(".")
    return parts[2] if len(parts) > 3 else "(top)"


def test_the_contract_imports_nothing_above_it() -> None:
    """providers/base.py names the spec and the result models and the worker's config (its
    records, standard library alone), and nothing of the host, the providers or the pool, even
    for type checking."""
    assert reachable(f"{RUNTIME}.providers.base") == {
        f"{RUNTIME}._spec",
        f"{RUNTIME}._result",
        f"{RUNTIME}.egress.policy",  # (the spec's network field)
        f"{RUNTIME}.printable",  # (the result's network records name hosts escaped)
        f"{RUNTIME}.worker.config",
        f"{RUNTIME}.worker.record",
    }


def test_no_import_cycle_crosses_a_layer() -> None:
    """host/ and providers/ (and worker/, egress/) do not import each other in a circle: the
    host reaches providers through the contract alone, and providers build on the host."""
    runtime = [name for name in MODULES if name.startswith(f"{RUNTIME}.")]
    crossing = [group for group in cycles(runtime) if len({folder(n) for n in group}) > 1]
    assert crossing == []
    host = [name for name in runtime if folder(name) == "host"]
    for name in host:
        above = {m for m in imports_of(name) if folder(m) == "providers"}
        assert above <= {f"{RUNTIME}.providers.base"}, (name, above)


def test_the_built_in_providers_are_registered_as_the_registry_says() -> None:
    ours = [
        p for p in entry_points(group=registry.GROUP) if p.dist and p.dist.name == "rewyn-kernel"
    ]
    assert {point.name: point.value for point in ours} == dict(registry.BUILTIN)
    assert list(registry.names())[:4] == ["bubblewrap", "landlock", "subprocess", "container"]
    assert registry.problems() == ()


def test_a_provider_registered_by_a_package_is_made_by_name_and_runs_code() -> None:
    entry = registry.entries()["relay"]
    assert entry.distribution == "rewyn-relay-provider"
    assert not entry.builtin
    settings = KernelSettings(provider="relay", notebook_workspace=False)
    provider = settings.make_provider()
    assert isinstance(provider, SandboxProvider)
    with settings.make_sandbox() as box:
        # (no sandbox class of its own: the host's, with the host's default files)
        assert type(box) is BaseSandbox
        assert isinstance(box.files, LocalFiles)
        result = box.execute("open('made.txt', 'w').write('by relay'); print('ran')")
        assert (result.stdout, result.provider) == ("ran\n", "relay")
        assert box.read_file("made.txt") == b"by relay"
        assert result.isolation is not None
        assert "registered by entry point" in " ".join(result.isolation.notes)


def test_an_unknown_provider_name_says_which_are_known() -> None:
    with pytest.raises(ValueError, match="known ones are auto, bubblewrap, landlock, subprocess"):
        registry.make("no-such-provider")
    with pytest.raises(ValueError, match="is no provider here: use one of auto, bubblewrap"):
        KernelSettings(provider="no-such-provider")
    with pytest.raises(ValueError, match="cannot be made: TypeError"):
        registry.make("subprocess", no_such_option=1)


def test_files_kept_on_the_host_are_reached_through_the_sandbox_and_removed_with_it() -> None:
    with create(provider=registry.make("subprocess")) as box:
        box.execute(
            "import os; os.makedirs('d'); open('d/f', 'w').write('x'); os.symlink('/etc', 'l')"
        )
        files = box.files
        assert files.host_path == box.workdir
        listed = [(entry.name, entry.kind) for entry in box.list_files()]
        assert listed == [(".tmp", "dir"), ("d", "dir"), ("l", "link")]
        assert set(files.facts(limit=100, depth=4, hidden_folders=False)) == {"d/f"}
        with pytest.raises(ScratchError):
            box.read_file("l/passwd")
        files.empty()  # (the worker's own temporary folder stays, emptied)
        assert [entry.name for entry in box.list_files()] == [".tmp"]
        folder = box.workdir
    assert not folder.exists()
