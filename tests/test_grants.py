"""Network granted from the page (rewyn_kernel/kernel/grants.py): the page's comm, answered on
the kernel's host side; the proxy taking the grant live; the grant kept for the notebook's next
kernels; nothing in the sandbox able to grant one.

A real kernel (jupyter_client) on the default provider, its proxy reaching local servers by
names the proxy's test-only map sends to loopback (tests/egress_servers.py).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from rewyn_kernel.cli import main as cli_main
from rewyn_kernel.kernel.grants import TARGET, preset_for
from rewyn_kernel.notebooks.review import convert
from rewyn_kernel.runtime.egress import proxy
from rewyn_kernel.runtime.events import EVENT_TYPE, GRANT_TYPE, JsonlRunLog
from tests.egress_servers import FETCH, TEST_HOSTS, Servers, local_servers
from tests.kernel_client import run_cell, running_kernel, write_spec


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Servers]:
    monkeypatch.setenv(proxy.TEST_HOSTS, TEST_HOSTS)
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    with local_servers() as found:
        yield found


@pytest.fixture
def notebook_dir() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="rewyn-grants-nb-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def ask(kc: BlockingKernelClient, data: dict[str, Any]) -> dict[str, Any]:
    """Open the grants' comm as the page does, with ``data``; the kernel's answer on it."""
    comm_id = uuid.uuid4().hex
    content = {"comm_id": comm_id, "target_name": TARGET, "data": data}
    request = kc.session.msg("comm_open", content)
    kc.shell_channel.send(request)
    while True:
        msg = kc.get_iopub_msg(timeout=30)
        if msg["msg_type"] == "comm_msg" and msg["content"]["comm_id"] == comm_id:
            kc.shell_channel.send(kc.session.msg("comm_close", {"comm_id": comm_id, "data": {}}))
            answer: dict[str, Any] = msg["content"]["data"]
            return answer


def record_of(cell: Any) -> dict[str, Any]:
    record: dict[str, Any] = cell.reply["metadata"]["rewyn_kernel"]["record"]
    return record


def test_a_refused_host_is_granted_live_kept_for_the_next_kernel_and_revoked(
    servers: Servers, tmp_path: Path, notebook_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The proxy refuses index.test; the record offers it; the page's grant reaches the
    running kernel (the next fetch answers, the state kept), is in the next cell's record and
    the run log (NETWORK_GRANTED, which the review reads), is kept for the notebook's next
    kernel, and ``grants revoke`` takes it away."""
    http = servers.http_port
    entry = f"index.test:{http}"
    write_spec(tmp_path, "rewyn-grants", [f"--SandboxKernel.network=127.0.0.1:{http}"])
    url = f"http://{entry}/simple/"
    with running_kernel(tmp_path, "rewyn-grants", cwd=notebook_dir) as (km, kc):
        assert run_cell(kc, "kept = 41").status == "ok"
        refused = run_cell(kc, FETCH + f"print(fetch({url!r}))")
        assert refused.stream() == "403\n"
        assert record_of(refused)["offers"] == [{"grant": entry, "hosts": [entry], "title": entry}]
        assert "with the button in the cell's status line" in refused.stream("stderr")

        answer = ask(kc, {"action": "grant", "grant": entry, "hosts": [entry]})
        assert answer["ok"] is True, answer
        assert answer["live"] is True

        again = run_cell(kc, f"print(fetch({url!r}), kept + 1)")
        assert again.stream() == "200 42\n"
        assert record_of(again)["grants"] == [entry]
        assert entry in record_of(again)["spec"]["network"]["allow"]

        listing = ask(kc, {"action": "list"})
        assert [grant["name"] for grant in listing["grants"]] == [entry]
        key = listing["notebook"]

        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=60)
        restarted = run_cell(kc, FETCH + f"print(fetch({url!r}))")
        assert restarted.stream() == "200\n"

    log = tmp_path / "data" / "rewyn-kernel" / "runs" / f"{key}.events.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    (granted,) = [line for line in lines if line["type"] == GRANT_TYPE]
    assert (granted["grant"], granted["hosts"], granted["live"]) == (entry, [entry], True)
    assert granted["notebook"] == key
    assert len(JsonlRunLog.read(log)) == sum(line["type"] == EVENT_TYPE for line in lines)
    capsys.readouterr()
    assert convert(log, tmp_path / "review.ipynb") == 0
    said = capsys.readouterr().out
    assert f"the person allowed {entry} ({entry}) for {key}, live" in said
    review = json.loads((tmp_path / "review.ipynb").read_text())["metadata"]
    assert [g["grant"] for g in review["rewyn_kernel"]["review"]["grants"]] == [entry]

    assert cli_main(["grants", "revoke", key, entry]) == 0
    with running_kernel(tmp_path, "rewyn-grants", cwd=notebook_dir) as (_, kc):
        assert run_cell(kc, FETCH + f"print(fetch({url!r}))").stream() == "403\n"


