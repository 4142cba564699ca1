"""The prebuilt JupyterLab extension: rebuilt from its sources it gives the committed bytes, the
wheel ships it where Jupyter looks, and Jupyter finds it installed."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

import rewyn_kernel
from rewyn_kernel.kernel.record import METADATA_KEY, cell_record, set_cell_record
from tests.conftest import unavailable

pytestmark = pytest.mark.xdist_group("browser")  # (it builds what the browser tests load)

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "labextension"
BUILT = ROOT / "rewyn_kernel" / "labextension"
SHARE = "share/jupyter/labextensions/rewyn-kernel"


def tree(root: Path) -> dict[str, bytes]:
    """Every file below ``root``: {relative path: bytes}."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def build_outputs(directory: str, names: list[str]) -> set[str]:
    """The compiler's output in labextension/ itself (node_modules has lib/ folders to keep)."""
    return {"lib", "tsconfig.tsbuildinfo"} & set(names) if Path(directory) == SOURCES else set()


def link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copy2(source, target)


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The extension built from a copy of its sources; returns the copy's directory."""
    npm = shutil.which("npm")
    if npm is None or not (SOURCES / "node_modules").is_dir():
        unavailable("npm or labextension/node_modules is missing: python3 tasks.py labextension")
    # A copy of the sources next to an empty package dir, so the build cannot touch the
    # committed output; node_modules is the one `npm ci` installed from the lock file, hard
    # linked rather than symlinked: the bundler names modules by their real paths.
    sources = tmp_path_factory.mktemp("rebuild") / "labextension"
    shutil.copytree(SOURCES, sources, ignore=build_outputs, copy_function=link_or_copy)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    build = subprocess.run(
        [npm, "run", "build"],
        cwd=sources,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return sources


@pytest.mark.slow
def test_building_the_sources_gives_the_committed_extension(rebuilt: Path) -> None:
    output = tree(rebuilt.parent / "rewyn_kernel" / "labextension")
    committed = tree(BUILT)
    assert sorted(output) == sorted(committed), "rebuild with: python3 tasks.py labextension"
    changed = [name for name in output if output[name] != committed[name]]
    assert changed == [], "rebuild with: python3 tasks.py labextension"


def record(n: int, **fields: Any) -> dict[str, Any]:
    return {"id": f"e{n}", "ending": "completed", **fields}


# (the cell's metadata entry before, the records set in turn)
CELL_RECORD_CASES: list[tuple[Any, list[dict[str, Any]]]] = [
    ({}, [record(1), record(2)]),  # the latest replaces the one before
    ({}, [record(1), record(1)]),  # the same reply seen twice
    ("garbage", [record(1)]),
    (None, [record(1)]),
    ({"record": "x", "other": 1}, [record(1)]),
    ({"events": [{"id": "r1", "recorded": True}], "recorded": True}, [record(2)]),  # a review's
]

_APPLY_IN_NODE = """
import { readFileSync } from 'node:fs';
import { withRecord } from './event.mjs';
const cases = JSON.parse(readFileSync(0, 'utf8'));
const results = cases.map(([entry, records]) => {
  let current = entry;
  for (const record of records) {
    current = withRecord(current, record) ?? current;
  }
  return current;
});
process.stdout.write(JSON.stringify(results));
"""


@pytest.mark.slow
def test_the_extension_and_rewyn_kernel_run_keep_records_by_one_rule(rebuilt: Path) -> None:
    expected = []
    for entry, records in CELL_RECORD_CASES:
        metadata = {METADATA_KEY: copy.deepcopy(entry)}
        for item in records:
            set_cell_record(cell_record(metadata), item)
        expected.append(metadata[METADATA_KEY])
    shutil.copy(rebuilt / "lib" / "event.js", rebuilt / "lib" / "event.mjs")
    node = subprocess.run(
        ["node", "--input-type=module", "-e", _APPLY_IN_NODE],
        cwd=rebuilt / "lib",
        input=json.dumps(CELL_RECORD_CASES),
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert node.returncode == 0, node.stderr
    results = json.loads(node.stdout)
    for case, (python, javascript) in enumerate(zip(expected, results, strict=True)):
        assert javascript == python, f"case {case}"
    assert expected[0] == {"record": record(2)}
    assert expected[-1]["events"] == [{"id": "r1", "recorded": True}]  # a review's stay


def pending(**fields: Any) -> dict[str, Any]:
    return {"agent": {"name": "claude", "call": "c1", "state": "pending", **fields}}


# (the cell's metadata entry, the person's note): what Reject… writes, or None (nothing)
REJECTION_CASES: list[tuple[Any, str]] = [
    ({"record": record(1), **pending(risk="high", reason="r", x=[1])}, "no"),  # the rest kept
    (pending(), "n" * 3000),  # the note is cut
    ({**pending(), "agent": {**pending()["agent"], "decision": {"action": "reject"}}}, "again"),
    ({"agent": {**pending()["agent"], "state": "approved"}}, "too late"),
    ({"agent": "claude"}, "not an agent's cell"),
    ("garbage", ""),
    (None, ""),
]

_REJECT_IN_NODE = """
import { readFileSync } from 'node:fs';
import { withRejection } from './event.mjs';
const cases = JSON.parse(readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify(cases.map(([entry, note]) => withRejection(entry, note))));
"""


@pytest.mark.slow
def test_a_rejection_is_written_only_on_a_pending_agent_cell_and_keeps_the_rest(
    rebuilt: Path,
) -> None:
    shutil.copy(rebuilt / "lib" / "event.js", rebuilt / "lib" / "event.mjs")
    node = subprocess.run(
        ["node", "--input-type=module", "-e", _REJECT_IN_NODE],
        cwd=rebuilt / "lib",
        input=json.dumps(REJECTION_CASES),
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert node.returncode == 0, node.stderr
    kept, cut, *refused = json.loads(node.stdout)
    before = REJECTION_CASES[0][0]
    decision = {"action": "reject", "note": "no"}
    assert kept == {**before, "agent": {**before["agent"], "decision": decision}}
    assert cut["agent"]["decision"] == {"action": "reject", "note": "n" * 2000}
    assert refused == [None] * 5


def test_the_extension_and_the_package_have_one_version() -> None:
    sources = json.loads((SOURCES / "package.json").read_text())
    built = json.loads((BUILT / "package.json").read_text())
    assert sources["version"] == built["version"] == rewyn_kernel.__version__
    assert built["jupyterlab"]["_build"]["load"].startswith("static/remoteEntry.")


@pytest.mark.slow
def test_the_wheel_ships_the_built_extension_in_share_only(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = tmp_path.glob("rewyn_kernel-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        data = next(n for n in names if n.endswith(".data/data/" + SHARE + "/package.json"))
        prefix = data.removesuffix("package.json")
        shipped = {n.removeprefix(prefix): archive.read(n) for n in names if n.startswith(prefix)}
    assert shipped.pop("install.json") == (SOURCES / "install.json").read_bytes()
    assert shipped == tree(BUILT)
    assert not [n for n in names if n.startswith("rewyn_kernel/labextension/")]


def test_jupyter_lists_the_extension_as_installed_and_enabled() -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "jupyter", "labextension", "list"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    if listing.returncode != 0 and "No module named" in listing.stderr:
        unavailable("JupyterLab is not installed: pip install -e '.[dev]'")
    lines = listing.stderr.splitlines() + listing.stdout.splitlines()
    (line,) = [line for line in lines if " rewyn-kernel v" in line]
    assert "enabled" in line
    assert "OK" in line
    assert "(python, rewyn-kernel)" in line
