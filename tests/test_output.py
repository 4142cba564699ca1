"""Output: live streaming, caps that keep head and tail, hostile bytes, rich outputs, input."""

from __future__ import annotations

import time
from collections.abc import Callable

from rewyn_kernel.runtime.sandbox import RichOutput, Sandbox


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_200_mb_of_output_keeps_head_and_tail_in_bounded_memory(
    make_box: Callable[..., Sandbox],
) -> None:
    box = make_box(timeout=120)
    code = (
        "import sys\n"
        "sys.stdout.write('HEAD\\n')\n"
        "line = 'x' * 1023 + '\\n'\n"
        "for _ in range(200 * 1024 - 1): sys.stdout.write(line)\n"
        "sys.stdout.write('y' * 1018 + 'TAIL\\n')\n"
    )
    before = rss_kib()
    started = time.monotonic()
    result = box.execute(code)
    elapsed = time.monotonic() - started
    growth_mib = (rss_kib() - before) / 1024
    total = 5 + 1024 * (200 * 1024 - 1) + 1023
    assert result.ok, (result.ending, result.message, result.stderr[-2000:])
    assert result.stdout_bytes == total
    assert result.stdout_truncated
    assert result.stdout.startswith("HEAD\nxxx")
    assert result.stdout.endswith("yyyTAIL\n")
    kept = box.spec.output_limit_bytes
    assert f"{total - kept:,} bytes of stdout dropped" in result.stdout
    assert len(result.stdout.encode()) < kept + 1000
    assert growth_mib < 50, growth_mib
    assert elapsed < 60, elapsed


def test_streaming_callback_sees_output_while_the_code_runs(
    make_box: Callable[..., Sandbox],
) -> None:
    seen: list[tuple[float, str, str]] = []
    box = make_box()
    code = "import time\nprint('first', end='')\ntime.sleep(1.5)\nprint(' second')"
    result = box.execute(
        code, on_stream=lambda name, text: seen.append((time.monotonic(), name, text))
    )
    finished = time.monotonic()
    assert result.stdout == "first second\n"
    assert "".join(text for _, _, text in seen) == result.stdout
    assert seen[0][2] == "first"
    assert finished - seen[0][0] > 1.0  # it arrived while the code slept, not at the end


def test_what_streamed_equals_the_result_when_truncated(make_box: Callable[..., Sandbox]) -> None:
    parts: dict[str, list[str]] = {"stdout": [], "stderr": []}
    box = make_box(output_limit_bytes=4096)
    result = box.execute(
        "import sys\nfor i in range(2000): print(i)\nsys.stderr.write('e' * 10000)",
        on_stream=lambda name, text: parts[name].append(text),
    )
    assert "".join(parts["stdout"]) == result.stdout
    assert "".join(parts["stderr"]) == result.stderr
    assert result.stdout.startswith("0\n1\n2\n")
    assert result.stdout.endswith("1998\n1999\n")
    assert result.stderr_bytes == 10000
    assert result.stderr_truncated


def test_a_50_mb_line_without_newline(make_box: Callable[..., Sandbox]) -> None:
    result = make_box(timeout=60).execute("import sys; sys.stdout.write('z' * (50 * 1024 * 1024))")
    assert result.ok
    assert result.stdout_bytes == 50 * 1024 * 1024
    assert result.stdout.startswith("zzzz")
    assert result.stdout.endswith("zzzz")


def test_invalid_utf8_and_nul_bytes_become_text(make_box: Callable[..., Sandbox]) -> None:
    code = (
        "import os, sys\n"
        "os.write(1, b'ok \\xff\\xfe bad \\x00 nul \\xe2\\x82')\n"
        "os.write(1, b'\\xac euro split across writes\\n')\n"
        "sys.stderr.write('\\udcff lone surrogate\\n')\n"
        "print(chr(0xD800))"
    )
    result = make_box().execute(code)
    assert result.ok, result.stderr
    assert result.stdout.startswith("ok \ufffd\ufffd bad \x00 nul €")
    assert "euro split across writes" in result.stdout
    assert "lone surrogate" in result.stderr
    result.model_dump_json()  # everything in it encodes


