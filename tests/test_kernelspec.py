"""The kernelspec: its content, `rewyn-kernel install`, and what Jupyter then finds and starts."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import start_new_kernel
from pydantic import ValidationError
from traitlets.config import Application

from rewyn_kernel import cli
from rewyn_kernel.kernel.kernelspec import (
    DISPLAY_NAME,
    KERNEL_NAME,
    LOGOS,
    KernelSettings,
    build_kernel_dict,
    install,
)
from rewyn_kernel.kernel.kernelspec import LAUNCH as BOOT_ARGV
from rewyn_kernel.runtime.sandbox import SandboxSpec

PACKAGED = Path(__file__).resolve().parents[1] / "kernelspec"
LAUNCH = [*BOOT_ARGV, "-f", "{connection_file}"]
GVISOR = [
    "--name",
    "rewyn-gvisor",
    "--display-name",
    "Python (sandboxed, gVisor)",
    "--provider",
    "container",
    "--image",
    "python:3.13-slim",
    "--oci-runtime",
    "runsc",
]


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run `python -m rewyn_kernel.cli` as a user would, in a real process."""
    argv = [sys.executable, "-m", "rewyn_kernel.cli", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def read_spec(prefix: Path, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(
        (prefix / "share/jupyter/kernels" / name / "kernel.json").read_text()
    )
    return spec


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_default_dict_launches_this_python_with_no_flags() -> None:
    assert build_kernel_dict() == {
        "argv": [sys.executable, *LAUNCH],
        "display_name": DISPLAY_NAME,
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": {"debugger": False, "rewyn_kernel": {}},
    }


def test_only_the_settings_given_become_flags() -> None:
    settings = KernelSettings(
        provider="container", oci_runtime="runsc", memory_limit_mb=512, image="python:3.13-slim"
    )
    kernel = build_kernel_dict(settings, python="/opt/py/bin/python", display_name="Py (gVisor)")
    assert kernel["argv"] == [
        "/opt/py/bin/python",
        *LAUNCH,
        "--SandboxKernel.provider=container",
        "--SandboxKernel.image=python:3.13-slim",
        "--SandboxKernel.oci_runtime=runsc",
        "--SandboxKernel.memory_limit_mb=512",
    ]
    assert kernel["display_name"] == "Py (gVisor)"
    assert kernel["metadata"]["rewyn_kernel"] == {
        "provider": "container",
        "image": "python:3.13-slim",
        "oci_runtime": "runsc",
        "memory_limit_mb": 512,
    }


def test_no_time_limit_is_the_literal_None_and_an_explicit_default_is_pinned() -> None:
    assert KernelSettings().flags() == []
    assert KernelSettings(timeout=None).flags() == ["--SandboxKernel.timeout=None"]
    assert KernelSettings(timeout=2.5).flags() == ["--SandboxKernel.timeout=2.5"]
    # Typed explicitly, a default is still written: a config file cannot change it later.
    assert KernelSettings(network="none").flags() == ["--SandboxKernel.network=none"]
    assert KernelSettings(event_output=False, trust_output=True).flags() == [
        "--SandboxKernel.event_output=False",
        "--SandboxKernel.trust_output=True",
    ]


def test_no_environment_and_no_secret_reaches_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's variables never reach a spec; the sandbox's only where they were given."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-leak")
    kernel = build_kernel_dict(KernelSettings(provider="container", network="allow"))
    assert "env" not in kernel
    assert "sk-do-not-leak" not in json.dumps(kernel)
    given = build_kernel_dict(KernelSettings(env={"MODE": "a=b c"}))
    assert "env" not in given
    assert given["argv"][-1:] == ["--SandboxKernel.env=MODE=a=b c"]
    assert "sk-do-not-leak" not in json.dumps(given)


def test_install_env_reaches_the_code_in_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rewyn-kernel install --env``, run as a user would: the kernel it installs gives the
    code those variables (and the spec holds no other)."""
    done = run_cli(
        "install", "--prefix", tmp_path, "--name", "rewyn-env",
        "--env", "MODE=from install", "--env", "EMPTY=",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    spec = read_spec(tmp_path, "rewyn-env")
    assert "env" not in spec
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share/jupyter"))
    km, kc = start_new_kernel(kernel_name="rewyn-env", startup_timeout=60)
    try:
        out: list[str] = []

        def keep(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])

        code = "import os; print(repr((os.environ['MODE'], os.environ['EMPTY'])))"
        reply = kc.execute_interactive(code, timeout=30, output_hook=keep)
        assert reply["content"]["status"] == "ok"
        assert "".join(out) == "('from install', '')\n"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


def test_flags_parse_into_the_kernel_traits() -> None:
    """The argv flags, read by traitlets with SandboxKernel's own traits, give the settings."""
    from rewyn_kernel.kernel.kernel import SandboxKernel

    settings = KernelSettings(
        provider="container",
        image="localhost/py:3.11",
        container_runtime="/usr/bin/podman",
        oci_runtime="/usr/sbin/runc",
        timeout=None,
        memory_limit_mb=256,
        network="allow",
        run_log=Path("/var/log/rewyn/run.jsonl"),
        event_output=False,
        trust_output=True,
    )
    app = Application()
    app.parse_command_line(settings.flags())
    traits = SandboxKernel.class_traits(config=True)
    parsed = {
        name: value.get_value(traits[name]) for name, value in app.config.SandboxKernel.items()
    }
    assert parsed == settings.summary()


def test_relative_run_log_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert KernelSettings(run_log=Path("runs.jsonl")).run_log == tmp_path / "runs.jsonl"
    assert KernelSettings(run_log=Path("~/r.jsonl")).run_log == tmp_path / "home/r.jsonl"


@pytest.mark.parametrize(
    ("timeout", "memory_limit_mb"),
    [(0, None), (-1, None), (7 * 24 * 3600 + 1, None), (30, 31), (float("inf"), None)],
)
def test_limits_are_bounded_like_the_sandbox_spec(
    timeout: float, memory_limit_mb: int | None
) -> None:
    with pytest.raises(ValidationError):
        SandboxSpec(timeout=timeout, memory_limit_mb=memory_limit_mb)
    with pytest.raises(ValidationError):
        KernelSettings(timeout=timeout, memory_limit_mb=memory_limit_mb)


def test_packaged_spec_is_the_default_dict_with_a_bare_python() -> None:
    packaged = json.loads((PACKAGED / "kernel.json").read_text())
    assert packaged == build_kernel_dict(python="python")
    assert png_size(PACKAGED / "logo-32x32.png") == (32, 32)
    assert png_size(PACKAGED / "logo-64x64.png") == (64, 64)
    assert ET.parse(PACKAGED / "logo-svg.svg").getroot().tag == "{http://www.w3.org/2000/svg}svg"


def test_install_into_a_prefix_is_found_by_jupyter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = run_cli("install", "--prefix", tmp_path, *GVISOR)
    assert done.returncode == 0, done.stderr
    destination = tmp_path / "share/jupyter/kernels/rewyn-gvisor"
    assert done.stdout.splitlines() == [
        f"Installed kernelspec rewyn-gvisor in {destination}",
        "Display name: Python (sandboxed, gVisor)",
    ]
    assert "JUPYTER_PATH" in done.stderr  # tmp_path is not a place Jupyter looks by itself

    spec = read_spec(tmp_path, "rewyn-gvisor")
    assert spec["argv"] == [
        sys.executable,
        *LAUNCH,
        "--SandboxKernel.provider=container",
        "--SandboxKernel.image=python:3.13-slim",
        "--SandboxKernel.oci_runtime=runsc",
    ]
    for logo in LOGOS:
        assert (destination / logo).read_bytes() == (PACKAGED / logo).read_bytes()

    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share/jupyter"))
    manager = KernelSpecManager()
    assert Path(manager.find_kernel_specs()["rewyn-gvisor"]) == destination
    found = manager.get_kernel_spec("rewyn-gvisor")
    assert found.display_name == "Python (sandboxed, gVisor)"
    assert found.interrupt_mode == "signal"
    assert found.argv == spec["argv"]
    assert found.metadata["debugger"] is False


def test_default_name_and_display_name_and_replacing(tmp_path: Path) -> None:
    assert cli.main(["install", "--prefix", str(tmp_path), "--timeout", "none"]) == 0
    spec = read_spec(tmp_path, KERNEL_NAME)
    assert spec["display_name"] == DISPLAY_NAME
    assert spec["argv"][-1] == "--SandboxKernel.timeout=None"

    assert cli.main(["install", "--prefix", str(tmp_path), "--memory", "512"]) == 0
    assert read_spec(tmp_path, KERNEL_NAME)["argv"][-1] == "--SandboxKernel.memory_limit_mb=512"

    assert cli.main(["install", "--prefix", str(tmp_path), "--name", "Rewyn-Net"]) == 0
    renamed = read_spec(tmp_path, "rewyn-net")  # jupyter_client lowercases names
    assert renamed["display_name"] == "Python (sandboxed, rewyn-net)"


def test_trust_output_warns_loudly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["install", "--prefix", str(tmp_path), "--trust-output"]) == 0
    err = capsys.readouterr().err
    assert "WARNING" in err
    assert "credentials" in err
    assert read_spec(tmp_path, KERNEL_NAME)["argv"][-1] == "--SandboxKernel.trust_output=True"


