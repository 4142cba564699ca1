"""The worker: the one program that runs inside every sandbox.

It is never imported by the host. The host reads its parts as text (``_worker_wire.py``,
``_worker_frontend.py``, ``_worker_exec.py``, then this file: ``_protocol.worker_source``),
appends a call to ``main(<config>)`` and sends it over the sandbox's stdin after a one-line
bootstrap (``_protocol.BOOTSTRAP``), so an image needs nothing but ``python3`` (3.8 or newer,
stdlib only). This part holds the set-up and the request loop.

Wire format, both directions: ``>II`` (header length, payload length), a JSON header, raw payload.

On start the worker moves the channel off fds 0 and 1 to private, close-on-exec descriptors, puts
``/dev/null`` on fd 0 and pipes on fds 1 and 2, and relays whatever arrives on those pipes as
``out`` frames. So ``print``, ``os.write(1, ...)`` and child processes all arrive as output, and
nothing user code writes to fd 1 or 2 can forge a frame. The original fd 2 stays the diagnostic
stream (start-up failures, faulthandler dumps) that the host reads separately.
"""

import builtins
import json
import os
import queue
import signal
import sys
import threading
import time
import traceback
import types

from rewyn_kernel.runtime.worker.executor import Executor  # worker-source: strip
from rewyn_kernel.runtime.worker.frontend import Frontend  # worker-source: strip
from rewyn_kernel.runtime.worker.wire import (  # worker-source: strip
    CHUNK,
    Channel,
    Pump,
    _write_all,
)

FLUSH_INTERVAL = 0.05


class Worker(Executor, Frontend):
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


def main(config):
    worker = Worker(config)
    try:
        worker.start()
    except BaseException:
        diag = getattr(worker, "diag", 2)
        _write_all(diag, ("rewyn worker failed to start:\n" + traceback.format_exc()).encode())
        os._exit(70)
    worker.serve()
