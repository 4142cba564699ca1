"""The official kernel conformance suite (jupyter_kernel_test) against the sandbox kernel.

The persisted event output is turned off here: the suite expects exactly the outputs the
code makes. Not offered, so not claimed: history, the pager and clear_output.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import jupyter_kernel_test

from .kernel_client import write_spec


class SandboxKernelConformance(jupyter_kernel_test.KernelTests):  # type: ignore[misc]
    kernel_name = "rewyn-conformance"
    language_name = "python"
    file_extension = ".py"
    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('test', file=sys.stderr)"
    completion_samples: ClassVar[list[dict[str, Any]]] = [
        {"text": "zi", "matches": {"zip("}},
    ]
    complete_code_samples: ClassVar[list[str]] = [
        "1",
        "print('hello, world')",
        "def f(x):\n  return x\n",
    ]
    incomplete_code_samples: ClassVar[list[str]] = ["print('''hello", "def f(x):\n  x += 1"]
    invalid_code_samples: ClassVar[list[str]] = ["import = 7q"]
    code_generate_error = "raise ValueError('boom')"
    code_execute_result: ClassVar[list[dict[str, str]]] = [
        {"code": "1 + 2 + 3", "result": "6"},
        {"code": "[n * n for n in range(3)]", "result": "[0, 1, 4]"},
    ]
    code_display_data: ClassVar[list[dict[str, str]]] = [
        {"code": "display({'image/png': 'iVBORw0KGgo='}, raw=True)", "mime": "image/png"},
        {"code": "display({'text/html': '<b>x</b>'}, raw=True)", "mime": "text/html"},
    ]
    code_inspect_sample = "zip"

    # Features this kernel does not offer: not collected, rather than reported as skipped.
    test_clear_output = None
    test_history = None
    test_pager = None

    _root: ClassVar[tempfile.TemporaryDirectory[str]]

    @classmethod
    def setUpClass(cls) -> None:
        cls._root = tempfile.TemporaryDirectory()
        write_spec(Path(cls._root.name), cls.kernel_name, ["--SandboxKernel.event_output=False"])
        previous = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = cls._root.name
        try:
            super().setUpClass()
        finally:
            if previous is None:
                os.environ.pop("JUPYTER_PATH")
            else:
                os.environ["JUPYTER_PATH"] = previous

    @classmethod
    def tearDownClass(cls) -> None:
        super().tearDownClass()
        cls._root.cleanup()
