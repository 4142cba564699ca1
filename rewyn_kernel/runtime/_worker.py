"""The worker: the one program that runs inside every sandbox.

It is never imported by the host. The host reads this file as text, appends a call to
``main(<config>)`` and sends it over the sandbox's stdin after a one-line bootstrap (see
``_protocol.BOOTSTRAP``), so an image needs nothing but ``python3`` (3.8 or newer, stdlib only).

Wire format, both directions: ``>II`` (header length, payload length), a JSON header, raw payload.

On start the worker moves the channel off fds 0 and 1 to private, close-on-exec descriptors, puts
``/dev/null`` on fd 0 and pipes on fds 1 and 2, and relays whatever arrives on those pipes as
``out`` frames. So ``print``, ``os.write(1, ...)`` and child processes all arrive as output, and
nothing user code writes to fd 1 or 2 can forge a frame. The original fd 2 stays the diagnostic
stream (start-up failures, faulthandler dumps) that the host reads separately.
"""

import ast
import builtins
import json
import linecache
import os
import queue
import re
import select
import signal
import struct
import sys
import threading
import time
import traceback
import types

HEADER = struct.Struct(">II")
CHUNK = 65536
WORKER_FILE = "<rewyn-worker>"
CO_COROUTINE = 0x80
TEXT_LIMIT = 1 << 20  # a single repr or docstring the worker bothers to send
ERROR_TEXT_LIMIT = 65536
TRACEBACK_LINE_LIMIT = 4096
TRACEBACK_LINES = 200
FLUSH_INTERVAL = 0.05
MAX_JSON_CONTAINERS = 100000  # the host's limit per frame (_protocol.MAX_JSON_CONTAINERS)

REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
)
BINARY_MIMES = ("image/png", "image/jpeg")


def _read_exact(fd, n):
    parts = []
    while n > 0:
        try:
            chunk = os.read(fd, min(n, 1 << 20))
        except InterruptedError:
            continue
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[written:]


class Channel:
    """Framed messages over the two private descriptors."""

    def __init__(self, rfd, wfd):
        self.rfd = rfd
        self.wfd = wfd
        self.lock = threading.Lock()
        self.owner = os.getpid()

    def send(self, header, payload=b"", body=None):
        if os.getpid() != self.owner:
            return  # a forked child of user code never speaks on the channel
        if body is None:
            body = json.dumps(header, ensure_ascii=True, default=repr).encode("ascii")
        with self.lock:
            _write_all(self.wfd, HEADER.pack(len(body), len(payload)) + body)
            if payload:
                _write_all(self.wfd, payload)

    def recv(self):
        head = _read_exact(self.rfd, HEADER.size)
        if head is None:
            return None
        body_len, payload_len = HEADER.unpack(head)
        body = _read_exact(self.rfd, body_len)
        payload = _read_exact(self.rfd, payload_len) if payload_len else b""
        if body is None or payload is None:
            return None
        return json.loads(body.decode("utf-8")), payload


class Pump(threading.Thread):
    """Relays the user's fd 1 and fd 2 pipes to the channel as ``out`` frames."""

    def __init__(self, channel, sources):
        threading.Thread.__init__(self, name="rewyn-pump", daemon=True)
        self.channel = channel
        self.sources = dict(sources)  # read fd -> stream name
        self.wake_r, self.wake_w = os.pipe()
        for fd in list(self.sources) + [self.wake_r]:
            os.set_blocking(fd, False)
        self.synced = threading.Event()

    def sync(self, timeout=10.0):
        """Return once everything written to fds 1 and 2 so far has been sent."""
        self.synced.clear()
        _write_all(self.wake_w, b"s")
        self.synced.wait(timeout)

    def _read(self, fd):
        try:
            data = os.read(fd, CHUNK)
        except (BlockingIOError, InterruptedError):
            return False
        if not data:
            del self.sources[fd]  # every writer closed: nothing more will come
            return False
        self.channel.send({"t": "out", "s": self.sources[fd]}, data)
        return True

    def run(self):
        while True:
            try:
                ready = select.select(list(self.sources) + [self.wake_r], [], [])[0]
            except InterruptedError:
                continue
            for fd in ready:
                if fd != self.wake_r and fd in self.sources:
                    self._read(fd)
            if self.wake_r in ready:
                try:
                    os.read(self.wake_r, 4096)
                except BlockingIOError:
                    pass
                # Drain what is in the pipes now; a child that keeps writing cannot hold us here.
                for fd in list(self.sources):
                    for _ in range(64):
                        if fd not in self.sources or not self._read(fd):
                            break
                self.synced.set()


