"""How the worker runs code: in its own process or in a fork, and how it reports the end.

Part of the worker program; see ``_worker_wire.py`` for how the parts are put together.
"""

import ast
import linecache
import os
import signal
import sys
import threading
import traceback

from rewyn_kernel.runtime.worker.wire import (  # worker-source: strip
    CHUNK,
    Channel,
    Relay,
)

WORKER_FILE = "<rewyn-worker>"
CO_COROUTINE = 0x80
ERROR_TEXT_LIMIT = 65536
TRACEBACK_LINE_LIMIT = 4096
TRACEBACK_LINES = 200


class Executor:
    """Runs executions and reports them (a mixin of Worker)."""

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
            exit_code, status = (
                (os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else 1),
                "crashed",
            )
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