def test_the_kernel_grants_only_a_host_it_refused_or_a_preset_with_the_hosts_shown(
    servers: Servers, tmp_path: Path, notebook_dir: Path
) -> None:
    """A page (or a forged record in a notebook file) cannot get a grant of a host this kernel
    never refused, nor of other hosts than the button showed; a preset is granted."""
    http = servers.http_port
    write_spec(tmp_path, "rewyn-grants", [f"--SandboxKernel.network=127.0.0.1:{http}"])
    with running_kernel(tmp_path, "rewyn-grants", cwd=notebook_dir) as (_, kc):
        never = ask(kc, {"action": "grant", "grant": "evil.test", "hosts": ["evil.test"]})
        assert never["ok"] is False
        assert "was not refused in this kernel" in never["text"]
        shown = ask(kc, {"action": "grant", "grant": "pypi", "hosts": ["pypi.org"]})
        assert shown["ok"] is False
        assert ask(kc, {"action": "list"})["grants"] == []
        pypi = ask(
            kc,
            {"action": "grant", "grant": "pypi", "hosts": ["pypi.org", "files.pythonhosted.org"]},
        )
        assert pypi["ok"] is True, pypi
        names = [grant["name"] for grant in ask(kc, {"action": "list"})["grants"]]
        assert names == ["pypi"]


def test_the_grants_comm_never_reaches_the_sandbox_and_the_sandbox_cannot_grant(
    servers: Servers, tmp_path: Path, notebook_dir: Path
) -> None:
    """The sandbox's code registers the grants' target and opens a comm of it towards the page
    asking for a grant: the page's messages never reach its target, its comm is never relayed,
    and nothing is granted."""
    http = servers.http_port
    entry = f"index.test:{http}"
    url = f"http://{entry}/"
    write_spec(tmp_path, "rewyn-grants", [f"--SandboxKernel.network=127.0.0.1:{http}"])
    with running_kernel(tmp_path, "rewyn-grants", cwd=notebook_dir) as (_, kc):
        setup = run_cell(
            kc,
            FETCH
            + "from comm import get_comm_manager, create_comm\n"
            + "hits = []\n"
            + f"get_comm_manager().register_target({TARGET!r}, lambda c, m: hits.append(m))\n"
            + f"print(fetch({url!r}))\n"
            + f"c = create_comm(target_name={TARGET!r}, "
            + f"data={{'action': 'grant', 'grant': {entry!r}, 'hosts': [{entry!r}]}})\n",
        )
        assert setup.stream() == "403\n"
        assert not setup.of_type("comm_open")
        answer = ask(kc, {"action": "list"})
        assert answer["grants"] == []
        check = run_cell(kc, f"print(len(hits), fetch({url!r}))")
        assert check.stream() == "0 403\n"
    assert not list((tmp_path / "data" / "rewyn-kernel" / "grants").glob("*.json"))


def test_presets_cover_their_hosts() -> None:
    assert preset_for("files.pythonhosted.org") == "pypi"
    assert preset_for("pypi.org") == "pypi"
    assert preset_for("objects.githubusercontent.com") == "github"
    assert preset_for("example.org") is None
    assert preset_for("pypi.org:8080") is None


def test_without_network_a_grant_waits_for_the_next_kernel_and_says_so(
    servers: Servers, tmp_path: Path, notebook_dir: Path
) -> None:
    """``network="none"``: no proxy to take a grant live; the answer says a restart is needed
    and loses the state; the next kernel of the notebook has an allow-list of the grant (and
    refuses the rest)."""
    write_spec(tmp_path, "rewyn-grants", [])
    pypi = ["pypi.org", "files.pythonhosted.org"]
    proxied = "import os; print(bool(os.environ.get('HTTPS_PROXY')))"
    with running_kernel(tmp_path, "rewyn-grants", cwd=notebook_dir) as (km, kc):
        assert ask(kc, {"action": "list"})["network"] == "none"
        answer = ask(kc, {"action": "grant", "grant": "pypi", "hosts": pypi})
        assert answer["ok"] is True, answer
        assert answer["live"] is False
        assert "restart" in answer["text"]
        assert "loses the variables" in answer["text"]
        assert run_cell(kc, proxied).stream() == "False\n"
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=60)
        assert run_cell(kc, proxied).stream() == "True\n"
        cell = run_cell(kc, FETCH + f"print(fetch('http://index.test:{servers.http_port}/'))")
        assert cell.stream() == "403\n"
        assert record_of(cell)["spec"]["network"]["allow"] == pypi


