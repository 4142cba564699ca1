"""The first part of the worker program: make the worker's modules importable from their text.

The host sends this file, then ``install(SOURCES)`` and the call of ``main`` (see
``host/protocol.worker_program``), as the one program a sandbox's bootstrap reads from stdin.
The modules become the package ``rewyn_worker`` in the sandbox, whatever the interpreter has
installed, so an image needs nothing but ``python3``; their frames carry ``<rewyn-worker/...>``
file names, which the tracebacks of the code leave out.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Dict, Optional, Sequence

PACKAGE = "rewyn_worker"


class SourceFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``rewyn_worker`` and its modules in a dict of module name -> source text."""

    def __init__(self, sources: Dict[str, str]) -> None:
        self.sources = sources

    def find_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]] = None,
        target: Optional[types.ModuleType] = None,
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname == PACKAGE:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        package, _, name = fullname.partition(".")
        if package == PACKAGE and name in self.sources:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__.partition(".")[2] or "__init__"
        filename = "<rewyn-worker/%s.py>" % name
        exec(compile(self.sources.get(name, ""), filename, "exec"), module.__dict__)


def install(sources: Dict[str, str]) -> None:
    sys.meta_path.insert(0, SourceFinder(sources))
