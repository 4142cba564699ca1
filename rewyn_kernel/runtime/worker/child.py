"""The code's process: the only process of a sandbox that runs the code it is given.

The supervisor forks it: once for a session (it then keeps the code's variables from one
execution to the next) or once per execution for a one-shot sandbox. It holds no capability
(the supervisor dropped them before forking it, or, in a container, it takes a user of its own
first), never sees the host's channel, and speaks only through four pipes the supervisor made:

- ``ctl`` (supervisor to here): ``exec`` with the code as payload, ``input_reply`` with the
  answer as payload, ``interrupt`` (with a SIGINT), ``complete``, ``inspect``, ``fork_self``
  (the new branch's pipes come over a socket of their own: see ``fork_branch``) and
  ``resumed``, each read as its type (``frames.py``: ``CODE_KINDS``);
- ``frm`` (here to supervisor): ``display``, ``result``, ``error``, ``input_request``,
  ``complete_reply``, ``inspect_reply``, and ``status`` when an execution ends;
- fd 1 and fd 2: whatever is printed, by this process or by any program it starts.

The supervisor relays frames of those kinds only, and in a one-shot sandbox it takes the end of
an execution from how this process exited, so nothing written here can end another execution
or claim an ending that did not happen.
"""

from __future__ import annotations

import builtins
import fcntl
import io
import os
import queue
import select
import signal
import sys
import termios
import threading
import time
import types

from . import broker, kept, landlock, residue, system
from .comms import Comms
from .comms import available as comms_available
from .executor import LIMITS, Gate, Runner, describe_error
from .frames import (
    CODE_KINDS,
    CompleteFrame,
    ExecFrame,
    ForkSelfFrame,
    InputReplyFrame,
    InspectFrame,
    InterruptFrame,
    ResumedFrame,
    read_frame,
)
from .frontend import Output, Questions, complete, inspect
from .idle import next_request
from .ipython import IPythonRunner
from .ipython import available as ipython_available
from .record import WireError
from .wire import CHUNK, HEADER, Reader, Sender, encode_header

TYPE_CHECKING = False
if TYPE_CHECKING:  # (typing costs milliseconds to import: none of it at run time)
    from typing import Any, Dict, List, Optional, Tuple

    from .config import WorkerConfig
    from .frames import Frame

FLUSH_INTERVAL = 0.05
FORK_WAIT = 10.0
"""Seconds a fork waits for its pipes to arrive, and for the new branch to be set up."""
BRANCH_FDS = 5
QUIET_WAIT = 2.0
"""At most this long a fork waits for the process's other threads to stop running (see
``quiet_threads``)."""
QUIET_LOOK = 0.00005
"""How often ``quiet_threads`` looks again (this process's control thread, which handed over the
request, runs on for some microseconds: a fork waits no longer than that for it)."""
RELAY_WAIT = 0.2
"""Seconds a frame waits for the output printed before it to be read (a program that writes
without pause keeps a pipe from ever being empty)."""
RESET_SIGNALS = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGTSTP", "SIGTTIN")