def test_event_output_and_run_log(tmp_path: Path) -> None:
    log = tmp_path / "logs/run.jsonl"
    argv = ["install", "--prefix", str(tmp_path), "--event-output", "--run-log", str(log)]
    assert cli.main(argv) == 0
    assert read_spec(tmp_path, KERNEL_NAME)["argv"][-2:] == [
        f"--SandboxKernel.run_log={log}",
        "--SandboxKernel.event_output=True",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--network", "maybe"], "argument --network: network must be 'none' or 'allow'"),
        (["--provider", "x"], "--provider: 'x' is no provider here: use one of auto, bubblewrap"),
        (["--timeout", "-1"], "--timeout: Input should be greater than 0"),
        (["--timeout", "soon"], "'soon' is not a number of seconds or 'none'"),
        (["--memory", "8"], "--memory: Input should be greater than or equal to 32"),
        (["--image", "python:3.13-slim"], "--image: only used with --provider container"),
        (["--provider", "container", "--runtime", "kubectl"], "'kubectl' is not a container CLI"),
        (["--provider", "container", "--image", "-v/:/host"], "expected one argument"),
        (["--provider", "container", "--image=-v/:/host"], "'-v/:/host' is not usable"),
        (["--name", "my kernel"], "kernel name 'my kernel' is not valid"),
        (["--user", "--sys-prefix"], "not allowed with argument"),
    ],
)
def test_invalid_options_fail_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    argv = ["install", *args] if "--user" in args else ["install", "--prefix", str(tmp_path), *args]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "share").exists()


def test_invalid_option_exits_non_zero_from_the_command_line(tmp_path: Path) -> None:
    done = run_cli("install", "--prefix", tmp_path, "--network", "maybe")
    assert done.returncode == 2
    assert "'maybe' is neither" in done.stderr
    assert not (tmp_path / "share").exists()


def test_install_takes_at_most_one_place(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="choose one of"):
        install(user=True, prefix=tmp_path)
    with pytest.raises(ValueError, match="choose one of"):
        install(sys_prefix=True, prefix=tmp_path)


def test_installed_spec_starts_the_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The installed argv, flags included, launches a working kernel."""
    argv = ["install", "--prefix", str(tmp_path), "--name", "rewyn-e2e"]
    assert cli.main([*argv, "--timeout", "none", "--memory", "256"]) == 0
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share/jupyter"))
    km, kc = start_new_kernel(kernel_name="rewyn-e2e", startup_timeout=60)
    try:
        reply = kc.execute_interactive("6 * 7", timeout=30, output_hook=lambda msg: None)
        assert reply["content"]["status"] == "ok"
        assert km.kernel_spec is not None
        assert Path(km.kernel_spec.resource_dir) == tmp_path / "share/jupyter/kernels/rewyn-e2e"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
