"""Start the kernel's sandbox while the kernel process is still importing Jupyter's stack.

A kernel's start is two long waits in a row: the kernel process importing ipykernel, zmq and
IPython (about a quarter of a second), then the sandbox's worker starting its own interpreter
and IPython (a sixth of a second more). They need not be in a row. ``python -m rewyn_kernel``
reads the sandbox settings its command line gives (as the kernel reads them), makes the sandbox
and starts its session first, then imports the rest while the worker comes up beside it.

The kernel takes that session only if the settings it ends up with (argv plus any Jupyter
config file) are the same; otherwise it closes it and starts its own, so a config file can
never be ignored. Nothing here raises: if the early start fails, the kernel starts the sandbox
as it would have anyway, and reports what went wrong then.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from rewyn_kernel.kernel._plugins import no_pydantic_plugins
from rewyn_kernel.runtime.events import EventListener, SandboxEvent
from rewyn_kernel.runtime.result import build_models
from rewyn_kernel.runtime.sandbox import Sandbox, SandboxSpec, Session
from rewyn_kernel.settings import KernelSettings

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class _Forward:
    """The sandbox's first listener, made before its kernel exists: events go to whoever
    takes the sandbox (none can come before, since no code runs until the kernel asks)."""

    to: EventListener | None = None

    def __call__(self, event: SandboxEvent) -> None:
        if self.to is not None:
            self.to(event)


@dataclass(eq=False)
class Prestarted:
    settings: KernelSettings
    spec: SandboxSpec  # (with the notebook's directory, as the process's cwd gave it)
    sandbox: Sandbox
    session: Session
    forward: _Forward = field(default_factory=_Forward)

    def close(self) -> None:
        self.session.close()
        self.sandbox.close()


_lock = threading.Lock()
_waiting: Prestarted | None = None


def prestart(argv: Sequence[str]) -> None:
    """Make the sandbox the kernel's command line describes and start its session's worker;
    ``take`` hands them over. Any failure leaves nothing behind and nothing waiting."""
    global _waiting
    from rewyn_kernel.kernel._settings import settings_from_argv

    forward = _Forward()
    try:
        with no_pydantic_plugins():
            from rewyn_kernel.kernel.grants import with_grants  # (its models: no plugin scan)

            settings = with_grants(settings_from_argv(argv)).for_kernel()
            spec = settings.spec()
            build_models()  # (the session's, here rather than in the worker's launch)
            sandbox = settings.make_sandbox([forward])
    except Exception as exc:  # the kernel makes it again and reports the error properly
        logger.debug("no early sandbox: %s", exc)
        return
    try:
        session = sandbox.session()
    except Exception as exc:
        logger.debug("no early session: %s", exc)
        sandbox.close()
        return
    early = Prestarted(settings, spec, sandbox, session, forward)
    with _lock:
        previous, _waiting = _waiting, early
    if previous is not None:  # (prestart called twice: only the last one is kept)
        previous.close()


def sandbox_for(settings: KernelSettings, listener: EventListener) -> tuple[Sandbox, Session]:
    """The kernel's sandbox and session for ``settings`` (as ``for_kernel`` gives them): the
    ones started early if they match, else new ones; ``listener`` gets their events."""
    settings = settings.for_kernel()
    started = take(settings, listener)
    if started is None:
        sandbox = settings.make_sandbox([listener])
        started = sandbox, sandbox.session()
    return started


def take(settings: KernelSettings, listener: EventListener) -> tuple[Sandbox, Session] | None:
    """The sandbox started early and its session, if they were made from ``settings``, with
    ``listener`` getting their events from now on; else None, and anything started early is
    closed before this returns (its scratch directory gone, its worker reaped)."""
    global _waiting
    with _lock:
        early, _waiting = _waiting, None
    if early is None:
        return None
    try:
        same = early.settings.model_dump(mode="json") == settings.model_dump(mode="json")
        same = same and early.spec == settings.spec()
    except ValueError:  # (the kernel's own start reports it)
        same = False
    if not same or early.session.closed:
        logger.info("the sandbox started early does not match the kernel's settings: restarting")
        early.close()
        return None
    early.forward.to = listener
    return early.sandbox, early.session


def discard() -> None:
    """Close whatever was started early and not taken (the kernel never started)."""
    global _waiting
    with _lock:
        early, _waiting = _waiting, None
    if early is not None:
        early.close()