def test_child_processes_and_raw_fd_writes_are_output(make_box: Callable[..., Sandbox]) -> None:
    code = (
        "import os, subprocess\n"
        "os.write(1, b'raw fd 1\\n')\n"
        "os.write(2, b'raw fd 2\\n')\n"
        "subprocess.run(['echo', 'from a child'])\n"
        "subprocess.run('echo child err >&2', shell=True)\n"
    )
    result = make_box().execute(code)
    assert result.stdout == "raw fd 1\nfrom a child\n"
    assert result.stderr == "raw fd 2\nchild err\n"


def test_stdin_is_empty_and_not_the_channel(make_box: Callable[..., Sandbox]) -> None:
    code = "import sys, os\nprint(repr(sys.stdin.read()), repr(os.read(0, 100)))"
    assert make_box().execute(code).stdout == "'' b''\n"


def test_display_and_last_expression_are_rich_outputs(make_box: Callable[..., Sandbox]) -> None:
    seen: list[RichOutput] = []
    code = (
        "class Table:\n"
        "    def _repr_html_(self): return '<table><tr><td>1</td></tr></table>'\n"
        "    def __repr__(self): return 'Table(1)'\n"
        "print('before')\n"
        "display(Table())\n"
        "display({'image/png': 'iVBORw0KGgo='}, raw=True)\n"
        "Table()"
    )
    result = make_box().execute(code, on_output=seen.append)
    assert result.stdout == "before\n"
    assert list(result.outputs) == seen
    first, image, last = result.outputs
    assert first.output_type == "display_data"
    assert first.data == {
        "text/html": "<table><tr><td>1</td></tr></table>",
        "text/plain": "Table(1)",
    }
    assert image.data == {"image/png": "iVBORw0KGgo="}
    assert last.output_type == "execute_result"
    assert last.data["text/plain"] == "Table(1)"


def test_input_is_answered_by_the_callback_or_fails_clearly(
    make_box: Callable[..., Sandbox],
) -> None:
    with make_box(timeout=5).session() as session:
        prompts: list[tuple[str, bool]] = []

        def answer(prompt: str, password: bool) -> str:
            prompts.append((prompt, password))
            time.sleep(0.2)
            return "Ada"

        result = session.execute("name = input('Name? ')\nprint('hi', name)", on_input=answer)
        assert result.stdout == "hi Ada\n"
        assert prompts == [("Name? ", False)]
        refused = session.execute("input('again? ')")
        assert refused.error is not None
        assert refused.error.ename == "EOFError"
        assert "not available" in refused.error.evalue


def test_completion_and_inspection_use_the_sandbox_namespace(
    make_box: Callable[..., Sandbox],
) -> None:
    with make_box().session() as session:
        session.execute("def greeting_for(name: str) -> str:\n    'Say hello.'\n    return name\n")
        completion = session.complete("greet", 5)
        assert completion is not None
        assert "greeting_for(" in completion.matches
        assert (completion.cursor_start, completion.cursor_end) == (0, 5)
        info = session.inspect("greeting_for", 3)
        assert info is not None
        assert info.found
        assert "Say hello." in info.data["text/plain"]
        assert "(name: str) -> str" in info.data["text/plain"]
        missing = session.inspect("no_such_name", 2)
        assert missing is not None
        assert not missing.found


def test_rich_outputs_are_bounded_in_count_and_size(make_box: Callable[..., Sandbox]) -> None:
    box = make_box()
    many = box.execute("for i in range(1200): display({'text/plain': str(i)}, raw=True)")
    assert many.ok
    assert len(many.outputs) == 1000
    assert "200 rich outputs dropped" in many.stderr
    huge = box.execute("display({'image/png': 'A' * (20 * 1024 * 1024)}, raw=True)\nprint('alive')")
    assert huge.ok, huge.message
    assert huge.stdout == "alive\n"
    assert "over the limit" in huge.outputs[0].data["text/plain"]
    odd = box.execute("display(5, raw=True)")
    assert odd.error is not None
    assert odd.error.ename == "TypeError"
    weird = box.execute(
        "class W:\n    def _repr_mimebundle_(self, include, exclude): return {('a',): 1}\nW()"
    )
    assert weird.ok
    assert "could not be encoded" in weird.outputs[0].data["text/plain"]