RELAYED = ("out", "display", "result", "error", "input_request")


class Relay(threading.Thread):
    """Forwards a forked child's frames to the channel, whole and of allowed kinds only.

    The child runs user code, so its pipe carries whatever that code writes to it. Anything
    but a well-formed frame of a kind in RELAYED (or the child's one closing ``status``) kills
    the child's process group and is reported; a frame cut short by the child's death is
    dropped. The pipe is read to its end either way, so the child never blocks on it.
    """

    def __init__(self, channel, fd, child, config):
        threading.Thread.__init__(self, name="rewyn-relay", daemon=True)
        self.channel = channel
        self.fd = fd
        self.child = child
        self.max_header = config.get("max_header_bytes") or (16 << 20)
        self.max_payload = config.get("max_payload_bytes") or (1 << 20)
        self.status = None
        self.error = None

    def run(self):
        try:
            self.relay()
        except Exception as exc:
            self.fail("the code's process broke its frame pipe (%s)" % type(exc).__name__)
        while True:  # drain, so that nothing blocks writing to the pipe
            try:
                if not os.read(self.fd, CHUNK):
                    return
            except InterruptedError:
                continue
            except OSError:
                return

    def fail(self, message):
        if self.error is None:
            self.error = message
        try:
            os.killpg(self.child, signal.SIGKILL)
        except OSError:
            pass

    def relay(self):
        while True:
            head = _read_exact(self.fd, HEADER.size)
            if head is None:
                return
            body_len, payload_len = HEADER.unpack(head)
            if body_len > self.max_header or payload_len > self.max_payload:
                return self.fail("the code's process sent an oversized frame")
            body = _read_exact(self.fd, body_len)
            payload = _read_exact(self.fd, payload_len) if payload_len else b""
            if body is None or payload is None:
                return  # cut short by the child's death: dropped
            header = json.loads(body.decode("utf-8"))
            kind = header.get("t") if isinstance(header, dict) else None
            if kind == "status" and self.status is None:
                self.status = (int(header["exit_code"]), str(header["status"]))
            elif kind in RELAYED and (payload_len == 0 or kind == "out"):
                self.channel.send(header, payload, body=body)
            else:
                return self.fail("the code's process sent a frame it may not send (%r)" % kind)


