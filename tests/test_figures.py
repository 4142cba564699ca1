"""ipympl's interactive figures through the widget policy: relayed, and every trait checked.

The first tests play real ipympl traffic (a figure made, drawn, resized, zoomed and saved by
ipympl and matplotlib in a process of their own, recording what they send) and hostile
variants of it through ``WidgetPolicy``; the last ones run real sandbox kernels (jupyter_client)
and play the page's side of a figure: its events go in, frames come back.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from rewyn_kernel.kernel.widgets import Relayed, WidgetPolicy
from rewyn_kernel.runtime.sandbox import CommFrame

from .kernel_client import Cell, run_cell, running_kernel, write_spec
from .test_widgets import WIDGET_VIEW, notes, opened, send

pytest.importorskip("ipympl", reason="ipympl is a test dependency: pip install -e '.[dev]'")

RECORD = r"""
import base64, json, comm
from comm.base_comm import BaseComm
class Recorded(BaseComm):
    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        content = {"comm_id": self.comm_id, "data": data or {}}
        if msg_type == "comm_open":
            content["target_name"] = self.target_name
        print(json.dumps({"msg_type": msg_type, "content": content, "metadata": metadata or {},
            "buffers": [base64.b64encode(bytes(b)).decode() for b in buffers or []]}))
comm.create_comm = lambda **kw: Recorded(**kw)
from ipywidgets.widgets import widget
widget.comm.create_comm = comm.create_comm
import matplotlib
matplotlib.use("module://ipympl.backend_nbagg")
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([1, 3, 2])
fig.canvas._repr_mimebundle_()
canvas, toolbar = fig.canvas, fig.canvas.toolbar
def event(kind, **fields):
    canvas._handle_message(None, {"type": kind, **fields}, [])
event("initialized"); event("refresh"); event("send_image_mode"); event("draw")
event("resize", width=300, height=200); event("draw")
event("toolbar_button", name="zoom")
pointer = {"button": 0, "buttons": 1, "modifiers": [], "guiEvent": {}}
for kind, x, y in (("button_press", 80, 60), ("motion_notify", 150, 120)):
    event(kind, x=x, y=y, **pointer)
event("button_release", x=150, y=120, **pointer)
event("draw")
toolbar.save_figure()
"""


@pytest.fixture(scope="module")
def traffic() -> list[CommFrame]:
    """What a real ipympl figure sends, from its making to a zoom and a download."""
    done = subprocess.run(
        [sys.executable, "-c", RECORD], capture_output=True, text=True, check=True, timeout=120
    )
    return [CommFrame(t="comm", **json.loads(line)) for line in done.stdout.splitlines()]


def relay(policy: WidgetPolicy, frames: list[CommFrame]) -> list[Relayed | str]:
    return [policy.outgoing(frame) for frame in frames]


def custom(frame: CommFrame | Relayed) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(frame.content["data"]["content"]["data"])
    return message


def kind(frame: CommFrame) -> str | None:
    """The type of a canvas's message to the page, or None for other messages."""
    if frame.content["data"].get("method") != "custom":
        return None
    return str(custom(frame)["type"])


def click_download(policy: WidgetPolicy, traffic: list[CommFrame]) -> None:
    (toolbar,) = [
        f.content["comm_id"]
        for f in traffic
        if f.msg_type == "comm_open" and f.content["data"]["state"]["_model_name"] == "ToolbarModel"
    ]
    data = {"method": "custom", "content": {"type": "toolbar_button", "name": "save_figure"}}
    assert policy.incoming("comm_msg", {"content": {"comm_id": toolbar, "data": data}})


def relayed_of(results: list[Relayed | str]) -> list[Relayed]:
    return [r for r in results if isinstance(r, Relayed)]


