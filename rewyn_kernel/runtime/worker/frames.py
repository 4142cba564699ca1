"""The frames sent to the worker, declared once: from the host to the supervisor, and from the
supervisor to a code process.

The host builds each with its constructor (``host/channel.py`` sends it: ``to_wire`` is its
JSON header, ``t`` first); the supervisor reads every frame from the host with ``read_frame``
(``HOST_KINDS``), and a code process every frame from the supervisor (``CODE_KINDS``). A kind
the reader does not take, a field it does not know or lacks, or a value of the wrong type is a
``WireError`` that says which: the supervisor ends the sandbox on one, saying why (as the host
does with a frame of the worker's it cannot read: ``host/protocol.py``).

Frames from the worker to the host are the host's models (``host/protocol.py``): the worker's
side is untrusted there, and pydantic reads it.
"""

from __future__ import annotations

from .record import Record, WireError

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, ClassVar, Dict, Optional, Tuple, Type

KINDS: Dict[str, Type[Frame]] = {}


class Frame(Record):
    """A frame to the worker; ``t``, its kind, is the class's (``kind=`` where it is made)."""

    t: ClassVar[str] = ""

    def __init_subclass__(cls, kind: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind:
            if kind in KINDS:
                raise TypeError("two frames of kind %r" % kind)
            cls.t = kind
            KINDS[kind] = cls

    def to_wire(self) -> Dict[str, Any]:
        wire: Dict[str, Any] = {"t": self.t}
        wire.update(super().to_wire())
        return wire


class HostFrame(Frame):
    """A frame from the host to the supervisor."""

    b: int = 0
    """The branch of the session it is for (0: its first process)."""


class ExecFrame(HostFrame, kind="exec"):
    """Run the code in the payload (UTF-8); with ``comm``, the payload is a comm message from
    the frontend (JSON) for the code's comms. The supervisor forwards it to the code's process
    with its own ``count`` where the host gave none."""

    id: str
    count: Optional[int] = None
    """The execution's number (a kernel's prompts); None: the sandbox counts."""
    silent: bool = False
    """Leave no trace in the shell's history and counters (a frontend's silent request)."""
    comm: bool = False
    parent: str = ""
    """The frontend's request this answers (an Output widget captures by it); '': ``id``."""
    fork: str = ""
    """(A session's, not a comm's.) As the execution ends with its process alive, fork that
    process into paused branch ``fork_n``: a checkpoint of the state it leaves, answered
    ``forked`` with this id (as ``fork`` is), made before the host can send anything else.
    '': none. Where the process ended with the execution, the fork fails."""
    fork_n: int = 0


class InputReplyFrame(HostFrame, kind="input_reply"):
    """The answer (the payload, UTF-8) to an ``input_request`` of execution ``exec``."""

    id: Optional[int]
    """The question's id, as the ``input_request`` gave it."""
    exec: str
    error: str = ""
    """No answer: ``input()`` raises EOFError with this."""
    unavailable: bool = False
    """No one can answer (the frontend allows no stdin)."""


class InterruptFrame(HostFrame, kind="interrupt"):
    """Interrupt execution ``id`` (a SIGINT follows; the frame covers code not started yet)."""

    id: str


class AbortFrame(HostFrame, kind="abort"):
    """Kill the process running one-shot execution ``id`` (its interrupt was not enough)."""

    id: str


class CompleteFrame(HostFrame, kind="complete"):
    """Ask for completions at ``cursor_pos`` in ``code`` (answered ``complete_reply``)."""

    id: str
    code: str
    cursor_pos: int


class InspectFrame(HostFrame, kind="inspect"):
    """Ask what the name at ``cursor_pos`` is (answered ``inspect_reply``); ``detail`` 1: with
    its source, as ``??``."""

    id: str
    code: str
    cursor_pos: int
    detail: int = 0


class ViewFrame(HostFrame, kind="view"):
    """The host published an execution's writes: mount view ``cell`` of the workspace for the
    next one (answered ``view_done``)."""

    id: str
    cell: int
    protected: Tuple[str, ...] = ()


class ForkFrame(HostFrame, kind="fork"):
    """Fork the branch's code process into branch ``n`` (answered ``forked``); ``pause``: keep
    it stopped, a checkpoint; ``reseed``: new seeds for its random generators."""

    id: str
    n: int
    pause: bool = False
    reseed: bool = False


class CloseFrame(HostFrame, kind="close"):
    """End the branch's code process (the sandbox ends with its last one)."""


class ResumeFrame(HostFrame, kind="resume"):
    """Let the branch, a checkpoint, run again."""


class ForkSelfFrame(Frame, kind="fork_self"):
    """(Supervisor to a code process.) Fork yourself: the new branch's pipes come over your
    socket; ``once``: it runs one one-shot execution (forked from a preloaded template);
    ``n``: the new branch's number (a fork that fails here says it)."""

    n: int = 0
    reseed: bool = False
    pause: bool = False
    once: bool = False


class ResumedFrame(Frame, kind="resumed"):
    """(Supervisor to a code process.) You were a checkpoint, and run again."""


HOST_KINDS = (
    *("exec", "input_reply", "interrupt", "abort", "complete", "inspect", "view"),
    *("fork", "close", "resume"),
)
"""What the supervisor reads from the host."""
CODE_KINDS = ("exec", "input_reply", "interrupt", "complete", "inspect", "fork_self", "resumed")
"""What a code process reads from the supervisor."""


def read_frame(header: object, kinds: Tuple[str, ...]) -> Frame:
    """The frame ``header`` (parsed JSON) is, if it is one of ``kinds``; else WireError."""
    if not isinstance(header, dict):
        raise WireError("a frame's header must be a JSON object, not %s" % type(header).__name__)
    kind = header.get("t")
    found = KINDS.get(kind) if isinstance(kind, str) and kind in kinds else None
    if found is None:
        taken = ", ".join(kinds)
        raise WireError("a frame of kind %r is not one this end reads (%s)" % (kind, taken))
    fields = dict(header)
    del fields["t"]
    return found.from_wire(fields)


def read_host_frame(header: object) -> HostFrame:
    """The frame the host sent (``HOST_KINDS``); else WireError."""
    frame = read_frame(header, HOST_KINDS)
    if not isinstance(frame, HostFrame):  # (every kind of HOST_KINDS is one)
        raise WireError("a %r frame is not the host's" % frame.t)
    return frame