class CodeProcess:
    """Set up a forked child to run code, then serve executions (session) or one (one-shot)."""

    def __init__(self, config: WorkerConfig, ctl: int, frm: int, once: bool, fds: int = -1) -> None:
        self.config = config
        self.once = once
        self.ctl = ctl
        self.frm = frm
        self.fds = fds  # where a fork's pipes come from (a session's process only)
        self.carrier = -1  # where its seccomp listener goes (broker.py), until sent
        self.oom_adj: Optional[bytes] = None  # what it was before a checkpoint raised it
        self.middles: List[int] = []  # processes in between this one and its branches, to reap
        self.forked = False  # True in a copy made by the code's own fork()
        self.sender = Sender(frm)
        self.requests: "queue.Queue[Optional[Tuple[Frame, bytes]]]" = queue.Queue()
        self.gate = Gate()
        self.executing = False
        self.interrupted: Any = None  # the execution the last interrupt frame named
        self.current: Any = None  # the execution under way
        self.exec_lock = threading.Lock()
        self.count = 0
        self.module = types.ModuleType("__main__")
        self.namespace = self.module.__dict__
        self.namespace["__builtins__"] = builtins
        self.questions = Questions(self.sender, self.finish_output)
        self.output = Output(self.sender, self.finish_output, config.max_rich_bytes)
        self.runner = Runner(
            self.namespace, self.sender, self.output, self.finish_output, self.gate
        )
        self.comms: Optional[Comms] = None
        """The comms ipywidgets talks through, where the sandbox's Python has ``comm``."""
        self.ipython: Optional[IPythonRunner] = None
        """The IPython shell cells run in (sessions that asked for it), once set up."""
        self.shell_note = ""
        self.keep: Dict[int, int] = {}
        self.cwd = config.cwd
        """Where the code's last execution ended (by path: see enter_view)."""
        self.pipe_inode: Dict[int, int] = {}

    # -- set-up ----------------------------------------------------------------------------

    def setup(self, out: int, err: int) -> None:
        """Called in the fresh child, before any code runs."""
        users = self.config.users
        if users:
            uid, gid = users.code
            if not system.become(uid, gid):
                raise RuntimeError("the code's process could not become %s:%s" % (uid, gid))
        # A Landlock domain of its own, nested in the supervisor's: no signal, trace or abstract
        # socket reaches the supervisor or an earlier code process from here (landlock.py).
        why = landlock.nest()
        if why:
            raise RuntimeError("the code's process could not restrict itself: %s" % why)
        if self.config.broker:
            # Every connect() of the code is made by the supervisor (broker.py), which takes
            # the code's socket for it: this process must be dumpable for that.
            system.set_dumpable(True)
            listener = broker.arm(bytes.fromhex(self.config.broker))
            broker.send_listener(self.carrier, listener)
            self.carrier = -1
        if self.once:
            self.clean_up()
        os.chdir(self.config.cwd or os.getcwd())
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        self.take_output(out, err)
        for name in RESET_SIGNALS:  # the supervisor ignores these; the code's programs must not
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.signal(signal.SIGINT, self.on_sigint)
        # Blocked since the fork (see the supervisor): one sent meanwhile is delivered now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        import faulthandler

        faulthandler.enable(file=self.keep[2])  # a crash of the code is its own stderr
        os.register_at_fork(after_in_child=self.in_fork)
        self.set_limits()
        LIMITS["network"] = self.config.network
        LIMITS["memory_limit_mb"] = self.config.memory_limit_mb
        self.reset_stdio(force=True)
        sys.modules["__main__"] = self.module
        builtins.display = self.output.display  # type: ignore[attr-defined]
        builtins.input = self.questions.input
        try:
            import getpass

            getpass.getpass = self.questions.getpass
        except Exception:
            pass
        self.start_threads()
        if self.config.shell == "ipython":
            self.setup_ipython()
        self.set_path()
        self.put_interpreter_first()

    def take_output(self, out: int, err: int) -> None:
        """Make the pipes ``out`` and ``err`` fds 1 and 2 (and close them as given)."""
        os.dup2(out, 1)
        os.dup2(err, 2)
        # Private copies keep the pipes open and put fds 1 and 2 back after the code closes them.
        self.keep = {1: os.dup(out), 2: os.dup(err)}
        os.close(out)
        os.close(err)
        self.pipe_inode = {fd: os.fstat(fd).st_ino for fd in (1, 2)}

    def clean_up(self) -> None:
        """What the last one-shot execution left where every execution writes but scratch:
        gone before this one takes code (its processes are all dead by now)."""
        clean = self.config.clean
        if clean:
            for path in clean.dirs:
                residue.empty_directory(path, list(clean.keep))
            if clean.ipc:
                residue.remove_sysv_ipc()

    def enter_view(self) -> None:
        """Change into the working directory again, by its path: the workspace's view is
        renewed between executions (the host published what the last one wrote), and the
        directory this process is in may be the old one's."""
        if self.cwd:
            try:
                os.chdir(self.cwd)
            except OSError:
                pass

    def set_path(self) -> None:
        """Give the code the import path ipykernel gives a cell: its working directory first
        (``''``), then ``PYTHONPATH`` and the user's site-packages (under HOME). The sandbox's
        interpreter started isolated, so its supervisor never saw any of these: only this
        process, the code's own, imports from where the code can write."""
        import site

        extra = [""]
        for entry in (os.environ.get("PYTHONPATH") or "").split(os.pathsep):
            if entry and entry not in sys.path and entry not in extra:
                extra.append(entry)
        sys.path[:0] = extra
        try:
            user_site = site.getusersitepackages()
            if self.config.network == "proxy" or kept.wanted():
                # Installs (through the proxy, or kept by the kernel for the notebook: see
                # kept.py) go where the code may write and import from: the user's
                # site-packages under HOME (the sandbox's own scratch), made now so that what
                # is installed later imports at once, after the environment's own.
                os.makedirs(user_site, exist_ok=True)
                if kept.wanted():
                    kept.configure(user_site)
                else:
                    os.environ.setdefault("PIP_TARGET", user_site)
            if os.path.isdir(user_site) and user_site not in sys.path:
                site.addsitedir(user_site)
        except Exception:
            pass

    def deliver(self, message: str) -> Tuple[int, str]:
        """Hand a comm message from the frontend to the code's comms (its handlers run code:
        a widget's callback), as an execution: interrupts and limits apply."""
        if self.comms is None:
            return 0, "ok"  # (no comm package here: nothing was opened to receive it)
        self.gate.in_code = True
        try:
            if self.gate.pending:
                raise KeyboardInterrupt("interrupted before the handler started")
            self.comms.deliver(message)
            return 0, "ok"
        except KeyboardInterrupt:
            return 130, "interrupted"
        except BaseException as exc:  # (a malformed message: the host checked it, but say so)
            sys.stderr.write("rewyn: a comm message could not be delivered: %r\n" % (exc,))
            return 1, "error"
        finally:
            self.gate.in_code = False
            self.gate.pending = False

    def put_interpreter_first(self) -> None:
        """Make ``python`` and ``python3`` on PATH the sandbox's own interpreter, and ``pip``
        its pip, as an activated environment does: the host's PATH may name others (pyenv's
        shims, outside the sandbox's view) or none (Debian has no ``python``). Its folder goes
        first; a name it lacks is a link to it in the sandbox's temporary folder (a link: that
        folder may be mounted noexec), never where the code's files are."""
        python = sys.executable
        if not python or not os.path.isabs(python):
            return
        home = os.path.dirname(python)
        first = [home]
        missing = [name for name in ("python", "python3") if not _exists(home, name)]
        if missing:
            folder = os.path.join(os.environ.get("TMPDIR") or "/tmp", "rewyn-bin-%d" % os.getuid())
            try:
                os.makedirs(folder, mode=0o755, exist_ok=True)
                for name in missing:
                    link = os.path.join(folder, name)
                    if os.path.lexists(link):
                        os.unlink(link)
                    os.symlink(python, link)
                first.append(folder)
            except OSError:
                pass  # (no writable temporary folder: the interpreter's own folder only)
        rest = (os.environ.get("PATH") or os.defpath).split(os.pathsep)
        os.environ["PATH"] = os.pathsep.join(first + [p for p in rest if p not in first])

    def setup_ipython(self) -> None:
        """Run cells through IPython where the sandbox's Python has it; say so where not."""
        if not ipython_available():
            self.shell_note = (
                "IPython is not installed in the sandbox's Python: cells run as plain Python "
                "(no magics, no !commands); install ipython there (or in the image) for them"
            )
            self.runner.syntax_hint = (
                "this sandbox runs plain Python: IPython is not installed in its Python, so "
                "%magics, !commands and ? help are not available here"
            )
            return
        try:
            self.ipython = IPythonRunner(
                self.module,
                sender=self.sender,
                output=self.output,
                flush=self.finish_output,
                gate=self.gate,
                network=self.config.network,
                kernel_version=self.config.kernel_version,
            )
            if comms_available():
                try:
                    self.comms = Comms(self.output, self.finish_output)
                except Exception:  # (a broken comm package: no widgets, cells still run)
                    self.comms = None
            try:
                from IPython.core.error import StdinNotImplementedError

                self.questions.unavailable = StdinNotImplementedError
                self.questions.unavailable_text = (
                    "raw_input was called, but this frontend does not support input requests."
                )
            except ImportError:
                pass
        except Exception as exc:  # a broken IPython: plain Python still works
            self.shell_note = "IPython could not start here (%s): cells run as plain Python" % (
                type(exc).__name__,
            )

    def set_limits(self) -> None:
        import resource

        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        except (OSError, ValueError):
            pass
        size = self.config.file_size_limit
        if size is not None:
            try:  # (Python ignores SIGXFSZ: a write past it fails with EFBIG)
                resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
            except (OSError, ValueError):
                pass
        nproc = self.config.nproc
        if nproc:
            try:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            except (OSError, ValueError):
                pass
        limit = self.config.memory_limit_bytes
        if limit:
            system.one_malloc_arena()  # before any thread starts
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    def in_fork(self) -> None:
        """A fork made by the code: it must never speak for this process or read its input
        (one made by ``fork_branch`` is given pipes of its own after)."""
        self.sender.live = False
        self.forked = True
        for fd in (self.ctl, self.frm, self.fds):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.ctl = self.frm = self.fds = -1

    # -- branches --------------------------------------------------------------------------

    def fork_branch(self, asked: ForkSelfFrame) -> bool:
        """Fork this process into a new branch of the session (the supervisor asked, between
        executions): the same variables, imports and figures, in a process whose parent is the
        supervisor (this process forks twice; the one in between exits at once). True in the
        new branch, which then serves its own pipes; False here, at once.

        Nothing here waits for the branch: this process goes on to the next request (the
        host's next execution, as a checkpoint is taken between cells) as soon as its own
        fork returns, and the branch says on its own pipe when it is set up (or the process in
        between says there that it could not make it): the state it holds is this one's
        before anything read after the fork."""
        fds = self.take_fds()
        if len(fds) != BRANCH_FDS:
            for fd in fds:
                os.close(fd)
            failed = {"status": "fork_failed", "n": asked.n, "detail": "no pipes came"}
            self.sender.send({"t": "status", "id": None, **failed})
            return False
        # (``random`` reseeds itself in every fork: the branch puts its state back)
        chance = sys.modules.get("random")
        state = chance.getstate() if chance is not None else None
        why = ""
        switch = sys.getswitchinterval()
        try:
            sys.setswitchinterval(60.0)  # (no other Python thread runs until the fork is made)
            quiet_threads()
            middle = os.fork()
        except OSError as exc:
            middle, why = -1, "the code's process could not fork: %s" % (exc.strerror or exc)
        finally:
            sys.setswitchinterval(switch)
        if middle == 0:
            try:
                try:
                    branch = os.fork()
                except OSError as exc:
                    how = exc.strerror or exc
                    say_failed(fds[1], "the process in between could not fork: %s" % how)
                    os._exit(0)
                if branch != 0:
                    os._exit(0)
                self.become_branch(fds, asked)
                if chance is not None and not asked.reseed:
                    chance.setstate(state)
                self.sender.send(
                    {"t": "status", "id": None, "status": "forked", "pid": os.getpid()}
                )
                return True
            except BaseException:
                os._exit(70)
        if why:
            say_failed(fds[1], why)
        for fd in fds:
            os.close(fd)
        if not why:
            # (reaped as this process next looks up from its work: a thread of its own to wait
            # could fail to start, at the process limit, and a fork must not cost the session)
            self.middles.append(middle)
        return False

    def reap_middles(self) -> None:
        """Reap the processes in between this one and its branches that have exited (the code's
        own ``os.wait()`` may have taken one: it is gone either way)."""
        for pid in list(self.middles):
            try:
                done = os.waitpid(pid, os.WNOHANG)[0] == pid
            except ChildProcessError:
                done = True
            if done:
                self.middles.remove(pid)

    def take_fds(self) -> List[int]:
        """The descriptors the supervisor sent for a fork (all of them, or none)."""
        import array
        import socket

        if self.fds < 0 or not select.select([self.fds], [], [], FORK_WAIT)[0]:
            return []
        carrier = socket.socket(fileno=os.dup(self.fds))
        try:
            size = socket.CMSG_SPACE(BRANCH_FDS * 4)
            _, ancillary, _, _ = carrier.recvmsg(1, size)
        except OSError:
            return []
        finally:
            carrier.close()
        found = array.array("i")
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                found.frombytes(data[: len(data) - len(data) % found.itemsize])
        return list(found)

    def become_branch(self, fds: List[int], asked: ForkSelfFrame) -> None:
        """(In the new branch.) Take the pipes the supervisor made, and start again what a
        fork does not copy: this process's own threads, and locks they may have held."""
        ctl, frm, out, err, sock = fds
        self.forked = False
        self.middles = []  # (its source's, not its own)
        self.ctl, self.frm, self.fds = ctl, frm, sock
        self.sender.fd = frm
        self.sender.lock = threading.Lock()
        self.sender.live = True
        for old in self.keep.values():
            os.close(old)
        self.take_output(out, err)
        import faulthandler

        faulthandler.enable(file=self.keep[2])
        self.reset_stdio(force=True)  # (new buffers: a thread may have held the old ones' locks)
        self.requests = queue.Queue()
        self.exec_lock = threading.Lock()
        self.gate.in_code = self.gate.pending = False
        self.executing, self.interrupted, self.current = False, None, None
        self.questions.reset()
        if asked.reseed:
            reseed()
        if asked.once:  # (a one-shot execution's process, forked from a preloaded one)
            self.once = True
            self.clean_up()
        if asked.pause:
            # (the first process the kernel kills when memory runs out: a checkpoint must
            # never cost a cell its memory)
            self.oom_adj = system.set_oom_score_adj(b"1000")
        self.start_threads()

    def on_resumed(self) -> None:
        """A checkpoint became a session's state again: it is no longer the first to go when
        memory runs short."""
        if self.oom_adj is not None:
            system.set_oom_score_adj(self.oom_adj)
            self.oom_adj = None

    def start_threads(self) -> None:
        threading.stack_size(256 * 1024)
        threading.Thread(target=self.read_control, name="rewyn-control", daemon=True).start()
        threading.Thread(target=self.flush_loop, name="rewyn-flush", daemon=True).start()
        threading.stack_size(0)

    def on_sigint(self, signum: int, frame: Any) -> None:
        if self.gate.in_code:
            raise KeyboardInterrupt
        if self.executing or self.once:
            self.gate.pending = True  # before the code started: it will not start

    def reset_stdio(self, force: bool = False) -> None:
        self.restore_fds()

        def stream(fd: int, current: Any) -> Any:
            if not force and current is not None and not getattr(current, "closed", True):
                return current
            raw = io.FileIO(fd, "w", closefd=False)
            buffered = io.BufferedWriter(raw, buffer_size=CHUNK)
            return io.TextIOWrapper(
                buffered, encoding="utf-8", errors="backslashreplace", write_through=True
            )

        for name, fd in (("stdout", 1), ("stderr", 2)):
            value = stream(fd, getattr(sys, name))
            setattr(sys, name, value)
            setattr(sys, "__%s__" % name, value)
        if force or sys.stdin is None or getattr(sys.stdin, "closed", True):
            sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 (kept open: it is stdin)
            setattr(sys, "__stdin__", sys.stdin)  # noqa: B010 (a Final name to type checkers)

    def restore_fds(self) -> None:
        """Put the output pipes back on fds 1 and 2 if the code closed or replaced them."""
        for fd in (1, 2):
            try:
                intact = os.fstat(fd).st_ino == self.pipe_inode[fd]
            except OSError:
                intact = False
            if not intact:
                os.dup2(self.keep[fd], fd)

    def finish_output(self) -> None:
        """Flush what the code printed, and wait (briefly) until the supervisor has read it
        from the pipes: output and frames reach it by different pipes, so a frame sent now
        (a display, a clear_output, the end) comes after it, as on ipykernel."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        pause, waited = 0.00005, 0.0
        while self.unread() and waited < RELAY_WAIT:
            time.sleep(pause)
            waited += pause
            pause = min(pause * 2, 0.002)

    def unread(self) -> bool:
        """Whether a pipe of fd 1 or 2 holds bytes the supervisor has not read yet (Linux
        answers FIONREAD on a pipe's write end too)."""
        for fd in self.keep.values():
            try:
                if fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0") != b"\0\0\0\0":
                    return True
            except OSError:
                pass
        return False

    def flush_loop(self) -> None:
        while True:
            time.sleep(FLUSH_INTERVAL)
            # (between cells too: what a thread of the code's prints reaches a listener)
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.buffer.flush()
                except Exception:
                    pass

    # -- requests --------------------------------------------------------------------------

    def read_control(self) -> None:
        reader = Reader(self.ctl)
        while True:
            try:
                frame = reader.recv()
            except Exception:
                frame = None
            if frame is None:
                self.questions.close()
                self.requests.put(None)
                return
            header, payload = frame
            try:
                request = read_frame(header, CODE_KINDS)
            except WireError as exc:  # (the supervisor's bug: nothing here can be trusted)
                os.write(self.keep[2], ("rewyn: the code's process: %s\n" % exc).encode())
                os._exit(70)
            if isinstance(request, InputReplyFrame):
                self.questions.deliver(request, payload)
            elif isinstance(request, InterruptFrame):
                with self.exec_lock:  # (its signal follows, for code that is running)
                    self.interrupted = request.id
                    if self.current is not None and self.current == self.interrupted:
                        self.gate.pending = True
            elif isinstance(request, ResumedFrame):
                self.on_resumed()
            else:
                self.requests.put((request, payload))

    def serve(self) -> None:
        """Answer requests until the control stream ends (or, one-shot, after one execution)."""
        while True:
            try:
                if self.middles:
                    self.reap_middles()
                request = next_request(self.requests, self.ipython)  # (asyncio runs meanwhile)
                if request is None:
                    os._exit(0)  # the supervisor is gone
                frame, payload = request
                if isinstance(frame, ExecFrame):
                    self.execute(frame, payload.decode("utf-8", "surrogatepass"), self.once)
                    continue
                if isinstance(frame, ForkSelfFrame):
                    self.fork_branch(frame)  # (the new branch goes on serving from here)
                    continue
                self.enter_view()  # (IPython's completer reads the working directory too)
                ipy = self.ipython
                if isinstance(frame, CompleteFrame):
                    reply = ipy.complete(frame) if ipy else complete(self.namespace, frame)
                    self.output.send_any(reply)
                elif isinstance(frame, InspectFrame):
                    reply = ipy.inspect(frame) if ipy else inspect(self.namespace, frame)
                    self.output.send_any(reply)
            except KeyboardInterrupt:
                continue  # an interrupt that arrived just as the code finished

    def execute(self, frame: ExecFrame, code: str, once: bool) -> None:
        delivery = frame.comm  # (a comm message from the frontend, not code)
        if not delivery:
            self.count = frame.count or self.count + 1
        self.reset_stdio()
        self.enter_view()
        self.executing = True
        with self.exec_lock:  # an interrupt that came first means: do not start
            self.current = frame.id
            if self.current is not None and self.current == self.interrupted:
                self.gate.pending = True
        if self.ipython is not None:
            # The request being answered, as the frontend knows it: an Output widget tags what
            # it captures with its id.
            parent = frame.parent or frame.id
            kind = "comm_msg" if delivery else "execute_request"
            self.ipython.shell.set_parent({"header": {"msg_id": parent, "msg_type": kind}})
        if delivery:
            exit_code, status = self.deliver(code)
        elif self.ipython is not None:
            exit_code, status = self.ipython.run(code, self.count, frame.silent)
        else:
            exit_code, status = self.runner.run(code, self.count)
        if self.forked:
            # A fork() made by the code fell off the end of the cell: keep its output, then leave.
            self.finish_output()
            os._exit(exit_code & 0xFF)
        self.executing = False
        with self.exec_lock:
            self.current = None
        self.restore_fds()  # output buffered after the code closed fd 1 or 2 still arrives
        self.finish_output()
        try:
            self.cwd = os.getcwd()
        except OSError:
            pass
        self.sender.send({"t": "status", "id": frame.id, "exit_code": exit_code, "status": status})
        if once:
            os._exit(exit_code & 0xFF)


def say_failed(pipe: int, why: str) -> None:
    """Say on a new branch's pipe, where the supervisor waits for the branch, that it could not
    be made (before the pipe's end: the supervisor reads the word first). Written whole, at
    once: in the process in between no lock of this process's can be trusted."""
    body = encode_header({"t": "status", "id": None, "status": "fork_failed", "detail": why})
    try:
        os.write(pipe, HEADER.pack(len(body), 0) + body)
    except OSError:
        pass  # (the supervisor gave up on it: it reads the pipe's end as the same)


def quiet_threads() -> None:
    """Wait (at most QUIET_WAIT) until no other thread of this process is running, holding the
    GIL all along, so no Python thread can start anything meanwhile.

    A library's own fork handler can deadlock when a fork catches its threads between two
    states: OpenBLAS's shuts its worker threads down before every fork, and loses the wake-up
    of one that was just going to sleep after a matrix product. Once the threads that were
    computing have finished and wait (for work, or for the GIL), the fork is safe. The checks
    read ``/proc`` through libc called as a Python-API library (ctypes' PyDLL keeps the GIL).
    """
    import ctypes

    me = threading.get_native_id()
    try:
        others = [int(tid) for tid in os.listdir("/proc/self/task") if int(tid) != me]
        libc = ctypes.PyDLL(None)
    except (OSError, ValueError):
        return
    if not others:
        return
    libc.open.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    libc.read.restype = ctypes.c_ssize_t
    libc.close.argtypes = [ctypes.c_int]
    buffer = ctypes.create_string_buffer(1024)

    def running(tid: int) -> bool:
        fd = libc.open(b"/proc/self/task/%d/stat" % tid, os.O_RDONLY)
        if fd < 0:
            return False  # (it ended)
        size = libc.read(fd, buffer, 1023)
        libc.close(fd)
        stat = buffer.raw[: max(0, size)]
        return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"R"

    # (One look that finds none running is enough: a thread that waits stays waiting, as no
    # Python thread can take the GIL meanwhile; one that computes shows as running.)
    deadline = time.perf_counter() + QUIET_WAIT
    while any(running(tid) for tid in others) and time.perf_counter() < deadline:
        pause = time.perf_counter() + QUIET_LOOK
        while time.perf_counter() < pause:
            pass


def reseed() -> None:
    """New seeds from the OS for ``random`` and NumPy's global generator (where imported)."""
    import random

    random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        try:
            numpy_random.seed()
        except Exception:
            pass


def _exists(folder: str, name: str) -> bool:
    return os.access(os.path.join(folder, name), os.X_OK)


def run_child(config: WorkerConfig, pipes: Dict[str, int], once: bool) -> None:
    """The forked child's whole life: never returns."""
    try:
        child = CodeProcess(config, pipes["ctl"], pipes["frm"], once, pipes.get("fds", -1))
        child.carrier = pipes.get("broker", -1)
        child.setup(pipes["out"], pipes["err"])
        if not once:
            shell = "ipython" if child.ipython is not None else "stdlib"
            ready = {"t": "status", "id": None, "status": "ready", "shell": shell}
            if child.shell_note:
                ready["note"] = child.shell_note
            child.sender.send(ready)
        child.serve()
    except BaseException as exc:
        try:
            lines = describe_error(exc)[2]
            os.write(2, ("rewyn: the code's process failed: %s" % "".join(lines)).encode())
        except BaseException:
            pass
    os._exit(70)
