"""No one-shot execution finds what another left where every execution writes: /tmp, /dev/shm,
POSIX message queues and SysV IPC start empty each time, on every provider, pool items
included. (The scratch directory is the exception the README states: it is the sandbox's for
its whole life.)"""

from __future__ import annotations

import json
from collections.abc import Callable

from rewyn_kernel.runtime import SandboxPool, SandboxSpec
from rewyn_kernel.runtime.sandbox import Sandbox, SandboxProvider

LEAVE = """
import ctypes, json, os, tempfile
left = {}
tmp = tempfile.gettempdir()  # (/tmp, or the scratch folder's .tmp where /tmp is the host's)
for path in (tmp + "/left-{tag}", "/dev/shm/left-{tag}"):
    with open(path, "w") as handle:
        handle.write("left")
    left[path] = True
os.makedirs(tmp + "/dir-{tag}/inner", exist_ok=True)
os.chmod(tmp + "/dir-{tag}", 0)  # (a folder made hard to remove)
libc = ctypes.CDLL(None, use_errno=True)
left["msg"] = libc.msgget(0x5EED, 0o1600) >= 0        # IPC_CREAT | 0600
left["sem"] = libc.semget(0x5EED, 1, 0o1600) >= 0
left["shm"] = libc.shmget(0x5EED, 4096, 0o1600) >= 0
try:
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
    left["mq"] = rt.mq_open(b"/left-{tag}", 0o102, 0o600, None) >= 0   # O_CREAT | O_RDWR
except OSError:
    left["mq"] = False
print(json.dumps(left))
"""
FIND = """
import json, os, tempfile
def entries(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []
def table(name):
    try:
        with open("/proc/sysvipc/" + name) as handle:
            return [line.split()[0] for line in handle.read().splitlines()[1:] if line.strip()]
    except OSError:
        return []
print(json.dumps({{
    "tmp": [name for name in entries(tempfile.gettempdir()) if "{tag}" in name],
    "shm": [name for name in entries("/dev/shm") if "{tag}" in name],
    "mq": [name for name in entries("/dev/mqueue") if "{tag}" in name],
    "ipc": [key for name in ("msg", "sem", "shm") for key in table(name)],
}}))
"""


def assert_clean(found: dict[str, list[str]], left: dict[str, bool], provider: str) -> None:
    assert found["tmp"] == [], found
    if provider == "landlock":
        # /dev/shm is the host's (the README says so): what one execution leaves there, the
        # next finds. SysV IPC is refused outright.
        assert not any(left[kind] for kind in ("msg", "sem", "shm")), left
        return
    assert found["shm"] == [], found
    assert found["mq"] == [], found
    # SysV keys are printed in decimal: 0x5EED = 24301.
    assert "24301" not in found["ipc"], found


def test_a_one_shot_execution_finds_nothing_of_the_last(
    make_box: Callable[..., Sandbox], marker: str
) -> None:
    tag = marker[-8:]
    box = make_box()
    first = box.execute(LEAVE.replace("{tag}", tag))
    assert first.ok, first.stderr
    left = json.loads(first.stdout)
    if box.provider.name != "landlock":  # (which refuses SysV IPC: see assert_clean)
        assert all(left[kind] for kind in ("msg", "sem", "shm")), left  # (so it can fail)
    # The same execution finds its own (the control).
    control = box.session().execute(LEAVE.replace("{tag}", tag) + FIND.format(tag=tag))
    assert json.loads(control.stdout.splitlines()[-1])["tmp"], control.stdout
    second = box.execute(FIND.format(tag=tag))
    assert second.ok, second.stderr
    assert_clean(json.loads(second.stdout), left, box.provider.name)


def test_no_pool_item_finds_what_another_left(provider: SandboxProvider, marker: str) -> None:
    tag = marker[-8:]
    codes = [LEAVE.replace("{tag}", tag), FIND.format(tag=tag)] * 3
    with SandboxPool(SandboxSpec(timeout=30), provider=provider, size=1, warm=1) as pool:
        results = pool.map(codes, progress=False)
    for leaving, finding in zip(results[::2], results[1::2], strict=True):
        assert leaving.ok, leaving.stderr
        assert finding.ok, finding.stderr
        assert_clean(json.loads(finding.stdout), json.loads(leaving.stdout), provider.name)
