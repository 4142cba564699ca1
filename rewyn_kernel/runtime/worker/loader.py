"""The first part of the worker program: make the worker's modules importable from their text.

The host sends this file and the call of ``main``, as the program a sandbox's bootstrap reads
from stdin, then the modules: their text, or, where the sandbox runs the host's own interpreter,
their code, compiled and marshalled (see ``host/protocol.worker_program``).
The modules become the package ``rewyn_worker`` in the sandbox, whatever the interpreter has
installed, so an image needs nothing but ``python3``; their frames carry ``<rewyn-worker/...>``
file names, which the tracebacks of the code leave out.
"""

from __future__ import annotations

import sys
import types
from importlib.machinery import ModuleSpec

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import; the worker runs without it)
    from typing import Dict, Optional, Sequence, Union

PACKAGE = "rewyn_worker"


class SourceFinder:
    """Finds ``rewyn_worker`` and its modules in a dict of module name -> source text.

    A meta path finder and loader by protocol (``find_spec``, ``create_module``,
    ``exec_module``): ``importlib.abc`` would import half of ``importlib.resources`` first.
    """

    def __init__(self, sources: Dict[str, Union[str, types.CodeType]]) -> None:
        self.sources = sources

    def find_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]] = None,
        target: Optional[types.ModuleType] = None,
    ) -> Optional[ModuleSpec]:
        if fullname == PACKAGE:
            return ModuleSpec(fullname, self, is_package=True)  # type: ignore[arg-type]
        package, _, name = fullname.partition(".")
        if package == PACKAGE and name in self.sources:
            return ModuleSpec(fullname, self)  # type: ignore[arg-type]
        return None

    def create_module(self, spec: ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__.partition(".")[2] or "__init__"
        code = self.sources.get(name, "")
        if isinstance(code, str):  # (text, where the host's interpreter is not this one)
            code = compile(code, "<rewyn-worker/%s.py>" % name, "exec")
        exec(code, module.__dict__)


def install(sources: Dict[str, Union[str, types.CodeType]]) -> None:
    sys.meta_path.insert(0, SourceFinder(sources))
