"""Names the code chose (files, hosts, messages) reach a terminal or a log line escaped: no
control character, C1 code, DEL, escape sequence or bidi override of theirs acts there."""

from __future__ import annotations

import os
import subprocess
import sys
import unicodedata
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from rewyn_kernel.runtime import create
from rewyn_kernel.runtime._spec import SandboxSpec
from rewyn_kernel.runtime.events import SandboxEvent
from rewyn_kernel.runtime.result import NetworkAttempt, NetworkLog, WorkspaceFiles

HOSTILE = "a\x1b]0;owned\x07b\rc\x9b2Jd\x7fe\u202etxt.f\u2066g\x00h\nj"
"""A title sequence (OSC 0), a carriage return, CSI as one C1 byte, DEL, a right-to-left
override, an isolate, NUL and a new line."""


def acts(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on rather than show (new lines
    aside: a listing has several lines)."""
    bidi = ("LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI")
    return [
        c
        for c in text.replace("\n", "")
        if unicodedata.category(c) in ("Cc", "Cs") or unicodedata.bidirectional(c) in bidi
    ]


def test_the_helper_escapes_every_kind_and_keeps_the_rest() -> None:
    from rewyn_kernel.runtime.printable import printable

    shown = printable(HOSTILE)
    assert shown == ("a\\x1b]0;owned\\x07b\\rc\\x9b2Jd\\x7fe\\u202etxt.f\\u2066g\\x00h\\nj")
    assert printable("résumé 数据.csv") == "résumé 数据.csv"
    assert printable("bad\udcff\udc9b.txt") == "bad\\xff\\x9b.txt"  # (bytes not UTF-8)
    assert printable("two\nlines\r\n", lines=True) == "two\nlines\\r\n"
    assert not acts(printable(HOSTILE, lines=True))


def test_network_lines_and_the_kernels_note_escape_the_host() -> None:
    from rewyn_kernel.kernel.kernel import refused_note

    log = NetworkLog(
        attempts=(
            NetworkAttempt(
                host=HOSTILE, port=80, protocol="socks5", verdict="refused", reason=HOSTILE
            ),
        )
    )
    for text in [*log.lines(), refused_note(log)]:
        assert "\\x1b]0;owned" in text
        assert not acts(text), repr(text)


def test_the_reviews_and_the_undos_file_lists_escape_names() -> None:
    from rewyn_kernel.kernel.undo import Undo
    from rewyn_kernel.notebooks._review_cells import files_output

    files = WorkspaceFiles(
        created=(HOSTILE,),
        changed=(HOSTILE,),
        deleted=(HOSTILE,),
        refused=(HOSTILE,),
        counts={"created": 1, "changed": 1, "deleted": 1, "refused": 1},
    )
    output = files_output(cast(SandboxEvent, SimpleNamespace(files=files)))
    assert output is not None
    text = str(output["data"]["text/plain"])
    undo = "\n".join(Undo._files(cast(Undo, SimpleNamespace(workspace=None)), 3, files))
    for shown in (text, undo):
        assert "\\x1b]0;owned" in shown
        assert not acts(shown), repr(shown)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


def test_the_files_command_escapes_the_names_it_prints(project: Path) -> None:
    """`rewyn-kernel files` lists and restores versions of files the code named: a title
    sequence, a carriage return, CSI as a C1 byte and a name that is not UTF-8 are shown
    escaped, and the listing does not fail on the last."""
    name = "r\x1b]0;owned\x07\rx\x9b2J\u202e.csv"
    not_utf8 = b"bad\xff\x1b[31m.txt"
    (project / name).write_text("the person's\n")
    (project / os.fsdecode(not_utf8)).write_text("the person's\n")
    code = f"open({name!r}, 'w').write('code')\nopen({not_utf8!r}, 'w').write('code')\n"
    with create(SandboxSpec(workspace=project, timeout=60)) as box:
        result = box.execute(code)
        assert result.ok, result.stderr
    listed = files_command(str(project))
    assert listed.returncode == 0, listed.stderr
    assert "r\\x1b]0;owned\\x07\\rx\\x9b2J\\u202e.csv" in listed.stdout
    assert "bad\\xff\\x1b[31m.txt" in listed.stdout
    from rewyn_kernel.runtime.workspace import Workspace

    version = Workspace(project).versions()[0]["id"]
    restored = files_command(str(project), "--restore", version)
    assert restored.returncode == 0, restored.stderr
    for out in (listed, restored):
        assert not acts(out.stdout + out.stderr), repr(out.stdout)
    assert "\\x1b]0;owned" in restored.stdout


def files_command(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "rewyn_kernel.cli", "files", *args]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        errors="surrogateescape",
        timeout=60,
        check=False,
    )