def test_a_real_figure_is_relayed_whole(traffic: list[CommFrame]) -> None:
    """Every message of a real figure (its models, frames, resize, zoom, and the download the
    toolbar's button asked for) passes; only 'refresh', which the page ignores, stays behind."""
    policy = WidgetPolicy()
    (save,) = [i for i, f in enumerate(traffic) if kind(f) == "save"]
    results = relay(policy, traffic[:save])
    click_download(policy, traffic)  # (the person's click, which the download answers)
    results += relay(policy, traffic[save:])
    refused = [r for r in results if isinstance(r, str) and r]
    assert refused == []
    quiet = [f for f, r in zip(traffic, results, strict=True) if r == ""]
    assert {kind(f) for f in quiet} <= {"refresh"}
    relayed = relayed_of(results)
    models = {
        r.content["data"]["state"]["_model_name"] for r in relayed if r.msg_type == "comm_open"
    }
    assert {"MPLCanvasModel", "ToolbarModel"} <= models
    frames = [r for r in relayed if r.buffers and custom(r)["type"] == "binary"]
    assert len(frames) >= 3
    assert all(bytes(r.buffers[0][:8]) == b"\x89PNG\r\n\x1a\n" for r in frames)
    saved = results[save]
    assert isinstance(saved, Relayed)
    assert custom(saved)["type"] == "save"
    urls = [
        r.content["data"]["state"]["_data_url"]
        for r in relayed
        if r.content["data"].get("state", {}).get("_data_url")
    ]
    # (ipympl's bare base64 is given its data: prefix: the page would fetch it as a path)
    assert urls
    assert all(url.startswith("data:image/png;base64,") for url in urls)


def opened_figure(traffic: list[CommFrame]) -> tuple[WidgetPolicy, dict[str, str]]:
    """A policy that relayed a real figure's models; their comm ids by model name."""
    policy = WidgetPolicy()
    ids: dict[str, str] = {}
    for frame in traffic:
        if frame.msg_type == "comm_open":
            assert isinstance(policy.outgoing(frame), Relayed)
            ids[frame.content["data"]["state"]["_model_name"]] = frame.content["comm_id"]
    return policy, ids


def with_state(frame: CommFrame, **state: Any) -> CommFrame:
    data = {**frame.content["data"], "state": {**frame.content["data"]["state"], **state}}
    return frame.model_copy(update={"content": {**frame.content, "data": data}})


def update(comm_id: str, **state: Any) -> CommFrame:
    data = {"method": "update", "state": state, "buffer_paths": []}
    return CommFrame(t="comm", msg_type="comm_msg", content={"comm_id": comm_id, "data": data})


def message(comm_id: str, body: object, buffers: tuple[bytes, ...] = ()) -> CommFrame:
    data = {"method": "custom", "content": {"data": json.dumps(body)}}
    encoded = [base64.b64encode(b).decode() for b in buffers]
    content = {"comm_id": comm_id, "data": data}
    return CommFrame(t="comm", msg_type="comm_msg", content=content, buffers=encoded)


HOSTILE_TRAITS = [
    ("MPLCanvasModel", "_data_url", "/api/contents?rewyn-pwned=data_url"),
    ("MPLCanvasModel", "_data_url", "https://e.example/figure.png"),
    ("MPLCanvasModel", "_data_url", "data:text/html;base64,PHNjcmlwdD4="),
    ("MPLCanvasModel", "_data_url", "data:image/svg+xml;base64,PHN2Zz4="),
    ("MPLCanvasModel", "_cursor", "url(/api/contents?rewyn-pwned=cursor), auto"),
    ("MPLCanvasModel", "toolbar_position", "left; background:url(/x)"),
    ("MPLCanvasModel", "toolbar_visible", "<b>"),
    ("MPLCanvasModel", "_image_mode", "html"),
    ("MPLCanvasModel", "_size", ["1", "2"]),
    ("MPLCanvasModel", "header_visible", "yes"),
    ("MPLCanvasModel", "pan_zoom_throttle", float("nan")),
    ("MPLCanvasModel", "layout", "IPY_MODEL_not-relayed"),
    ("MPLCanvasModel", "toolbar", "https://e.example/"),
    ("MPLCanvasModel", "_figure_label", {"html": "<script>"}),
    ("MPLCanvasModel", "_view_name", "HTMLView"),
    ("ToolbarModel", "toolitems", [["Home", "tip", "home jp-Notebook", "home"]]),
    ("ToolbarModel", "toolitems", [["Home", "tip", "home", "home()"]]),
    ("ToolbarModel", "toolitems", [["Home", "tip", "home"]]),
    ("ToolbarModel", "button_style", "mod-danger"),
    ("ToolbarModel", "_model_module", "anywidget"),
]


