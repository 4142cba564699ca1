"""The workspace as a state machine (Hypothesis): random sequences of the code's operations, the
person's edits between executions and restores, on a real bubblewrap sandbox; after each step,
what the person had is still theirs.

Invariants after every step: every content the person had (last written by them) is in the
folder or in a kept version; the protected paths are unchanged; no link of the folder resolves
outside it; nothing raised out of ``execute()`` (nor, at the end, out of ``close()``).

Bounded for CI (``REWYN_STATEFUL_EXAMPLES``, 15 by default, of 10 steps each); raise it for a
longer run: ``REWYN_STATEFUL_EXAMPLES=500 pytest tests/test_workspace_stateful.py``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from rewyn_kernel.runtime import SandboxSpec, create
from rewyn_kernel.runtime.host import workspace as workspace_module
from rewyn_kernel.runtime.host.workspace import STORE, Workspace
from rewyn_kernel.runtime.providers.bubblewrap import probe_bubblewrap
from rewyn_kernel.runtime.sandbox import BubblewrapProvider

from .conftest import unavailable

EXAMPLES = int(os.environ.get("REWYN_STATEFUL_EXAMPLES", "15"))

NAMES = st.sampled_from(
    ["a", "b", "c", "notes.txt", "data", "data/a.csv", "data/new", "nb", "x/y", "x", "k/l/m"]
)
"""Paths the code works on: few, so that its operations meet each other and the person's."""
LINKS = st.sampled_from([".", "..", "c/..", "k/..", "a/..", "data", "data/a.csv", "../x", "/etc"])
LINKED = st.sampled_from(["a", "c", "k"])
"""Names of links that lead through each other (``a -> c/..`` with ``c -> .`` leads out)."""
PROTECTED = {"analysis.ipynb", ".git/config", "nb/deep/work.ipynb"}
_counter = itertools.count()


class WorkspaceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="rewyn-stateful-"))
        self.root = self.base / "project"
        (self.root / "data").mkdir(parents=True)
        (self.root / ".git").mkdir()
        (self.root / "nb" / "deep").mkdir(parents=True)
        self.person: dict[str, bytes] = {}
        """path -> what the person last wrote there (kept somewhere, always)"""
        self.protected: dict[str, bytes] = {}
        for path in ("notes.txt", "data/a.csv", *sorted(PROTECTED)):
            self.edit(path)
        # (small limits, so that a few steps of the code reach them)
        self.limits = pytest.MonkeyPatch()
        self.limits.setattr(workspace_module, "VERSIONS_LIMIT_BYTES", 256 << 10)
        self.limits.setattr(workspace_module.Protection, "MAX_FOLDERS", 4)
        spec = SandboxSpec(workspace=self.root, timeout=60, disk_limit_mb=64)
        self.box = create(spec, provider=BubblewrapProvider())
        self.session = self.box.session()
        self.session.__enter__()
        self.descriptors = len(os.listdir("/proc/self/fd"))
        self.threads = threading.active_count()

    def edit(self, path: str) -> None:
        content = f"the person's {path} #{next(_counter)}\n".encode() * 3
        (self.root / path).write_bytes(content)
        (self.protected if path in PROTECTED else self.person)[path] = content

    def run(self, code: str) -> None:
        """One execution of the code's (an exception out of it fails the test)."""
        done = self.session.execute(
            "import os, shutil\ntry:\n" + _indent(code) + "\nexcept OSError:\n    pass"
        )
        assert done.ending in ("completed", "crashed"), done

    # -- the code ---------------------------------------------------------------------------

    @rule(path=NAMES, size=st.integers(0, 100_000))
    def write(self, path: str, size: int) -> None:
        self.run(
            f"os.makedirs(os.path.dirname({path!r}) or '.', exist_ok=True)\n"
            f"open({path!r}, 'wb').write(b'c' * {size})"
        )

    @rule(path=NAMES)
    def sparse(self, path: str) -> None:
        self.run(f"open({path!r}, 'wb').truncate(1 << 36)")

    @rule(path=NAMES)
    def folder(self, path: str) -> None:
        self.run(f"os.makedirs({path!r}, exist_ok=True)\nopen({path!r} + '/f', 'w').write('f')")

    @rule(source=NAMES, destination=NAMES)
    def rename(self, source: str, destination: str) -> None:
        self.run(f"os.replace({source!r}, {destination!r})")

    @rule(path=NAMES, destination=LINKS)
    def link(self, path: str, destination: str) -> None:
        self.run(
            f"os.makedirs(os.path.dirname({path!r}) or '.', exist_ok=True)\n"
            f"os.symlink({destination!r}, {path!r})"
        )

    @rule(first=LINKED, second=LINKED, one=LINKS, two=LINKS)
    def chain(self, first: str, second: str, one: str, two: str) -> None:
        self.run(f"os.symlink({one!r}, {first!r})\nos.symlink({two!r}, {second!r})")

    @rule(path=NAMES)
    def delete(self, path: str) -> None:
        self.run(
            f"if os.path.isdir({path!r}) and not os.path.islink({path!r}):\n"
            f"    shutil.rmtree({path!r})\nelse:\n    os.remove({path!r})"
        )

    @rule(path=NAMES)
    def replace_folder(self, path: str) -> None:
        self.run(f"shutil.rmtree({path!r})\nos.mkdir({path!r})\nopen({path!r} + '/g', 'w')")

    @rule(depth=st.integers(10, 600))
    def deep(self, depth: int) -> None:
        self.run(
            "here = os.getcwd()\n"
            f"for _ in range({depth}):\n    os.makedirs('t', exist_ok=True)\n    os.chdir('t')\n"
            "open('leaf', 'w').write('deep')\nos.chdir(here)"
        )

    @rule(path=st.sampled_from([*sorted(PROTECTED), "nb", ".git", "nb/deep"]))
    def attack_protected(self, path: str) -> None:
        self.run(
            f"if os.path.isdir({path!r}):\n    shutil.rmtree({path!r})\n"
            f"else:\n    open({path!r}, 'w').write('planted')"
        )

    @rule(path=NAMES)
    def hold(self, path: str) -> None:
        """A descriptor kept across cells (written again by ``write_held``)."""
        self.run(
            f"f = open({path!r}, 'ab')\nf.write(b'h')\nf.flush()\n"
            "globals().setdefault('held', []).append(f)"
        )

    @rule(size=st.integers(1, 50_000), later=st.booleans())
    def write_held(self, size: int, later: bool) -> None:
        """Write through every kept descriptor, now or from a thread after the cell."""
        write = (
            "def late():\n    for f in globals().get('held', []):\n        try:\n"
            f"            f.seek(0)\n            f.write(b'H' * {size})\n            f.flush()\n"
            "        except (OSError, ValueError):\n            pass\n"
        )
        start = "import threading\nthreading.Thread(target=late, daemon=True).start()"
        self.run(write + (start if later else "late()"))

    # -- the person -------------------------------------------------------------------------

    @rule(path=st.sampled_from(["notes.txt", "data/a.csv", "mine.txt", "x/y", *sorted(PROTECTED)]))
    def person_edits(self, path: str) -> None:
        where = self.root / path
        parent = where.parent
        if parent.is_symlink() or not parent.is_dir() or where.is_symlink() or where.is_dir():
            return
        if any(p.is_symlink() for p in where.relative_to(self.root).parents if str(p) != "."):
            return
        self.edit(path)

    @rule(choice=st.integers(0, 1 << 16))
    def restore(self, choice: int) -> None:
        """Restore one of the kept versions (drawn the same way whatever the store holds: a
        replayed example draws what it drew)."""
        items = Workspace(self.root).versions()
        if not items:
            return
        item = items[choice % len(items)]
        try:
            Workspace(self.root).restore(item["id"], item["path"])
        except OSError:
            return  # (a folder in its way the code made a link: refused, nothing moved)

    # -- after every step -------------------------------------------------------------------

    @invariant()
    def the_persons_bytes_are_kept(self) -> None:
        found = _contents(self.root)
        for path, content in self.person.items():
            assert content in found, f"the person's {path} is lost"

    @invariant()
    def protected_paths_are_unchanged(self) -> None:
        for path, content in self.protected.items():
            assert (self.root / path).read_bytes() == content, path

    @invariant()
    def no_link_leads_out(self) -> None:
        base = os.path.realpath(self.root)
        for folder, folders, names in os.walk(self.root):
            folders[:] = [name for name in folders if name != STORE]
            for name in [*names, *folders]:
                path = os.path.join(folder, name)
                if os.path.islink(path):
                    real = os.path.realpath(path)
                    assert real == base or real.startswith(base + os.sep), path

    @invariant()
    def the_host_stays_bounded(self) -> None:
        assert len(os.listdir("/proc/self/fd")) <= self.descriptors + 16
        assert threading.active_count() <= self.threads + 4

    def teardown(self) -> None:
        try:
            self.session.__exit__(None, None, None)
            self.box.close()  # (an exception out of close() fails the test)
            self.the_persons_bytes_are_kept()
            self.protected_paths_are_unchanged()
        finally:
            self.limits.undo()
            shutil.rmtree(self.base, ignore_errors=True)


def _indent(code: str) -> str:
    return "\n".join(f"    {line}" for line in code.splitlines())


def _contents(root: Path) -> set[bytes]:
    """The contents of the regular files of ``root`` and of its kept versions (not of its
    staging folders: an overlay's upper copy of a file is not kept)."""
    found: set[bytes] = set()
    for top in (root, root / STORE / "versions"):
        for folder, folders, names in os.walk(top):
            if Path(folder) == root:
                folders[:] = [name for name in folders if name != STORE]
            for name in names:
                path = Path(folder) / name
                if path.is_file() and not path.is_symlink() and path.stat().st_size < 1 << 20:
                    found.add(path.read_bytes())
    return found


def test_the_workspace_keeps_what_the_person_had() -> None:
    if not (found := probe_bubblewrap()).works:
        unavailable(f"bubblewrap is not usable here ({found.detail}); apt-get install bubblewrap")
    run: Any = WorkspaceMachine.TestCase
    run.settings = settings(
        max_examples=EXAMPLES,
        stateful_step_count=10,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    run().runTest()