class Worker:
    def __init__(self, config):
        self.config = config
        self.execution_count = 0
        self.executing = None
        self.in_user_code = False
        self.requests = queue.Queue()
        self.reply_cond = threading.Condition()
        self.reply_store = {}  # question id -> reply, until its asker takes it
        self.waiting = set()  # ids of questions still waiting
        self.reply_reading = False
        self.main_ident = threading.get_ident()
        self.module = types.ModuleType("__main__")
        self.namespace = self.module.__dict__
        self.namespace["__builtins__"] = builtins
        self.loop = None
        self.signal_lock = threading.Lock()
        self.interrupt_for = None  # id of the execution the host last asked to interrupt
        self.interrupt_sent = False
        self.interrupt_requested = False  # SIGINT came before the code started
        self.forking = False  # True while run_forked forks: that child keeps the channel
        self.child = None  # (pid, replies fd) of run_forked's running child
        self.child_replies = None  # in that child: where input() replies arrive
        self.exec_child = None  # in that child: its pid (a fork of user code has another)
        self.ask_count = 0
        self.reply_buffer = b""
        self.diag = None

    # -- set-up ------------------------------------------------------------------------------

    def setup_fds(self):
        chan_in = os.dup(0)  # os.dup returns non-inheritable descriptors
        chan_out = os.dup(1)
        self.diag = os.dup(2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        self.channel = Channel(chan_in, chan_out)
        self.pump = None
        self.setup_output()

        def in_child():
            if self.forking:
                self.channel.owner = os.getpid()
                return
            # A fork made by user code: it must never speak for the worker.
            self.channel.owner = -1
            try:
                import faulthandler

                faulthandler.disable()
            except Exception:
                pass
            for fd in (self.channel.rfd, self.channel.wfd, self.diag, self.child_replies):
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass

        os.register_at_fork(after_in_child=in_child)

    def setup_output(self, pipes=None):
        """Put fresh pipes (or ``pipes``) on fds 1 and 2 and make a pump that relays them."""
        if self.pump is not None:
            old = list(self.pump.sources) + list(self.keep.values())
            for fd in old + [self.pump.wake_r, self.pump.wake_w]:
                os.close(fd)  # a forked child lets go of its parent's pipes
        (out_r, out_w), (err_r, err_w) = pipes or (os.pipe(), os.pipe())
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        # Keep private write ends so the pipes never reach EOF, and fds 1 and 2 can be put back
        # after user code closes them.
        self.keep = {1: out_w, 2: err_w}
        self.pipe_ino = {1: os.fstat(out_w).st_ino, 2: os.fstat(err_w).st_ino}
        self.pump = Pump(self.channel, {out_r: "stdout", err_r: "stderr"})
        self.reset_stdio(force=True)

    def restore_fds(self):
        """Put the output pipes back on fds 1 and 2 if user code closed or replaced them."""
        for fd in (1, 2):
            try:
                intact = os.fstat(fd).st_ino == self.pipe_ino[fd]
            except OSError:
                intact = False
            if not intact:
                os.dup2(self.keep[fd], fd)

    def reset_stdio(self, force=False):
        self.restore_fds()
        import io

        def stream(fd, current):
            if not force and current is not None and not getattr(current, "closed", True):
                return current
            raw = io.FileIO(fd, "w", closefd=False)
            buffered = io.BufferedWriter(raw, buffer_size=CHUNK)
            return io.TextIOWrapper(
                buffered, encoding="utf-8", errors="backslashreplace", write_through=True
            )

        sys.stdout = sys.__stdout__ = stream(1, sys.stdout)
        sys.stderr = sys.__stderr__ = stream(2, sys.stderr)
        if force or sys.stdin is None or getattr(sys.stdin, "closed", True):
            sys.stdin = sys.__stdin__ = open(os.devnull, encoding="utf-8")

    def setup_malloc(self):
        """Under an address-space cap, use one malloc arena (before any thread starts).

        glibc gives each thread that allocates an arena of its own, reserving 64 MiB of
        address space apiece: three threads would use up most of a 256 MiB cap.
        """
        if not self.config.get("memory_limit_bytes"):
            return
        try:
            import ctypes

            ctypes.CDLL(None).mallopt(-8, 1)  # M_ARENA_MAX
        except Exception:
            pass

    def setup_limits(self):
        limit = self.config.get("memory_limit_bytes")
        if limit:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    def setup_signals(self):
        def on_sigint(signum, frame):
            if self.in_user_code:
                raise KeyboardInterrupt
            self.interrupt_requested = True  # before the code starts: it will not start

        signal.signal(signal.SIGINT, on_sigint)

    def start(self):
        import faulthandler

        self.setup_fds()
        if os.getpid() == 1:
            # First process of a PID namespace: leave the launcher's process group, so code
            # that signals "its parent" (pid 0 here: its own group) cannot kill the launcher.
            # (A container's first process already leads its own session: EPERM, and fine.)
            try:
                os.setpgid(0, 0)
            except OSError:
                pass
        faulthandler.enable(file=self.diag)
        self.setup_signals()
        self.setup_malloc()
        threading.stack_size(256 * 1024)
        self.pump.start()
        threading.Thread(target=self.read_requests, name="rewyn-reader", daemon=True).start()
        threading.Thread(target=self.flush_loop, name="rewyn-flusher", daemon=True).start()
        threading.stack_size(0)
        self.setup_limits()
        sys.modules["__main__"] = self.module
        builtins.display = self.display
        builtins.input = self.input
        try:
            import getpass

            getpass.getpass = self.getpass
        except Exception:
            pass
        os.chdir(self.config.get("cwd") or os.getcwd())
        self.channel.send(
            {
                "t": "ready",
                "pid": os.getpid(),
                "python": sys.version.split()[0],
                "implementation": sys.implementation.name,
                "executable": sys.executable,
                "platform": sys.platform,
            }
        )

    # -- the request loop ----------------------------------------------------------------------

    def read_requests(self):
        while True:
            try:
                message = self.channel.recv()
            except Exception:
                message = None
            if message is None:
                os._exit(0)  # the host is gone or closed the channel: leave nothing behind
            header, payload = message
            kind = header.get("t")
            child = self.child
            if kind == "interrupt":
                with self.signal_lock:
                    self.interrupt_for = header.get("id")
                    if self.executing is not None and self.executing == self.interrupt_for:
                        self.deliver_interrupt()
            elif kind == "input_reply":
                if child is not None:
                    try:
                        _write_all(child[1], json.dumps(header).encode() + b"\n")
                    except OSError:
                        pass
                else:
                    self.deliver_reply(header)
            else:
                self.requests.put((header, payload))

    def deliver_interrupt(self):
        """Raise KeyboardInterrupt in the running code, once (called under signal_lock)."""
        if self.interrupt_sent:
            return
        self.interrupt_sent = True
        if self.child is not None:
            os.kill(self.child[0], signal.SIGINT)
        else:
            signal.pthread_kill(self.main_ident, signal.SIGINT)

    def begin(self, exec_id, child=None):
        """Mark ``exec_id`` as running; an interrupt that arrived early is delivered now."""
        with self.signal_lock:
            self.child = child
            self.executing = exec_id
            self.interrupt_sent = False
            if self.interrupt_for == exec_id:
                if child is None:
                    self.interrupt_requested = True
                    self.interrupt_sent = True
                else:
                    self.deliver_interrupt()

    def end(self):
        with self.signal_lock:
            self.executing = None
            self.child = None
            self.interrupt_for = None
            self.interrupt_requested = False

    def flush_loop(self):
        while True:
            time.sleep(FLUSH_INTERVAL)
            if self.executing is None:
                continue
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.buffer.flush()
                except Exception:
                    pass

    def serve(self):
        while True:
            try:
                header, payload = self.requests.get()
                kind = header.get("t")
                if kind == "exec":
                    code = payload.decode("utf-8", "surrogatepass")
                    if self.config.get("fork_per_exec"):
                        self.run_forked(header, code)
                    else:
                        self.run(header, code)
                elif kind == "complete":
                    self.channel.send(self.complete(header))
                elif kind == "inspect":
                    self.channel.send(self.inspect(header))
                elif kind == "shutdown":
                    os._exit(0)
            except KeyboardInterrupt:
                continue  # an interrupt that arrived just as code finished

    # -- execution -------------------------------------------------------------------------------

    def oom_kills(self):
        """The memory cgroup's OOM-kill count (containers), or None where it is not ours."""
        if not self.config.get("oom_counter"):
            return None
        for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
            try:
                with open(path) as handle:
                    for line in handle:
                        parts = line.split()
                        if len(parts) == 2 and parts[0] == "oom_kill":
                            return int(parts[1])
            except (OSError, ValueError):
                continue
        return None

    def done(self, exec_id, exit_code, status, oom_before, signal_number=None, detail=None):
        after = self.oom_kills()
        frame = {"t": "done", "id": exec_id, "exit_code": exit_code, "status": status}
        if signal_number is not None:
            frame["signal"] = signal_number
        if detail:
            frame["detail"] = detail[:1000]
        if oom_before is not None and after is not None and after > oom_before:
            frame["oom"] = True
        self.channel.send(frame)

    def run(self, header, code):
        """Run one execution in this process: state carries over to the next."""
        self.execution_count += 1
        self.begin(header["id"])
        oom_before = self.oom_kills()
        self.reset_stdio()
        exit_code, status = self.execute_code(code, self.execution_count)
        if os.getpid() != self.channel.owner:
            # A fork() of user code fell off the end of the cell: keep its output, then leave.
            self.flush_stdio()
            os._exit(exit_code & 0xFF)
        self.end()
        self.restore_fds()  # output buffered after user code closed fd 1 or 2 still arrives
        self.finish_output()
        self.done(header["id"], exit_code, status, oom_before)

    def run_forked(self, header, code):
        """Run one execution in a forked child, so nothing of it survives.

        This process never runs user code: each execution starts from the same clean state at
        the cost of a fork, not an interpreter start. The child speaks only through a pipe of
        its own, which this process relays frame by frame (whole frames of the kinds user code
        may send: never ``done``), and only this process reports the end. Afterwards every
        other process of the execution is killed (all of the PID namespace when this is its
        first process).
        """
        self.execution_count += 1
        oom_before = self.oom_kills()
        frames_r, frames_w = os.pipe()
        replies_r, replies_w = os.pipe()
        # The child's output pipes are made here so that this process can still read what a
        # child that crashed wrote but never relayed (a faulthandler dump, say).
        pipes = (os.pipe(), os.pipe())
        self.forking = True
        with self.channel.lock:  # no thread of ours holds it across the fork
            pid = os.fork()
        if pid == 0:
            self.child_main(header, code, frames_w, replies_r, pipes, [frames_r, replies_w])
        self.forking = False
        for fd in (frames_w, replies_r, pipes[0][1], pipes[1][1]):
            os.close(fd)
        relay = Relay(self.channel, frames_r, pid, self.config)
        threading.stack_size(256 * 1024)
        relay.start()
        threading.stack_size(0)
        self.begin(header["id"], child=(pid, replies_w))
        wait_status = self.wait_child(pid)
        self.end()
        os.close(replies_w)
        self.kill_leftovers(pid)
        relay.join()  # every writer of the frame pipe is dead now: it ends
        os.close(frames_r)
        for (read_end, _), name in zip(pipes, ("stdout", "stderr")):
            self.relay_rest(read_end, name)
            os.close(read_end)
        sig, detail = None, None
        if relay.error is not None:
            exit_code, status, detail = 128 + signal.SIGKILL, "protocol_error", relay.error
        elif relay.status is not None:
            exit_code, status = relay.status
        elif os.WIFSIGNALED(wait_status):
            sig = os.WTERMSIG(wait_status)
            exit_code, status = 128 + sig, "crashed"
        else:
            exit_code, status = os.waitstatus_to_exitcode(wait_status), "crashed"
        self.finish_output()
        self.done(header["id"], exit_code, status, oom_before, sig, detail)

    def child_main(self, header, code, frames_w, replies_r, pipes, parent_fds):
        """The forked child of run_forked: run the code, report, exit. Never returns."""
        self.forking = False
        self.exec_child = os.getpid()
        for fd in parent_fds + [self.channel.rfd, self.channel.wfd, self.diag]:
            os.close(fd)
        self.diag = None
        self.channel = Channel(None, frames_w)
        self.child_replies = replies_r
        os.setpgid(0, 0)  # so that what it leaves running can be killed as a group
        if os.getppid() != 1:
            self.die_with_parent()
        threading.stack_size(256 * 1024)
        self.setup_output(pipes)
        self.pump.start()
        threading.Thread(target=self.flush_loop, daemon=True).start()
        threading.stack_size(0)
        import faulthandler

        faulthandler.enable(file=2)  # a crash dump of the code is its stderr here
        self.executing = header["id"]
        exit_code, status = self.execute_code(code, self.execution_count)
        if os.getpid() != self.exec_child:
            # A fork() of user code fell off the end of the cell: keep its output, then leave.
            self.flush_stdio()
            os._exit(exit_code & 0xFF)
        self.executing = None
        self.restore_fds()
        self.finish_output()
        self.channel.send({"t": "status", "exit_code": exit_code, "status": status})
        os._exit(0)

    @staticmethod
    def die_with_parent():
        """Without a PID namespace: make the kernel kill this child when the worker dies."""
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:
            pass

    def relay_rest(self, fd, name):
        """Send what is left in a dead child's output pipe (at most 4 MiB of it)."""
        os.set_blocking(fd, False)
        for _ in range(64):
            try:
                data = os.read(fd, CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                return
            self.channel.send({"t": "out", "s": name}, data)

    @staticmethod
    def wait_child(pid):
        while True:
            try:
                return os.waitpid(pid, 0)[1]
            except InterruptedError:
                continue
            except KeyboardInterrupt:
                continue  # a late interrupt meant for the child

    @staticmethod
    def kill_leftovers(pid):
        """Kill what the execution left running, and reap it."""
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        if os.getpid() == 1:
            # First process of a PID namespace: -1 reaches every other process in it, and only
            # those. (Anywhere else -1 would mean every process of this user: never.)
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            block = 0
        else:
            block = os.WNOHANG
        while True:
            try:
                if os.waitpid(-1, block)[0] == 0:
                    break
            except ChildProcessError:
                break
            except InterruptedError:
                continue

    def execute_code(self, code, count):
        """Compile and run ``code``; report result and error frames; return (exit, status)."""
        filename = "<cell-%d>" % count
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        exit_code = 0
        status = "ok"
        try:
            try:
                body, last = self.compile(code, filename)
                self.in_user_code = True
                try:
                    if self.interrupt_requested:
                        raise KeyboardInterrupt("interrupted before the code started")
                    self.eval_code(body)
                    value = self.eval_code(last) if last is not None else None
                finally:
                    self.in_user_code = False
                if value is not None:
                    self.namespace["_"] = value
                    data, metadata = self.mimebundle(value)
                    self.finish_output()  # what the cell printed comes before its value
                    self.send_rich(
                        {"t": "result", "data": data, "metadata": metadata, "count": count}
                    )
            except SystemExit as exc:
                self.in_user_code = False
                exit_code, status = self.exit_status(exc), "exit"
            except KeyboardInterrupt as exc:
                self.in_user_code = False
                self.send_error(exc)
                exit_code, status = 130, "interrupted"
            except BaseException as exc:
                self.in_user_code = False
                self.send_error(exc)
                exit_code, status = 1, "error"
        except KeyboardInterrupt:
            exit_code, status = 130, "interrupted"
        return exit_code, status

    @staticmethod
    def flush_stdio():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass

    def finish_output(self):
        self.flush_stdio()
        self.pump.sync()

    def compile(self, code, filename):
        flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        tree = compile(code, filename, "exec", ast.PyCF_ONLY_AST | flags, dont_inherit=True)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            expr = ast.Expression(tree.body.pop().value)
            last = compile(expr, filename, "eval", flags, dont_inherit=True)
        body = compile(tree, filename, "exec", flags, dont_inherit=True)
        return body, last

    def eval_code(self, code):
        value = eval(code, self.namespace)
        if code.co_flags & CO_COROUTINE:
            import asyncio

            if self.loop is None:
                self.loop = asyncio.new_event_loop()
            value = self.loop.run_until_complete(value)
        return value

    @staticmethod
    def exit_status(exc):
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, bool):
            return int(code)
        if isinstance(code, int):
            return code if -(2**31) <= code < 2**31 else 1
        try:
            sys.stderr.write(str(code) + "\n")
        except Exception:
            pass
        return 1

    def send_error(self, exc):
        try:
            # The worker's own frames (the cell runner, the SIGINT handler) are not the code's.
            report = traceback.TracebackException(type(exc), exc, exc.__traceback__)
            report.stack = traceback.StackSummary.from_list(
                [frame for frame in report.stack if frame.filename != WORKER_FILE]
            )
            lines = list(report.format())
        except Exception:
            lines = ["%s: <the exception could not be formatted>\n" % type(exc).__name__]
        if len(lines) > TRACEBACK_LINES:
            half = TRACEBACK_LINES // 2
            dropped = len(lines) - 2 * half
            lines = lines[:half] + ["... %d lines omitted ...\n" % dropped] + lines[-half:]
        lines = [line[:TRACEBACK_LINE_LIMIT] for line in lines]
        try:
            value = str(exc)[:ERROR_TEXT_LIMIT]
        except Exception:
            value = "<str() of the exception failed>"
        name = type(exc).__name__[:200]
        self.channel.send({"t": "error", "ename": name, "evalue": value, "traceback": lines})

    # -- rich output --------------------------------------------------------------------------

    def mimebundle(self, obj):
        data, metadata = {}, {}
        if not isinstance(obj, type):
            method = getattr(obj, "_repr_mimebundle_", None)
            if callable(method):
                try:
                    bundle = method(include=None, exclude=None)
                    if isinstance(bundle, tuple):
                        bundle, extra = bundle
                        metadata.update(extra or {})
                    data.update(bundle or {})
                except Exception:
                    pass
            for mime, name in REPR_METHODS:
                method = getattr(obj, name, None)
                if mime in data or not callable(method):
                    continue
                try:
                    value = method()
                except Exception:
                    continue
                if isinstance(value, tuple) and len(value) == 2:
                    value, extra = value
                    metadata[mime] = extra
                if value is None:
                    continue
                if mime in BINARY_MIMES and isinstance(value, bytes):
                    import base64

                    value = base64.b64encode(value).decode("ascii")
                data[mime] = value
        if "text/plain" not in data:
            try:
                data["text/plain"] = repr(obj)[:TEXT_LIMIT]
            except Exception as exc:
                data["text/plain"] = "<repr() failed: %s>" % type(exc).__name__
        return data, metadata

    def display(self, *objs, raw=False, metadata=None):
        """Show rich representations of objects, as IPython's display() does."""
        self.finish_output()  # text printed before the display stays before it
        for obj in objs:
            if raw:
                if not isinstance(obj, dict):
                    raise TypeError("display(raw=True) takes MIME bundles: dicts of type -> data")
                data, meta = obj, dict(metadata or {})
            else:
                data, meta = self.mimebundle(obj)
                meta.update(metadata or {})
            self.send_rich({"t": "display", "data": data, "metadata": meta})

    def send_rich(self, header):
        """Send a display or result frame; one too large for the host becomes a note."""
        limit = self.config.get("max_rich_bytes") or (16 << 20) - 4096
        try:
            if not isinstance(header["data"], dict) or not isinstance(header["metadata"], dict):
                raise TypeError("MIME bundle and metadata must be dicts")
            body = json.dumps(header, ensure_ascii=True, default=repr).encode("ascii")
            if body.count(b"{") + body.count(b"[") > MAX_JSON_CONTAINERS:
                raise ValueError("more than %d JSON objects and arrays" % MAX_JSON_CONTAINERS)
        except (TypeError, ValueError, RecursionError) as exc:
            note = "[rewyn: this output could not be encoded: %s]" % exc
            header = dict(header, data={"text/plain": note}, metadata={})
            body = None
        else:
            if len(body) > limit:
                note = (
                    "[rewyn: an output of %d bytes was dropped, over the limit of %d bytes. "
                    "Save large images or tables to a file instead.]" % (len(body), limit)
                )
                header = dict(header, data={"text/plain": note}, metadata={})
                body = None
        self.channel.send(header, body=body)

    def input(self, prompt=""):
        return self.ask(str(prompt), False)

    def getpass(self, prompt="Password: ", stream=None):
        return self.ask(str(prompt), True)

    def ask(self, prompt, password):
        self.finish_output()
        self.ask_count += 1
        ask_id = self.ask_count
        main = threading.current_thread() is threading.main_thread()
        self.channel.send(
            {
                "t": "input_request",
                "prompt": prompt[:65536],
                "password": password,
                "id": ask_id,
                "main": main,
            }
        )
        reply = self.await_reply(ask_id)
        if reply.get("error"):
            raise EOFError(reply["error"])
        return reply.get("value", "")

    def deliver_reply(self, reply):
        """File a reply under its question's id; one nobody waits for (stale) is dropped."""
        with self.reply_cond:
            if reply.get("id") in self.waiting:
                self.reply_store[reply["id"]] = reply
                self.reply_cond.notify_all()

    def await_reply(self, ask_id):
        """Wait for the reply to question ``ask_id``; other threads may be asking too."""
        with self.reply_cond:
            self.waiting.add(ask_id)
        try:
            while True:
                with self.reply_cond:
                    if ask_id in self.reply_store:
                        return self.reply_store.pop(ask_id)
                    if self.child_replies is None or self.reply_reading:
                        self.reply_cond.wait()  # the reader thread (or another asker) reads
                        continue
                    self.reply_reading = True
                try:
                    reply = self.read_reply_line()
                finally:
                    with self.reply_cond:
                        self.reply_reading = False
                        self.reply_cond.notify_all()
                self.deliver_reply(reply)
        finally:
            with self.reply_cond:
                self.waiting.discard(ask_id)
                self.reply_store.pop(ask_id, None)

    def read_reply_line(self):
        """In a forked child: the next reply from the pipe the worker relays them through."""
        while b"\n" not in self.reply_buffer:
            chunk = os.read(self.child_replies, 65536)
            if not chunk:
                raise EOFError("input() is not available: the reply pipe is closed")
            self.reply_buffer += chunk
        line, _, self.reply_buffer = self.reply_buffer.partition(b"\n")
        return json.loads(line.decode())

    # -- introspection -----------------------------------------------------------------------

    NAME_AT_END = re.compile(r"[A-Za-z_][\w.]*$")
    NAME_AROUND = re.compile(r"[A-Za-z_][\w.]*")

    def complete(self, header):
        import rlcompleter

        code, pos = header.get("code", ""), int(header.get("cursor_pos", 0))
        match = self.NAME_AT_END.search(code[:pos])
        text = match.group(0) if match else ""
        matches = []
        if text:
            completer = rlcompleter.Completer(self.namespace)
            for state in range(1000):
                try:
                    item = completer.complete(text, state)
                except Exception:
                    break
                if item is None:
                    break
                if item not in matches:
                    matches.append(item)
        return {
            "t": "complete_reply",
            "id": header.get("id"),
            "matches": matches,
            "cursor_start": pos - len(text),
            "cursor_end": pos,
        }

    def inspect(self, header):
        code, pos = header.get("code", ""), int(header.get("cursor_pos", 0))
        name = ""
        for match in self.NAME_AROUND.finditer(code):
            if match.start() <= pos <= match.end():
                name = match.group(0)
        reply = {"t": "inspect_reply", "id": header.get("id"), "found": False, "data": {}}
        if not name:
            return reply
        obj, found = self.lookup(name)
        if not found:
            return reply
        import inspect as inspect_module

        lines = ["Type:      %s" % type(obj).__name__]
        try:
            lines.append("Signature: %s%s" % (name, inspect_module.signature(obj)))
        except Exception:
            pass
        try:
            text = repr(obj)
            lines.append("Value:     %s" % (text[:2000] + ("..." if len(text) > 2000 else "")))
        except Exception:
            pass
        doc = inspect_module.getdoc(obj)
        if doc:
            lines.append("Docstring:\n%s" % doc[:TEXT_LIMIT])
        reply.update(found=True, data={"text/plain": "\n".join(lines)})
        return reply

    def lookup(self, dotted):
        parts = dotted.rstrip(".").split(".")
        if parts[0] in self.namespace:
            obj = self.namespace[parts[0]]
        elif hasattr(builtins, parts[0]):
            obj = getattr(builtins, parts[0])
        else:
            return None, False
        for part in parts[1:]:
            try:
                obj = getattr(obj, part)
            except Exception:
                return None, False
        return obj, True


def main(config):
    worker = Worker(config)
    try:
        worker.start()
    except BaseException:
        diag = getattr(worker, "diag", 2)
        _write_all(diag, ("rewyn worker failed to start:\n" + traceback.format_exc()).encode())
        os._exit(70)
    worker.serve()