@pytest.mark.parametrize(("model", "key", "value"), HOSTILE_TRAITS)
def test_a_trait_of_the_wrong_kind_refuses_the_figure(
    traffic: list[CommFrame], model: str, key: str, value: Any
) -> None:
    """A figure opened with a hostile trait is not opened; the same trait in an update is not
    relayed. Each refusal says why."""
    policy, ids = opened_figure(traffic)
    (frame,) = [
        f
        for f in traffic
        if f.msg_type == "comm_open" and f.content["data"]["state"]["_model_name"] == model
    ]
    refused = WidgetPolicy().outgoing(with_state(frame, **{key: value}))
    assert isinstance(refused, str)
    assert refused
    said = policy.outgoing(update(ids[model], **{key: value}))
    assert isinstance(said, str)
    assert "matplotlib" in said, said


def test_a_trait_ipympl_does_not_have_is_left_out(traffic: list[CommFrame]) -> None:
    policy, ids = opened_figure(traffic)
    hostile = {"_esm": "export default {render() {}}", "value": "<img src=x onerror=alert(1)>"}
    relayed = policy.outgoing(update(ids["MPLCanvasModel"], _message="x = 1", **hostile))
    assert isinstance(relayed, Relayed)
    assert relayed.content["data"]["state"] == {"_message": "x = 1"}


@pytest.mark.parametrize(
    ("body", "buffers", "said"),
    [
        ({"type": "eval", "code": "alert(1)"}, [], "'eval' message"),
        ({"type": "binary"}, [b"<svg onload=alert(1)>"], "not one PNG"),
        ({"type": "binary"}, [], "not one PNG"),
        ({"type": "resize", "size": ["a", 2], "forward": True}, [], "'size'"),
        ({"type": "rubberband", "x0": 1, "y0": 1, "x1": 1}, [], "'y1'"),
        ({"type": "navigate_mode", "mode": "<b>"}, [], "'mode'"),
        ({"type": "draw"}, [b"\x89PNG\r\n\x1a\n"], "with buffers"),
        ({"type": "save", "format": "png"}, [b"\x89PNG\r\n\x1a\n"], "not asked for"),
        ("not an object", [], "not one"),
    ],
)
def test_a_canvas_message_the_page_should_not_act_on_is_refused(
    traffic: list[CommFrame], body: object, buffers: list[bytes], said: str
) -> None:
    policy, ids = opened_figure(traffic)
    refused = policy.outgoing(message(ids["MPLCanvasModel"], body, tuple(buffers)))
    assert isinstance(refused, str)
    assert said in refused, refused


def test_a_canvas_message_carries_its_fields_only(traffic: list[CommFrame]) -> None:
    policy, ids = opened_figure(traffic)
    body = {"type": "resize", "size": [300, 200], "forward": False, "html": "<script>"}
    relayed = policy.outgoing(message(ids["MPLCanvasModel"], body))
    assert isinstance(relayed, Relayed)
    assert custom(relayed) == {"type": "resize", "size": [300, 200], "forward": False}


def test_one_click_on_download_lets_one_download_through(traffic: list[CommFrame]) -> None:
    """The page downloads what a ``save`` message carries, as a file: only in answer to the
    person's click on the toolbar's button, once per click, in a figure's format."""
    policy, ids = opened_figure(traffic)
    png = (b"\x89PNG\r\n\x1a\n",)
    save = {"type": "save", "format": "png"}
    click_download(policy, traffic)
    html = policy.outgoing(message(ids["MPLCanvasModel"], {"type": "save", "format": "html"}, png))
    assert isinstance(html, str)
    assert "'format'" in html
    assert isinstance(policy.outgoing(message(ids["MPLCanvasModel"], save, png)), Relayed)
    again = policy.outgoing(message(ids["MPLCanvasModel"], save, png))
    assert isinstance(again, str)
    assert "not asked for" in again


