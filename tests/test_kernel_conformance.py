"""The official kernel conformance suite (jupyter_kernel_test) against the sandbox kernel.

With the samples jupyter_kernel_test uses for ipykernel itself (IPython's completion, pager,
history, ``IPython.display`` and ``clear_output``), and the kernel's default settings.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import jupyter_kernel_test

from .conftest import DATASCIENCE_IMAGE
from .kernel_client import write_spec


class SandboxKernelConformance(jupyter_kernel_test.KernelTests):  # type: ignore[misc]
    kernel_name = "rewyn-conformance"
    language_name = "python"
    file_extension = ".py"
    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('test', file=sys.stderr)"
    completion_samples: ClassVar[list[dict[str, Any]]] = [{"text": "zi", "matches": {"zip"}}]
    complete_code_samples: ClassVar[list[str]] = [
        "1",
        "print('hello, world')",
        "def f(x):\n  return x*2\n\n",
        "%time 1",
        "!ls",
    ]
    incomplete_code_samples: ClassVar[list[str]] = [
        "print('" + "''hello",
        "def f(x):\n  x*2",
        "%%bash\necho",
    ]
    invalid_code_samples: ClassVar[list[str]] = ["import = 7q"]
    code_page_something = "zip?"
    code_generate_error = "raise"
    code_execute_result: ClassVar[list[dict[str, str]]] = [
        {"code": "1+2+3", "result": "6"},
        {"code": "[n*n for n in range(1, 4)]", "result": "[1, 4, 9]"},
    ]
    code_display_data: ClassVar[list[dict[str, str]]] = [
        {
            "code": "from IPython.display import HTML, display; display(HTML('<b>test</b>'))",
            "mime": "text/html",
        },
        {
            "code": "from IPython.display import Math, display; display(Math('\\frac{1}{2}'))",
            "mime": "text/latex",
        },
        {
            "code": "from IPython.display import JSON, display; display(JSON({'a': [1, 2]}))",
            "mime": "application/json",
        },
    ]
    code_history_pattern = "1?2*"
    supported_history_operations = ("tail", "range", "search")
    code_inspect_sample = "zip"
    code_clear_output = "from IPython.display import clear_output; clear_output()"
    flags: ClassVar[list[str]] = []

    _root: ClassVar[tempfile.TemporaryDirectory[str]]

    @classmethod
    def setUpClass(cls) -> None:
        cls._root = tempfile.TemporaryDirectory()
        write_spec(Path(cls._root.name), cls.kernel_name, cls.flags)
        previous = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = cls._root.name
        here = os.getcwd()
        notebook = Path(cls._root.name) / "notebook"  # (its workspace: never the repository)
        notebook.mkdir()
        os.chown(notebook, 1000, 1000)  # (a person's: gVisor runs the code as its owner)
        os.chdir(notebook)
        try:
            super().setUpClass()
        finally:
            os.chdir(here)
            if previous is None:
                os.environ.pop("JUPYTER_PATH")
            else:
                os.environ["JUPYTER_PATH"] = previous

    @classmethod
    def tearDownClass(cls) -> None:
        super().tearDownClass()
        cls._root.cleanup()


class ContainerKernelConformance(SandboxKernelConformance):
    """The same suite on a container kernel (docker, runc), on the data-science image that
    scripts/container-engines.sh builds: IPython there is the image's own (Debian's)."""

    kernel_name = "rewyn-conformance-docker"
    flags: ClassVar[list[str]] = [
        "--SandboxKernel.provider=container",
        f"--SandboxKernel.image={DATASCIENCE_IMAGE}",
    ]
