"""A host that is not root, for the tests: sandboxes made by a process of an ordinary uid.

CI runs as root, and a root host's sandboxes run their code as a uid of their own (see
``providers/local/identity.py``); most people run the host as themselves. So the paths of an
ordinary host are tested through ``UnprivilegedHost``: a Python process running as ``UID`` that
makes sandboxes and runs code in them on request (one JSON line each way), while the test, as
root, watches the processes and files from outside.

It runs Debian's ``/usr/bin/python3`` (the venv's interpreter lives under ``/root``, which an
ordinary uid cannot enter) with the venv's packages on its path: the two must be the same
Python minor version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

UID = 65000
"""The ordinary uid the host runs as (no account owns it)."""
PYTHON = "/usr/bin/python3"
ROOT = Path(__file__).resolve().parents[1]

SERVER = r"""
import json, sys
from rewyn_kernel.runtime import create
from rewyn_kernel.runtime.providers.landlock import LandlockProvider
from rewyn_kernel.runtime.sandbox import BubblewrapProvider, SubprocessProvider

PROVIDERS = {
    "bubblewrap": BubblewrapProvider,
    "landlock": LandlockProvider,
    "subprocess": SubprocessProvider,
    "subprocess-no-namespaces": lambda: SubprocessProvider(namespaces=False),
    "default": lambda: None,
}
box = session = None
for line in sys.stdin:
    request = json.loads(line)
    op = request["op"]
    try:
        if op == "pid":
            import os
            reply = {"pid": os.getpid()}
        elif op == "create":
            box = create(provider=PROVIDERS[request["provider"]](), **request["kwargs"])
            reply = box.isolation.model_dump(mode="json")
        elif op == "execute":
            reply = box.execute(request["code"]).model_dump(mode="json")
        elif op == "session":
            session = session or box.session()
            reply = session.execute(request["code"]).model_dump(mode="json")
        elif op == "close":
            box.close()
            reply = {}
        else:
            raise ValueError(op)
    except Exception as exc:
        reply = {"exception": repr(exc)}
    print(json.dumps(reply), flush=True)
"""


NO_USERNS = r"""
import errno, os, sys
import pyseccomp as seccomp
rules = seccomp.SyscallFilter(seccomp.ALLOW)
eperm = seccomp.ERRNO(errno.EPERM)
rules.add_rule(eperm, "unshare")
rules.add_rule(eperm, "setns")
for flag in (0x10000000, 0x20000000, 0x40000000, 0x00020000):  # NEWUSER, NEWPID, NEWNET, NEWNS
    rules.add_rule(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
if sys.argv[1] == "--no-landlock":  # (a kernel without Landlock, as it answers then)
    del sys.argv[1]
    for name in ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"):
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), name)
rules.load()
os.execv(sys.argv[1], sys.argv[1:])
"""
"""Load a filter that refuses new namespaces (unshare, setns, clone with CLONE_NEW*, clone3 with
ENOSYS so the C library falls back to clone), as docker's default profile does for a process
without CAP_SYS_ADMIN, then run the program in argv. Filters are inherited and cannot be lifted:
everything the host starts, bwrap and unshare included, runs under it."""


def unprivileged_problem() -> str | None:
    """Why the tests cannot run a host as an ordinary uid here, or None when they can."""
    if os.geteuid() != 0:
        return None  # (this process is one already: UnprivilegedHost runs its own Python)
    if not os.path.exists(PYTHON):
        return f"{PYTHON} is missing (apt-get install python3)"
    version = subprocess.run(
        [PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    ours = "{}.{}".format(*sys.version_info[:2])
    if version != ours:
        return f"{PYTHON} is Python {version}, the venv's is {ours}"
    return None


class UnprivilegedHost:
    """A sandbox made by a host process running as ``UID`` (see the module's docstring)."""

    def __init__(
        self,
        provider: str,
        *,
        no_userns: bool = False,
        no_landlock: bool = False,
        uid: int = UID,
        **kwargs: Any,
    ) -> None:
        """``provider``: a name of SERVER's PROVIDERS ("default": the one ``create()`` picks);
        ``no_userns``: the host process runs under a seccomp filter that refuses new user
        namespaces as a container engine's default profile does (``NO_USERNS``), standing in
        for a host that gives none (Ubuntu 24.04's AppArmor rule, a JupyterHub pod);
        ``no_landlock`` (with ``no_userns``): Landlock's calls fail with ENOSYS too, as on a
        kernel without it; ``uid``: another ordinary uid than ``UID`` (a test that counts the
        user's processes, while others of ``UID`` run beside it)."""
        problem = unprivileged_problem()
        if problem is not None:
            if os.environ.get("CI"):
                pytest.fail(f"cannot run an unprivileged host: {problem}")
            pytest.skip(f"cannot run an unprivileged host: {problem}")
        if os.geteuid() == 0:
            prefix = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
            python = PYTHON
        else:
            prefix, python = [], sys.executable
        site = sysconfig.get_paths()["purelib"]
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "PYTHONPATH": f"{ROOT}:{site}",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        program = [python, "-c", SERVER]
        if no_userns:
            program = [
                python,
                "-c",
                NO_USERNS,
                *(["--no-landlock"] if no_landlock else []),
                *program,
            ]
        self.process = subprocess.Popen(
            [*prefix, *program],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd="/",
            text=True,
        )
        self.isolation = self._ask({"op": "create", "provider": provider, "kwargs": kwargs})

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the unprivileged host ended (exit {self.process.wait()})"
        reply: dict[str, Any] = json.loads(line)
        assert "exception" not in reply, reply["exception"]
        return reply

    def pid(self) -> int:
        """The host process's pid."""
        return int(self._ask({"op": "pid"})["pid"])

    def execute(self, code: str) -> dict[str, Any]:
        """``box.execute(code)``, as a result's JSON."""
        return self._ask({"op": "execute", "code": code})

    def session_execute(self, code: str) -> dict[str, Any]:
        """``session.execute(code)`` in the box's one session (opened on first use)."""
        return self._ask({"op": "session", "code": code})

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self._ask({"op": "close"})
            finally:
                assert self.process.stdin is not None
                self.process.stdin.close()
                self.process.wait(30)

    def __enter__(self) -> UnprivilegedHost:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                if stream is not None:
                    stream.close()
