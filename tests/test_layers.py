"""The package's other layers (the kernel, the MCP server, the notebooks, the commands) take
the runtime only by its public paths: never one of its private modules (read from the source,
by AST, so an import inside a function counts too)."""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

from .test_api import PUBLIC

PACKAGE = Path(__file__).resolve().parents[1] / "rewyn_kernel"
RUNTIME = PACKAGE / "runtime"

PUBLIC_RUNTIME = {name for name in PUBLIC if name.startswith("rewyn_kernel.runtime")} | {
    f"rewyn_kernel.runtime.{path.stem}" for path in RUNTIME.glob("*.py") if path.stem[0] != "_"
}
"""The runtime's public modules: those tests/test_api.py pins, and its own top-level modules
whose names do not start with '_' (the subpackages host, providers, egress and worker, and the
'_' modules, are its inside)."""

ALLOWED: set[tuple[str, str]] = set()
"""(module, private runtime module) pairs still allowed: none."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    """Whether ``name`` is a module of this package (looked up in its source, not imported)."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported(source: str, package: str) -> Iterator[str]:
    """Every module ``source`` (of ``package``) imports: ``from X import a`` names X, and X.a
    where a is itself a module of this package."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = importlib.util.resolve_name("." * node.level + base, package)
            yield base
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                if is_module(candidate):
                    yield candidate


def private_imports() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if RUNTIME in path.parents:
            continue
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target in imported(path.read_text(), package):
            if target.startswith("rewyn_kernel.runtime") and target not in PUBLIC_RUNTIME:
                found.add((path.relative_to(PACKAGE).as_posix(), target))
    return found


def test_no_module_outside_the_runtime_imports_a_private_runtime_module() -> None:
    found = sorted(private_imports() - ALLOWED)
    assert not found, (
        "import these through a public path (rewyn_kernel.runtime or one of its public "
        "modules; give a name that has none a home in one):\n"
        + "\n".join(f"{module}: {target}" for module, target in found)
    )


def test_each_allowed_exception_is_still_needed() -> None:
    unused = ALLOWED - private_imports()
    assert not unused, f"remove the exceptions no longer used: {sorted(unused)}"


def test_the_check_sees_what_it_looks_for() -> None:
    """A private module named every way an import can name it is seen."""
    source = (
        "import rewyn_kernel.runtime.host.session\n"
        "from rewyn_kernel.runtime import _spec, create\n"
        "from ..runtime.egress.policy import parse_rule\n"
        "def later():\n"
        "    from rewyn_kernel.runtime._tool import assess\n"
        "from rewyn_kernel.runtime.sandbox import create\n"
    )
    seen = set(imported(source, "rewyn_kernel.kernel")) - PUBLIC_RUNTIME
    assert seen == {
        "rewyn_kernel.runtime.host.session",
        "rewyn_kernel.runtime._spec",
        "rewyn_kernel.runtime.egress.policy",
        "rewyn_kernel.runtime._tool",
    }
