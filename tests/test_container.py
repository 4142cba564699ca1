"""What only the container provider promises: the host's files, root, capabilities, pids."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rewyn_kernel.runtime import create
from rewyn_kernel.runtime.container import ContainerProvider
from rewyn_kernel.runtime.sandbox import Sandbox, SandboxProvider

from .conftest import TEST_IMAGE

pytestmark = pytest.mark.providers("docker", "docker+runsc", "podman")


@pytest.fixture
def host_secret() -> Iterator[Path]:
    """A host file anyone may read, outside /tmp (which a sandbox has of its own)."""
    path = Path("/var/tmp") / f"rewyn-marker-{uuid.uuid4().hex}"
    path.write_text("host secret")
    path.chmod(0o644)
    yield path
    path.unlink()


def test_the_hosts_files_are_invisible(make_box: Callable[..., Sandbox], host_secret: Path) -> None:
    code = f"import os\nprint(os.path.exists({str(host_secret)!r}), sorted(os.listdir('/')))"
    exists, listing = make_box().execute(code).stdout.split(" ", 1)
    assert exists == "False"
    assert "scratch" in listing


@pytest.mark.providers("subprocess")
def test_the_subprocess_provider_does_not_hide_them(
    make_box: Callable[..., Sandbox], host_secret: Path
) -> None:
    # The contrast the README states: the check above can fail.
    result = make_box().execute(f"print(open({str(host_secret)!r}).read())")
    assert result.stdout == "host secret\n"


def test_root_filesystem_is_read_only_and_scratch_is_shared(
    make_box: Callable[..., Sandbox],
) -> None:
    box = make_box()
    result = box.execute(
        "import os\n"
        "try:\n    open('/usr/evil', 'w')\nexcept OSError as exc:\n    print('usr', exc.errno)\n"
        "open('/tmp/t', 'w').write('tmp ok')\n"
        "open('result.txt', 'w').write('for the host')\n"
        "print(os.getcwd())"
    )
    assert result.stdout.startswith("usr ")
    assert result.stdout.endswith("/scratch\n")
    written = box.workdir / "result.txt"
    assert written.read_text() == "for the host"
    written.unlink()  # usable ownership: the host can remove what the sandbox wrote


def test_not_root_and_no_capabilities(make_box: Callable[..., Sandbox]) -> None:
    code = (
        "import ctypes, os\n"
        "status = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
        "no_new_privs = ctypes.CDLL(None).prctl(39, 0, 0, 0, 0)  # PR_GET_NO_NEW_PRIVS\n"
        "print(os.getuid(), status['CapEff'].strip(), no_new_privs)"
    )
    uid, caps, no_new_privs = make_box().execute(code).stdout.split()
    assert uid != "0"
    assert int(caps, 16) == 0
    assert no_new_privs == "1"


def test_a_fork_bomb_meets_the_pids_limit_and_the_host_stays_responsive(
    make_box: Callable[..., Sandbox],
) -> None:
    box = make_box(timeout=5.0, pids_limit=256)
    bomb = (
        "import os, time\n"
        "children = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        children += 1\n"
        "except OSError as exc:\n"
        "    print('stopped after', children, type(exc).__name__, flush=True)\n"
        "time.sleep(60)\n"
    )
    results: list[float] = []

    def probe() -> None:
        for _ in range(5):
            started = time.monotonic()
            subprocess.run(["true"], check=True)
            results.append(time.monotonic() - started)
            time.sleep(0.3)

    import threading

    prober = threading.Thread(target=probe)
    prober.start()
    result = box.execute(bomb)
    prober.join()
    assert max(results) < 2.0
    if "runsc" in box.provider.name:
        # gVisor's own threads count against the limit: the whole sandbox ends, and says why.
        assert (result.ending, result.exit_code) == ("crashed", 2), result
        assert "pids limit" in result.message
        return
    assert "stopped after" in result.stdout, result
    stopped_after = int(result.stdout.split()[2])
    assert stopped_after < 300
    assert result.timed_out


@pytest.mark.providers("docker", "docker+runsc")  # podman has no daemon to stop
def test_a_stopped_daemon_is_a_quick_clear_failure(
    provider: SandboxProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(provider, ContainerProvider)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert provider.available  # the binary is there: available says no more (spec)
    started = time.monotonic()
    with create(provider=provider) as box:
        result = box.execute("print(1)")
    assert time.monotonic() - started < 10
    assert result.ending == "start_failed"
    assert result.exit_code != 0
    assert "Cannot connect to the Docker daemon" in result.stderr
    daemon = {item.name: item for item in provider.check()}["daemon"]
    assert not daemon.ok
    assert "start the engine" in daemon.detail


def test_check_names_what_is_missing(provider: SandboxProvider) -> None:
    assert isinstance(provider, ContainerProvider)
    missing_cli = ContainerProvider(image=TEST_IMAGE, runtime="no-such-engine-cli")
    assert not missing_cli.available
    assert [(i.name, i.ok) for i in missing_cli.check()] == [("binary", False)]
    with create(provider=missing_cli) as box:
        failed = box.execute("print(1)")
    assert failed.ending == "start_failed"
    assert "no-such-engine-cli" in failed.message
    no_image = ContainerProvider(
        image="rewyn-no-such-image:0", runtime=provider.runtime, pull="never"
    )
    image = {i.name: i for i in no_image.check()}["image"]
    assert not image.ok
    assert "pull rewyn-no-such-image:0" in image.detail
    if provider.runtime == "docker":
        kata = ContainerProvider(image=TEST_IMAGE, oci_runtime="kata-not-registered")
        oci = {i.name: i for i in kata.check()}["oci runtime"]
        assert not oci.ok
        assert "not registered" in oci.detail


def test_code_and_env_values_never_reach_argv(make_box: Callable[..., Sandbox]) -> None:
    secret = "v-" + uuid.uuid4().hex
    code_marker = "c-" + uuid.uuid4().hex
    box = make_box(env={"API_KEY": secret})
    with box.session() as session:
        session.execute(f"x = '{code_marker}'")
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmdline = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                assert secret.encode() not in cmdline
                assert code_marker.encode() not in cmdline
        assert session.execute("import os; print(os.environ['API_KEY'])").stdout == f"{secret}\n"