def test_a_reloaded_pages_states_are_checked_as_the_models_own(
    traffic: list[CommFrame],
) -> None:
    """The control comm's ``update_states``, which a (re)loading page makes models of, or sets
    an open model's state with, as it is: checked as each model's own messages are, and only
    for models relayed (ipywidgets' HTML sanitised, a figure's URL refused)."""
    policy, ids = opened_figure(traffic)
    html = CommFrame(
        t="comm",
        msg_type="comm_open",
        content={
            "comm_id": "h" * 32,
            "target_name": "jupyter.widget",
            "data": {
                "state": {
                    "_model_module": "@jupyter-widgets/controls",
                    "_model_name": "HTMLModel",
                    "_view_module": "@jupyter-widgets/controls",
                    "value": "<b>kept</b>",
                },
                "buffer_paths": [],
            },
        },
    )
    assert isinstance(policy.outgoing(html), Relayed)
    control = {"comm_id": "c" * 32, "target_name": "jupyter.widget.control", "data": {}}
    assert policy.incoming("comm_open", {"content": control})

    def entry(name: str, module: str, **state: Any) -> dict[str, Any]:
        return {
            "model_name": name,
            "model_module": module,
            "model_module_version": "*",
            "state": state,
        }

    states = {
        "h" * 32: entry(
            "HTMLModel", "@jupyter-widgets/controls", value="<img src=x onerror=alert(1)>kept"
        ),
        ids["MPLCanvasModel"]: entry(
            "MPLCanvasModel", "jupyter-matplotlib", _data_url="/api/contents?rewyn-pwned=x"
        ),
        "e" * 32: entry("HTMLModel", "@jupyter-widgets/controls", value="<script>x</script>"),
        ids["ToolbarModel"]: entry("HTMLModel", "@jupyter-widgets/controls", value="<script>"),
    }
    data = {"method": "update_states", "states": states, "buffer_paths": [["e" * 32, "value"]]}
    reply = CommFrame(
        t="comm",
        msg_type="comm_msg",
        content={"comm_id": "c" * 32, "data": data},
        buffers=[base64.b64encode(b"<script>").decode()],
    )
    relayed = policy.outgoing(reply)
    assert isinstance(relayed, Relayed)
    kept = relayed.content["data"]["states"]
    assert set(kept) == {"h" * 32}  # (not a model never relayed, nor one of another kind)
    assert "onerror" not in kept["h" * 32]["state"]["value"]
    assert "kept" in kept["h" * 32]["state"]["value"]
    assert relayed.buffers == []
    assert relayed.content["data"]["buffer_paths"] == []


@pytest.mark.parametrize(
    ("module", "state", "said"),
    [
        ("anywidget", {"_anywidget_id": "quak.Widget", "_esm": "alert(1)"}, "(quak.Widget)"),
        ("anywidget", {"_esm": "alert(1)"}, "JavaScript (_esm)"),
        ("bqplot", {}, "a bqplot figure"),
        ("jupyter-leaflet", {}, "ipyleaflet"),
        ("evil-widgets", {}, "'evil-widgets'"),
    ],
)
def test_the_widget_libraries_refused_are_named_with_why(
    module: str, state: dict[str, Any], said: str
) -> None:
    full = {"_model_module": module, "_view_module": module, "_model_name": "M", **state}
    frame = CommFrame(
        t="comm",
        msg_type="comm_open",
        content={"comm_id": "a" * 32, "target_name": "jupyter.widget", "data": {"state": full}},
    )
    refused = WidgetPolicy().outgoing(frame)
    assert isinstance(refused, str)
    assert said in refused, refused


# -- a real kernel: the page's side played by the test --------------------------------------


@pytest.fixture(scope="module")
def kc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BlockingKernelClient]:
    """The default kernel (bubblewrap), with ipympl in the sandbox's Python."""
    root = tmp_path_factory.mktemp("figures")
    write_spec(root, "rewyn-figures")
    folder = root / "notebook"
    folder.mkdir()
    os.chown(folder, 1000, 1000)  # (a person's notebook folder)
    with running_kernel(root, "rewyn-figures", cwd=folder) as (_, client):
        yield client


FIGURE_CELL = "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 3, 2])\n"


def figure_ids(cell: Cell) -> dict[str, str]:
    return {
        state["_model_name"]: comm_id
        for comm_id, state in opened(cell).items()
        if state["_model_module"] == "jupyter-matplotlib"
    }


def event(kc: BlockingKernelClient, comm_id: str, **content: Any) -> list[dict[str, Any]]:
    """Send what ipympl's page sends for a canvas's event; return what the kernel sent back."""
    data = {"method": "custom", "content": content}
    return send(kc, "comm_msg", {"comm_id": comm_id, "data": data})


