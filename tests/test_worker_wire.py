"""What crosses into the sandbox: the worker's config, checked where the host builds it and where
the worker reads it (the worker's own program, run as a sandbox runs it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rewyn_kernel.runtime.host.protocol import BOOTSTRAP, program_with
from rewyn_kernel.runtime.providers.bubblewrap import BubblewrapProvider
from rewyn_kernel.runtime.providers.subprocess import SubprocessProvider
from rewyn_kernel.runtime.sandbox import SandboxSpec
from rewyn_kernel.runtime.worker.config import Clean, Cover, Users, WorkerConfig, WorkspaceSetting
from rewyn_kernel.runtime.worker.record import Record, WireError


def full_config() -> WorkerConfig:
    """A config with a value in every kind of field (records, tuples of them, unions)."""
    return WorkerConfig(
        cwd="/scratch",
        fork_per_exec=True,
        memory_limit_bytes=256 << 20,
        oom_counter="self",
        proc_sys="remount",
        cover=(Cover(dir="/tmp", mode="1777", keep=("/tmp/x",), limit=1 << 20),),
        binds=(("/host/a", "/a"),),
        clean=Clean(dirs=("/tmp",), ipc=True),
        users=Users(supervisor=(65533, 65533), code=(1000, 1000)),
        workspace=WorkspaceSetting(path="/work", protected=(".git",), staging=".rewyn/stage"),
    )


def wire(config: WorkerConfig) -> dict[str, Any]:
    """``config`` as the worker receives it (through JSON)."""
    loaded: dict[str, Any] = json.loads(json.dumps(config.to_wire()))
    return loaded


# -- the host's side: built by keyword -------------------------------------------------------


def test_a_misspelt_field_is_a_type_error_at_the_host() -> None:
    with pytest.raises(TypeError, match=r"WorkerConfig has no field 'seccmp' \(a misspelt name"):
        WorkerConfig(cwd="/scratch", seccmp="00")  # type: ignore[call-arg]


def test_a_field_of_the_wrong_type_is_a_type_error_at_the_host() -> None:
    with pytest.raises(TypeError, match=r"WorkerConfig.own_ipc: expected bool, got str 'yes'"):
        WorkerConfig(cwd="/scratch", own_ipc="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"WorkerConfig.nproc: expected None or int, got bool"):
        WorkerConfig(cwd="/scratch", nproc=True)
    with pytest.raises(TypeError, match=r"WorkerConfig.read_only: expected a tuple, got list"):
        WorkerConfig(cwd="/scratch", read_only=["/etc"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"WorkerConfig.cover\[0\]: expected Cover, got dict"):
        WorkerConfig(cwd="/scratch", cover=({"dir": "/tmp", "mode": "1777"},))  # type: ignore[arg-type]


def test_a_missing_field_is_a_type_error_at_the_host() -> None:
    with pytest.raises(TypeError, match=r"WorkerConfig needs 'cwd'"):
        WorkerConfig()  # type: ignore[call-arg]


def test_a_field_given_twice_when_the_config_is_put_together_is_a_type_error() -> None:
    """host/core.py puts the provider's fields, the launch's and its own together: each field
    comes from one of them."""
    provided = WorkerConfig(cwd="/scratch", own_ipc=True)
    assert provided.given() == {"cwd": "/scratch", "own_ipc": True}
    with pytest.raises(TypeError, match="multiple values for keyword argument 'own_ipc'"):
        WorkerConfig(**provided.given(), own_ipc=False)


def test_a_config_is_frozen() -> None:
    config = WorkerConfig(cwd="/scratch")
    with pytest.raises(AttributeError, match="frozen"):
        config.cwd = "/elsewhere"  # type: ignore[misc]
    assert config.replace(cwd="/elsewhere").cwd == "/elsewhere"
    with pytest.raises(TypeError, match=r"WorkerConfig\.cwd: expected str"):
        config.replace(cwd=None)


@pytest.mark.parametrize("kind", ["subprocess", "bubblewrap"])
def test_a_providers_config_reads_back_as_it_was_built(kind: str, tmp_path: Path) -> None:
    provider = SubprocessProvider() if kind == "subprocess" else BubblewrapProvider()
    spec = SandboxSpec(memory_limit_mb=256, read_dirs=(tmp_path,))
    config = provider.worker_config(spec, tmp_path)
    assert WorkerConfig.from_wire(wire(config)) == config


# -- the worker's side: read from JSON ----------------------------------------------------------


def test_annotations_read_as_python_3_8_writes_them() -> None:
    """Python 3.8 writes a subscript of constants in parentheses (``Literal[('a', 'b')]``);
    a record made there must read it as the same type."""
    made: type[Record] = type(
        "Made",
        (Record,),
        {
            "__module__": __name__,
            "__annotations__": {"kind": "Literal[('a', 'b')]", "pair": "Tuple[(int, int)]"},
        },
    )
    assert made.from_wire({"kind": "b", "pair": [1, 2]}).to_wire() == {"kind": "b", "pair": [1, 2]}
    with pytest.raises(WireError, match=r"Made\.kind: expected 'a' or 'b', got str 'c'"):
        made.from_wire({"kind": "c", "pair": [1, 2]})
    with pytest.raises(TypeError, match=r"Unread\.x: 'list' is not a type a record field may have"):
        type("Unread", (Record,), {"__module__": __name__, "__annotations__": {"x": "list[int]"}})


def test_the_worker_reads_back_every_kind_of_field() -> None:
    config = full_config()
    read = WorkerConfig.from_wire(wire(config))
    assert read == config
    assert read.cover[0].keep == ("/tmp/x",)  # (JSON arrays become tuples)
    assert read.users is not None
    assert read.users.code == (1000, 1000)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"cwdd": "/scratch"}, r"WorkerConfig has no field 'cwdd'"),
        ({"cwd": 3}, r"WorkerConfig.cwd: expected str, got int 3"),
        ({"oom_counter": 1}, r"WorkerConfig.oom_counter: expected bool or str, got int 1"),
        ({"proc_sys": "on"}, r"WorkerConfig.proc_sys: expected None or 'remount' or 'check'"),
        ({"binds": [["/a"]]}, r"WorkerConfig.binds\[0\]: expected 2 items, got 1"),
        (
            {"cover": [{"dir": "/tmp", "mode": 1777, "keep": [], "limit": None}]},
            r"WorkerConfig.cover\[0\]: Cover.mode: expected str, got int 1777",
        ),
        (
            {"users": {"supervisor": [1, 1], "code": [1, 1], "root": [0, 0]}},
            r"WorkerConfig.users: Users has no field 'root'",
        ),
    ],
)
def test_the_worker_refuses_a_field_it_does_not_know_or_of_the_wrong_type(
    change: dict[str, Any], said: str
) -> None:
    sent = {**wire(full_config()), **change}
    with pytest.raises(WireError, match=said):
        WorkerConfig.from_wire(sent)


@pytest.mark.parametrize("field", ["cwd", "seccomp", "users"])
def test_the_worker_refuses_a_config_that_lacks_a_field(field: str) -> None:
    """On the wire every field is there (defaults are the host's): one missing means the
    host and the worker disagree on what the config is."""
    sent = wire(full_config())
    del sent[field]
    with pytest.raises(WireError, match=f"WorkerConfig needs '{field}'"):
        WorkerConfig.from_wire(sent)


def run_worker(config: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[bytes]:
    """The worker's program with ``config``, run as a sandbox runs it (its modules as text,
    as every sandbox but the local ones gets them), with nothing after the program."""
    return subprocess.run(
        [sys.executable, "-I", "-c", BOOTSTRAP],
        input=program_with(config, compiled=False),
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )


def test_the_worker_program_refuses_a_bad_config_before_it_starts(tmp_path: Path) -> None:
    sent = {**wire(WorkerConfig(cwd=str(tmp_path))), "hide_": None}
    done = run_worker(sent, tmp_path)
    assert done.returncode == 70
    assert done.stdout == b""  # (not a frame: nothing started)
    assert b"rewyn: the host's config cannot be read here: WorkerConfig has no field 'hide_'" in (
        done.stderr
    )
