"""ipywidgets through the sandbox kernel: comms relayed both ways, and checked.

Real kernels (jupyter_client) with ipywidgets in the sandbox; the test client plays the
frontend: it reads the comm messages the code sends and sends the ones a browser would (a
slider moved). What the policy refuses is said in the cell, once.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from rewyn_kernel.kernel._relay import StreamRelay

from .conftest import DATASCIENCE_IMAGE, engine_problem, unavailable
from .kernel_client import Cell, run_cell, running_kernel, write_spec

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module", params=["bubblewrap", "docker"])
def kc(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BlockingKernelClient]:
    """The default kernel, and a docker kernel on the data-science image (ipywidgets 8)."""
    root = tmp_path_factory.mktemp("widgets")
    flags = []
    if request.param == "docker":
        problem = engine_problem("docker")
        if problem:
            unavailable(problem)
        flags = ["--SandboxKernel.provider=container", f"--SandboxKernel.image={DATASCIENCE_IMAGE}"]
    write_spec(root, "rewyn-widgets", flags)
    folder = root / "notebook"
    folder.mkdir()
    os.chown(folder, 1000, 1000)  # (a person's notebook folder)
    with running_kernel(root, "rewyn-widgets", cwd=folder) as (_, client):
        yield client


def opened(cell: Cell) -> dict[str, dict[str, Any]]:
    """The widget models the cell opened, by comm id: their state as the frontend got it."""
    return {
        m["content"]["comm_id"]: m["content"]["data"]["state"]
        for m in cell.of_type("comm_open")
        if m["content"]["target_name"] == "jupyter.widget"
    }


def model(cell: Cell, name: str) -> str:
    (comm_id,) = [i for i, state in opened(cell).items() if state["_model_name"] == name]
    return comm_id


def updates(cell: Cell, comm_id: str) -> list[dict[str, Any]]:
    return [
        m["content"]["data"]["state"]
        for m in cell.of_type("comm_msg")
        if m["content"]["comm_id"] == comm_id and "state" in m["content"]["data"]
    ]


def notes(cell: Cell) -> list[str]:
    return [line for line in cell.stream("stderr").splitlines() if line.startswith("[rewyn:")]


def send(kc: BlockingKernelClient, msg_type: str, content: dict[str, Any]) -> list[dict[str, Any]]:
    """Send a comm message as a frontend does; return what the kernel published in reply."""
    message = kc.session.msg(msg_type, content)
    kc.shell_channel.send(message)
    replies: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            reply = kc.get_iopub_msg(timeout=1)
        except Exception:  # queue.Empty
            continue
        if reply["parent_header"].get("msg_id") != message["header"]["msg_id"]:
            continue
        if reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
            return replies
        if reply["msg_type"] != "status":
            replies.append(reply)
    raise TimeoutError(f"no idle after {msg_type}; got {replies}")


def test_a_slider_moved_in_the_frontend_runs_the_callback_in_the_sandbox(
    kc: BlockingKernelClient,
) -> None:
    cell = run_cell(
        kc,
        "import os\nfrom ipywidgets import interact\n"
        "@interact(x=3)\ndef show(x):\n"
        "    print('x is', x, os.environ.get('REWYN_SANDBOX', '')[:6])",
    )
    assert cell.status == "ok", cell.messages
    slider = model(cell, "IntSliderModel")
    output = model(cell, "OutputModel")
    (shown,) = [m for m in cell.of_type("display_data") if WIDGET_VIEW in m["content"]["data"]]
    assert shown["content"]["data"][WIDGET_VIEW]["model_id"] in opened(cell)
    assert cell.stream() == "x is 3 rewyn-\n"  # (the first call, in the sandbox)

    moved = send(
        kc,
        "comm_msg",
        {
            "comm_id": slider,
            "data": {"method": "update", "state": {"value": 9}, "buffer_paths": []},
        },
    )
    kinds = [m["msg_type"] for m in moved]
    assert "stream" in kinds, kinds
    printed = "".join(m["content"]["text"] for m in moved if m["msg_type"] == "stream")
    assert printed == "x is 9 rewyn-\n"
    # The Output widget captured it: it was told this message's id, which the output names.
    captured = [
        m["content"]["data"]["state"]["msg_id"]
        for m in moved
        if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == output
    ]
    assert captured[0] == moved[0]["parent_header"]["msg_id"]
    assert run_cell(kc, "print(show.widget.kwargs)").stream() == "{'x': 9}\n"


def test_a_notebook_progress_bar_reaches_its_end(kc: BlockingKernelClient) -> None:
    cell = run_cell(kc, "from tqdm.notebook import tqdm\nfor _ in tqdm(range(50)): pass")
    assert cell.status == "ok", notes(cell)
    bar = model(cell, "FloatProgressModel")
    assert opened(cell)[bar]["max"] == 50
    assert updates(cell, bar)[-1] == {"bar_style": "success"}
    assert [u["value"] for u in updates(cell, bar) if "value" in u][-1] == 50
    labels = [
        u["value"]
        for i, state in opened(cell).items()
        if state["_model_name"] == "HTMLModel"
        for u in updates(cell, i)
    ]
    assert "100%" in labels
    assert notes(cell) == []


HOSTILE = """
import ipywidgets as w
from IPython.display import display
bad = '<b>kept</b><script>pwn()</script><img src=x onerror=pwn()><a href="javascript:pwn()">a</a>'
html = w.HTML(value=bad)
label = w.Label(value='$\\\\style{background:url(https://e.example/)}{x}$')
layout = w.Layout(border='1px solid url(https://e.example/b)', width='10px')
box = w.Box([html, label], layout=layout)
loud = w.Checkbox(description=bad, description_allow_html=True)
display(box, loud)
html.value = bad + '<style>*{background:url(https://e.example/s)}</style>'
"""


def test_what_a_widget_would_render_as_html_passes_the_html_filter(
    kc: BlockingKernelClient,
) -> None:
    cell = run_cell(kc, HOSTILE)
    assert cell.status == "ok", notes(cell)
    everything = repr([m["content"] for m in cell.of_type("comm_open", "comm_msg")])
    for word in ("<script", "onerror", "javascript:", "e.example", "\\\\style"):
        assert word not in everything, word
    html = model(cell, "HTMLModel")
    assert opened(cell)[html]["value"].startswith("<b>kept</b>")
    assert updates(cell, html)[-1]["value"].startswith("<b>kept</b>")
    layout = [
        i for i, s in opened(cell).items() if s["_model_name"] == "LayoutModel" and s["width"]
    ]
    assert opened(cell)[layout[0]]["border_top"] is None  # (its url() went; its width stayed)
    assert opened(cell)[layout[0]]["width"] == "10px"
    checkbox = model(cell, "CheckboxModel")
    assert opened(cell)[checkbox]["description"].startswith("<b>kept</b>")


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "import ipywidgets as w\nw.Image(value=b'https://e.example/i.png', format='url')",
            "an Image widget that would load its value from a URL",
        ),
        (
            "import ipywidgets as w\nw.Video(value=b'https://e.example/v.mp4', format='url')",
            "a Video widget that would load its value from a URL",
        ),
        (
            "from comm import create_comm\ncreate_comm(target_name='evil', data={'x': 1})",
            "'evil'",
        ),
        (
            "import ipywidgets as w\nfrom traitlets import Unicode\n"
            "class Evil(w.DOMWidget):\n"
            "    _model_module = Unicode('evil-widgets').tag(sync=True)\n"
            "    _view_module = Unicode('evil-widgets').tag(sync=True)\n"
            "Evil()",
            "'evil-widgets'",
        ),
        (
            "from comm import create_comm\n"
            "c = create_comm(target_name='jupyter.widget', data={'state': {"
            "'_model_module': '@jupyter-widgets/controls', '_model_name': 'IntSliderModel', "
            "'_view_module': '@jupyter-widgets/controls'}, 'buffer_paths': []},"
            " buffers=[b'x'] * 65)",
            "more than 64 buffers",
        ),
    ],
)
def test_what_the_policy_refuses_is_said_once(
    kc: BlockingKernelClient, code: str, said: str
) -> None:
    cell = run_cell(kc, code)
    assert cell.status == "ok", cell.messages
    # (a widget's layout, opened before the widget, is relayed; the widget is not)
    models = {state["_model_name"] for state in opened(cell).values()}
    assert models <= {"LayoutModel"}, models
    assert [m for m in cell.of_type("comm_open") if "evil" in repr(m["content"])] == []
    (note,) = notes(cell)
    assert said in note, note
    views = [
        m
        for m in cell.of_type("display_data", "execute_result")
        if WIDGET_VIEW in m["content"]["data"]
    ]
    assert views == []  # (a view of a model that was not relayed goes too)


def test_the_frontend_reaches_only_the_comms_the_code_opened(kc: BlockingKernelClient) -> None:
    run_cell(
        kc,
        "import comm\nseen = []\n"
        "comm.get_comm_manager().register_target('evil', lambda c, m: seen.append(m))",
    )
    assert send(kc, "comm_open", {"comm_id": "f" * 32, "target_name": "evil", "data": {}}) == []
    assert send(kc, "comm_msg", {"comm_id": "0" * 32, "data": {"method": "update"}}) == []
    cell = run_cell(kc, "print(seen)")
    assert cell.stream() == "[]\n"
    info = kc.comm_info(target_name="evil")
    reply = kc.get_shell_msg(timeout=10)
    assert reply["parent_header"]["msg_id"] == info
    assert reply["content"]["comms"] == {}


def test_comm_messages_beside_a_cell_take_their_turn(kc: BlockingKernelClient) -> None:
    """What a frontend sends when it loads (the widget manager opens its control comm and asks
    for the widgets' states) arrives just before a cell: each request keeps its own reply
    and idle status (ipykernel 7 would run the comm beside the cell and give the cell's
    status another parent: the frontend waited for ever)."""
    for msg_type, content in (
        ("comm_open", {"comm_id": "c" * 32, "target_name": "jupyter.widget.control", "data": {}}),
        ("comm_msg", {"comm_id": "c" * 32, "data": {"method": "request_states"}}),
    ):
        kc.shell_channel.send(kc.session.msg(msg_type, content))
    cell = run_cell(kc, "import time\ntime.sleep(0.5)\nprint('done')", timeout=30)
    assert cell.status == "ok"
    assert cell.stream() == "done\n"


def test_a_comm_handlers_text_goes_out_at_once_then_merged_in_order() -> None:
    """A widget's feedback: the first text at once; what follows within the gap at the loop's
    next turn, merged by stream, in order."""
    sent: list[tuple[str, str]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        relay = StreamRelay(lambda *piece: sent.append(piece), loop, interval=0)
        relay.write("stdout", "a")
        assert sent == [("stdout", "a")]
        for name, text in (("stdout", "b"), ("stdout", "c"), ("stderr", "d"), ("stdout", "e")):
            relay.write(name, text)
        assert len(sent) == 1
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert sent == [("stdout", "a"), ("stdout", "bc"), ("stderr", "d"), ("stdout", "e")]

    asyncio.run(main())


def test_a_comm_frame_over_the_wires_limit_is_refused_and_the_state_kept(
    kc: BlockingKernelClient,
) -> None:
    """A widget whose model is larger than one frame may hold (more than 100,000 JSON objects:
    plotly's FigureWidget, an anywidget with a big state) is not opened, with a note, as a
    display over the limit is shown as a note; the session and its variables live on."""
    assert run_cell(kc, "kept = 'still here'").status == "ok"
    cell = run_cell(
        kc,
        "from comm import create_comm\n"
        "huge = create_comm(target_name='jupyter.widget', data={'state': "
        "{'_model_name': 'DOMWidgetModel', 'rows': [{} for _ in range(100_001)]}, "
        "'buffer_paths': []})\n"
        "print('made')",
    )
    assert cell.status == "ok", cell.reply
    assert cell.stream() == "made\n"
    assert "rows" not in repr(cell.of_type("comm_open"))
    assert "JSON objects" in cell.stream("stderr"), cell.stream("stderr")
    after = run_cell(kc, "print(kept)")
    assert after.status == "ok", after.reply
    assert after.stream() == "still here\n"


def test_a_plotly_figure_widget_too_large_to_relay_is_said_plainly(
    kc: BlockingKernelClient,
) -> None:
    """plotly's FigureWidget (an anywidget) with a large figure: its comm_open is past the
    channel's limits. The note says what happened and what draws the same figure."""
    cell = run_cell(
        kc,
        "from comm import create_comm\n"
        "state = {'_model_module': 'anywidget', '_model_name': 'AnyModel', '_esm': '',\n"
        "         '_anywidget_id': 'plotly.graph_objs._figurewidget.FigureWidget',\n"
        "         '_widget_data': [{'y': [{} for _ in range(100_001)]}]}\n"
        "fig = create_comm(target_name='jupyter.widget', data={'state': state, "
        "'buffer_paths': []})\n"
        "print('made')",
    )
    assert cell.status == "ok", cell.reply
    assert cell.stream() == "made\n"
    (note,) = notes(cell)
    assert note == (
        "[rewyn: a widget (plotly.graph_objs._figurewidget.FigureWidget) was not shown: its "
        "state is too large to relay (more than 100000 JSON objects and arrays); a widget "
        "built on anywidget is refused in any case, as it carries JavaScript for the page to "
        "run. fig.show() draws the same figure, as data (no widget).]"
    )


def test_state_lost_in_a_widgets_callback_is_said_in_the_next_cell(
    kc: BlockingKernelClient,
) -> None:
    """A widget's callback, delivered between cells, that ends the code's process: the next
    cell runs in a fresh sandbox, and says so first, in words, with the cause."""
    cell = run_cell(
        kc,
        "import os, ipywidgets\nlost_here = 1\n"
        "ender = ipywidgets.IntSlider()\n"
        "ender.observe(lambda change: os._exit(3), 'value')\n"
        "print(ender.comm.comm_id)",
    )
    assert cell.status == "ok", cell.reply
    state = {"value": 1}
    send(kc, "comm_msg", {"comm_id": cell.stream().strip(), "data": {"method": "update",
         "state": state, "buffer_paths": []}})  # fmt: skip
    after = run_cell(kc, "lost_here")
    assert after.reply["content"]["ename"] == "NameError"
    said = after.stream("stderr")
    assert "state was lost" in said, said
    assert "exited with code 3" in said, said  # (the cause)
    assert "widget" in said, said
    assert run_cell(kc, "lost_here = 1").status == "ok"  # (the session goes on)


def test_state_lost_between_cells_is_said_by_the_next_cell_though_a_widget_moved_first(
    kc: BlockingKernelClient,
) -> None:
    """The code's process ends while idle (a thread's os._exit), then a slider moves: the
    message runs in the fresh sandbox and the next cell still says the state was lost, with
    the cause (the message used to take the word, and the cell showed a bare NameError)."""
    cell = run_cell(
        kc,
        "import os, threading, ipywidgets\nlost_idle = 1\nslider = ipywidgets.IntSlider()\n"
        "threading.Timer(0.5, os._exit, (5,)).start()\nprint(slider.comm.comm_id)",
    )
    assert cell.status == "ok", cell.reply
    time.sleep(1.5)
    state = {"value": 1}
    send(kc, "comm_msg", {"comm_id": cell.stream().strip(), "data": {"method": "update",
         "state": state, "buffer_paths": []}})  # fmt: skip
    after = run_cell(kc, "lost_idle")
    assert after.reply["content"]["ename"] == "NameError", after.reply
    said = after.stream("stderr")
    assert "state was lost" in said, [
        (m["msg_type"], str(m["content"])[:300]) for m in after.messages
    ]
    assert "exited with code 5" in said, said