def sent_to_page(replies: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(type, bytes of its buffer) of each canvas message in ``replies``."""
    found = []
    for reply in replies:
        data = reply["content"].get("data", {})
        if reply["msg_type"] == "comm_msg" and data.get("method") == "custom":
            sizes = [len(buffer) for buffer in reply.get("buffers", [])]
            found.append((json.loads(data["content"]["data"])["type"], sum(sizes)))
    return found


def test_a_widget_figure_opens_in_the_page_and_answers_its_events(
    kc: BlockingKernelClient,
) -> None:
    """``%matplotlib widget``: ipympl's models reach the page, and the page's events (ready,
    draw, resize, a zoom with the toolbar) run matplotlib in the sandbox, which sends frames
    back: the figure redraws at the new size, and the zoom changes the axes."""
    assert run_cell(kc, "%matplotlib widget").status == "ok"
    cell = run_cell(kc, FIGURE_CELL, timeout=120)
    assert cell.status == "ok", cell.reply
    assert notes(cell) == []
    ids = figure_ids(cell)
    assert set(ids) == {"MPLCanvasModel", "ToolbarModel"}
    shown = [m["content"]["data"] for m in cell.of_type("display_data")]
    views = [data[WIDGET_VIEW]["model_id"] for data in shown if WIDGET_VIEW in data]
    assert views == [ids["MPLCanvasModel"]]
    canvas = ids["MPLCanvasModel"]

    ready = sent_to_page(event(kc, canvas, type="initialized"))
    assert ("resize", 0) in ready, ready
    drawn = sent_to_page(event(kc, canvas, type="draw"))
    assert [kind for kind, size in drawn if size > 1000] == ["binary"], drawn
    resized = event(kc, canvas, type="resize", width=320, height=240)
    sizes = [
        json.loads(r["content"]["data"]["content"]["data"])
        for r in resized
        if ("resize", 0) in sent_to_page([r])
    ]
    assert sizes, resized
    assert sizes[-1]["size"] == [320, 240], sizes
    redrawn = sent_to_page(event(kc, canvas, type="draw"))
    assert [kind for kind, size in redrawn if size > 1000] == ["binary"], redrawn

    before = run_cell(kc, "print(ax.get_xlim())").stream()
    assert event(kc, ids["ToolbarModel"], type="toolbar_button", name="zoom") is not None
    pointer = {"button": 0, "buttons": 1, "modifiers": [], "guiEvent": {}}
    for kind, x, y in (("button_press", 90, 60), ("motion_notify", 200, 150)):
        event(kc, canvas, type=kind, x=x, y=y, **pointer)
    released = sent_to_page(event(kc, canvas, type="button_release", x=200, y=150, **pointer))
    assert ("history_buttons", 0) in released or ("draw", 0) in released, released
    after = run_cell(kc, "print(ax.get_xlim())").stream()
    assert after != before, (before, after)


def test_the_notebook_backend_is_ipympls_here_with_a_note(kc: BlockingKernelClient) -> None:
    """``%matplotlib notebook`` (nbagg) draws through a JavaScript output, which the filter
    refuses: ipympl's widget backend stands in, and the cell says so once."""
    chosen = run_cell(kc, "%matplotlib notebook")
    assert chosen.status == "ok", chosen.reply
    (note,) = notes(chosen)
    assert "ipympl" in note, note
    assert "'notebook'" in note, note
    cell = run_cell(kc, FIGURE_CELL, timeout=120)
    assert set(figure_ids(cell)) == {"MPLCanvasModel", "ToolbarModel"}
    assert [m for m in cell.messages if "javascript" in json.dumps(m["content"]).lower()] == []
    assert notes(cell) == []


def test_a_figure_the_code_makes_hostile_is_refused_with_a_note(
    kc: BlockingKernelClient,
) -> None:
    """Code that sets a figure's traits to what would fetch (a cursor image, an image URL) or
    sends the page a download it did not ask for: not relayed, said once."""
    run_cell(kc, "%matplotlib widget")
    cell = run_cell(
        kc,
        FIGURE_CELL
        + "fig.canvas._cursor = 'url(/api/contents?rewyn-pwned=cursor), auto'\n"
        + "fig.canvas._data_url = '/api/contents?rewyn-pwned=data_url'\n"
        + "fig.canvas.download()\n",
        timeout=120,
    )
    assert cell.status == "ok", cell.reply
    assert "rewyn-pwned" not in json.dumps(
        [m["content"] for m in cell.messages if m["msg_type"].startswith("comm")]
    )
    said = "\n".join(notes(cell))
    for why in ("'_cursor'", "'_data_url'", "not asked for"):
        assert why in said, said