def test_an_install_is_offered_its_index_on_a_kernel_without_network(
    tmp_path: Path, notebook_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a kernel with no network the proxy refuses nothing, so no host is offered: a cell
    that installs (read on the host, from the person's request) is offered its index's
    preset, which the kernel then grants; a cell that installs nothing is offered none."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    write_spec(tmp_path, "rewyn-grants", [])
    pypi = {"grant": "pypi", "hosts": ["pypi.org", "files.pythonhosted.org"]}
    with running_kernel(tmp_path, "rewyn-grants", cwd=notebook_dir) as (_, kc):
        cell = run_cell(kc, "%pip install --no-index tinypkg-that-is-not-there")
        offers = record_of(cell).get("offers", [])
        assert [{k: o[k] for k in ("grant", "hosts")} for o in offers] == [pypi]
        conda = run_cell(kc, "!conda install -y nothing-here")
        assert [o["grant"] for o in record_of(conda).get("offers", [])] == ["conda-forge"]
        plain = run_cell(kc, "x = 'pip install is only text here'")
        assert "offers" not in record_of(plain)
        answer = ask(kc, {"action": "grant", **pypi})
        assert answer["ok"] is True, answer


def test_the_cli_lists_and_revokes_a_notebooks_grants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rewyn-kernel grants``: a notebook named by its path finds the file its kernel keeps
    (the server names the notebook in JPY_SESSION_NAME); list, revoke one, revoke all."""
    from rewyn_kernel.grants_command import notebook_key_of
    from rewyn_kernel.kernel.grants import GrantStore, grants_path
    from rewyn_kernel.settings import notebook_key

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    notebook = tmp_path / "analysis.ipynb"
    monkeypatch.setenv("JPY_SESSION_NAME", str(notebook))
    key = notebook_key()
    monkeypatch.delenv("JPY_SESSION_NAME")
    assert notebook_key_of(str(notebook)) == key
    store = GrantStore(grants_path(key))
    store.add("pypi", ("pypi.org", "files.pythonhosted.org"))
    store.add("index.test:8080", ("index.test:8080",))
    assert cli_main(["grants", "list"]) == 0
    listed = capsys.readouterr().out
    assert f"{key}:\n  pypi: pypi.org, files.pythonhosted.org" in listed
    assert "  index.test:8080: index.test:8080" in listed
    assert cli_main(["grants", "revoke", str(notebook), "files.pythonhosted.org"]) == 0
    assert [grant.name for grant in store.read()] == ["index.test:8080"]
    assert cli_main(["grants", "revoke", key, "pypi"]) == 2
    assert cli_main(["grants", "revoke", key, "--all"]) == 0
    assert store.read() == []
    assert cli_main(["grants", "list", key]) == 0
    assert capsys.readouterr().out.endswith(f"{key}: no network grants\n")


def test_a_running_sessions_proxy_takes_added_hosts_and_keeps_its_state(
    servers: Servers,
) -> None:
    """``Sandbox.allow_hosts``: the session's proxy decides its next connections by the longer
    list (its worker is not restarted: a variable stays); a sandbox without an allow-list has
    no proxy to take them (None)."""
    from rewyn_kernel.runtime import create

    http = servers.http_port
    entry = f"index.test:{http}"
    url = f"http://{entry}/"
    with create(network=[f"127.0.0.1:{http}"]) as box:
        session = box.session()
        first = session.execute(FETCH + f"kept = 41\nprint(fetch({url!r}))")
        assert first.stdout == "403\n", first.stderr
        policy = box.allow_hosts((entry,))
        assert policy is not None
        assert entry in policy.allow
        assert box.spec.allow_list == policy
        again = session.execute(f"print(fetch({url!r}), kept + 1)")
        assert again.stdout == "200 42\n", again.stderr
    with create() as box:
        assert box.allow_hosts((entry,)) is None
        assert box.spec.network == "none"
