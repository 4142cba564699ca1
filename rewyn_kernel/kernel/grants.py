"""Network granted from the page: hosts the person allows a notebook's code to reach.

When the proxy refuses the code a host, the cell's record offers the person a button ("Allow
pypi.org for this notebook"; a preset's title where one covers the host). The page sends the
click to the kernel's host side on the comm target ``TARGET``, which this kernel answers itself:
the message never reaches the sandbox (kernel.py takes it before the widget relay, whose
policy refuses any other target the code names), and nothing in the sandbox can send one (the
code's comm frames only ever go *out*, to the page, through the widget policy). An agent's
token cannot send comms at all (server/channels.py).

The kernel grants only what it offered: a host the proxy refused in this kernel's life, or a
preset, and only with the very hosts the button showed. A forged output or record in a
notebook file can draw a button, not make the kernel honour one for a host it never refused.

A grant takes effect at once where the kernel's network is an allow-list (the proxy takes the
new entries live: ``Sandbox.allow_hosts``; the state is kept). With ``network="none"`` the
sandbox has no proxy, and none can be given to a running one: the grant is kept, and the next
kernel of the notebook starts with an allow-list of it (the reply says a restart is needed and
that the state goes with it). Starting every ``none`` kernel with an empty allow-list instead
would keep the grant live, but ``none`` would no longer be ``none``: the sandbox would get a
loopback port, the proxy variables, and a way to the host's proxy process (its HTTP and SOCKS
parsers), where today it has no network at all, loopback included. With ``network="allow"``
there is nothing to grant.

Grants are kept per notebook on the host (``GrantStore``), never in the notebook file: a
notebook downloaded or shared carries none. ``rewyn-kernel grants`` lists and revokes them.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rewyn_kernel.runtime.events import JsonlRunLog, NetworkGrant, record_grant
from rewyn_kernel.runtime.installs import INSTALL, NEEDS_INDEX
from rewyn_kernel.runtime.network import NetworkPolicy, entry_for, parse_host, parse_rule
from rewyn_kernel.runtime.printable import printable
from rewyn_kernel.runtime.result import NetworkLog
from rewyn_kernel.runtime.sandbox import Sandbox
from rewyn_kernel.settings import KernelSettings, host_data_dir, notebook_key

logger = logging.getLogger(__name__)

TARGET = "rewyn_kernel.grants"
"""The comm target the page opens to ask for, list and revoke grants (answered on the host)."""
PRESETS: dict[str, tuple[str, ...]] = {
    "pypi": ("pypi.org", "files.pythonhosted.org"),
    "conda-forge": ("conda.anaconda.org", "api.anaconda.org"),
    "huggingface": ("huggingface.co", "*.huggingface.co", "*.hf.co"),
    "github": ("github.com", "*.github.com", "*.githubusercontent.com"),
}
"""The common cases, each a name the page and the CLI use and the hosts it grants."""
PRESET_TITLES: dict[str, str] = {
    "pypi": "the Python package index (pypi)",
    "conda-forge": "the conda-forge channel (conda-forge)",
    "huggingface": "the Hugging Face hub (huggingface)",
    "github": "GitHub (github)",
}
MAX_OFFERS = 3
"""Buttons a cell's record offers (the hosts refused first)."""
MAX_REFUSED = 256
"""Hosts remembered as refused in one kernel's life (past it, the oldest are forgotten)."""


class Grant(BaseModel):
    """One grant of a notebook: a preset or a host, and the allow entries it adds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="The preset's name ('pypi'), or the host entry granted.")
    hosts: tuple[str, ...] = Field(min_length=1, description="The allow entries it adds.")
    granted_at: str = Field(description="When the person granted it (ISO 8601, UTC).")


class GrantFile(BaseModel):
    """What ``GrantStore`` keeps in a notebook's file."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    grants: list[Grant] = Field(default_factory=list)


def grants_path(key: str | None = None) -> Path:
    """The file of a notebook's grants (``key``: ``notebook_key()``, this process's notebook)."""
    return host_data_dir("grants") / f"{key or notebook_key()}.json"


def preset_hosts(name: str) -> tuple[str, ...] | None:
    return PRESETS.get(name)


def preset_for(entry: str) -> str | None:
    """The preset whose hosts cover the allow entry ``entry`` (a host, ``host:port``), if any."""
    try:
        rule = parse_rule(entry)
    except ValueError:
        return None
    if rule.network is not None or rule.wildcard:
        return None
    for name, hosts in PRESETS.items():
        for host in hosts:
            preset = parse_rule(host)
            ports = rule.ports or frozenset({443})
            if preset.matches_name(rule.name) and all(preset.matches_port(p) for p in ports):
                return name
    return None


def title_of(name: str) -> str:
    """What the button says it allows: a preset's title, else the host itself."""
    return PRESET_TITLES.get(name, name)


class GrantStore:
    """A notebook's grants on the host: a small JSON file, replaced whole on each change."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[Grant]:
        """The grants, oldest first ([] when there are none, or the file is unreadable: a
        damaged file grants nothing, and is said so in the log)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            logger.warning("the network grants in %s cannot be read: %s", self.path, exc)
            return []
        try:
            return GrantFile.model_validate_json(text).grants
        except ValidationError as exc:
            logger.warning("the network grants in %s are not valid: %s", self.path, exc)
            return []

    def entries(self) -> tuple[str, ...]:
        """Every allow entry granted, each once."""
        return tuple(dict.fromkeys(host for grant in self.read() for host in grant.hosts))

    def add(self, name: str, hosts: Sequence[str]) -> Grant:
        """Keep a grant of ``hosts`` named ``name`` (replacing one of the same name)."""
        grant = Grant(
            name=name,
            hosts=tuple(hosts),
            granted_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        kept = [known for known in self.read() if known.name != name]
        self._write([*kept, grant])
        return grant

    def revoke(self, name: str) -> list[Grant]:
        """Drop the grants named ``name`` or granting the host ``name``; those dropped."""
        grants = self.read()
        dropped = [grant for grant in grants if name in (grant.name, *grant.hosts)]
        if dropped:
            self._write([grant for grant in grants if grant not in dropped])
        return dropped

    def revoke_all(self) -> list[Grant]:
        grants = self.read()
        if grants:
            self._write([])
        return grants

    def _write(self, grants: list[Grant]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not grants:
            self.path.unlink(missing_ok=True)
            return
        text = GrantFile(grants=grants).model_dump_json(indent=1) + "\n"
        fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".grants-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def with_grants(settings: KernelSettings, store: GrantStore | None = None) -> KernelSettings:
    """``settings`` with the notebook's grants added to its network: to its allow-list, or as
    one where the network is ``"none"`` (the person granted them for the next kernel); an
    ``"allow"`` network needs none."""
    store = store or GrantStore(grants_path())
    workspace = settings.spec().workspace
    if workspace is not None and workspace.resolve() in store.path.resolve().parents:
        # (Jupyter's data directory inside the code's own folder: the code could write grants)
        logger.warning(
            "the network grants in %s are ignored: the file is inside the workspace %s, where "
            "the sandbox's code can write",
            store.path,
            workspace,
        )
        return settings
    entries = store.entries()
    network = settings.network
    if not entries or network == "allow":
        return settings
    if isinstance(network, NetworkPolicy):
        added = tuple(entry for entry in entries if entry not in network.allow)
        if not added:
            return settings
        policy = network.model_copy(update={"allow": (*network.allow, *added)})
    else:
        policy = NetworkPolicy(allow=entries)
    return settings.model_copy(update={"network": policy})


class GrantDesk:
    """The kernel's side of grants: what was refused, what is offered, and the page's requests.

    Owned by the kernel; called on its event loop only."""

    def __init__(
        self, sandbox: Sandbox, store: GrantStore, run_log: JsonlRunLog | None = None
    ) -> None:
        self.sandbox = sandbox
        self.store = store
        self.run_log = run_log
        """Where each grant is written (NETWORK_GRANTED), beside the kernel's events."""
        self.refused: dict[str, None] = {}
        """The allow entries of hosts the proxy refused in this kernel's life (in order)."""
        self.granted: list[str] = []
        """Names granted since the last cell's record took them (``take_granted``)."""

    def offers(self, log: NetworkLog | None, code: str = "") -> list[dict[str, Any]]:
        """Note what ``log`` refused; the offers for the cell's record (at most MAX_OFFERS):
        ``{"grant": name, "hosts": [...], "title": ...}``. A cell whose ``code`` (the person's
        request, read on the host) runs an installer is offered its index's preset on a kernel
        with no network: there no host is ever refused (with an allow-list, the proxy's
        refusal of the index is offered as any other), and an install is where a person
        meets that first."""
        found: dict[str, tuple[str, ...]] = {}
        index = installer_preset(code)
        wanted = index is not None and self.sandbox.spec.network == "none"
        if index is not None and wanted and not self._covered(PRESETS[index]):
            found[index] = PRESETS[index]
        for attempt in log.refused if log is not None else ():
            if not (attempt.host and attempt.port):
                continue
            entry = entry_for(attempt.host, attempt.port)
            if entry.startswith("[") or _is_address(entry):
                continue  # (an address is granted by the host's configuration, not a button)
            self._remember(entry)
            name = preset_for(entry) or entry
            hosts = PRESETS.get(name, (entry,))
            if name not in found and not self._covered(hosts):
                found[name] = hosts
        return [
            {"grant": name, "hosts": list(hosts), "title": printable(title_of(name))}
            for name, hosts in list(found.items())[:MAX_OFFERS]
        ]

    def _remember(self, entry: str) -> None:
        self.refused.pop(entry, None)
        self.refused[entry] = None
        while len(self.refused) > MAX_REFUSED:
            self.refused.pop(next(iter(self.refused)))

    def _covered(self, hosts: Sequence[str]) -> bool:
        policy = self.sandbox.spec.allow_list
        return policy is not None and all(host in policy.allow for host in hosts)

    def take_granted(self) -> list[str]:
        granted, self.granted = self.granted, []
        return granted

    def answer(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The reply to one request of the page: ``{"action": "grant", "grant": NAME, "hosts":
        [...]}`` (the hosts the button showed), ``{"action": "list"}`` or ``{"action":
        "revoke", "grant": NAME}``."""
        action = data.get("action")
        if action == "list":
            return self._listing()
        name = data.get("grant")
        if not isinstance(name, str) or not name or len(name) > 300:
            return {"ok": False, "text": "the request names no grant"}
        if action == "revoke":
            dropped = self.store.revoke(name)
            listing = self._listing()
            if not dropped:
                return {**listing, "ok": False, "text": f"no grant of {printable(name)}"}
            return {
                **listing,
                "text": f"revoked {printable(name)} for this notebook: the next kernel of the "
                "notebook goes without it (this one keeps it until it restarts)",
            }
        if action == "grant":
            return self._grant(name, data.get("hosts"))
        return {"ok": False, "text": "an unknown request"}

    def _grant(self, name: str, shown: Any) -> dict[str, Any]:
        hosts = PRESETS.get(name)
        if hosts is None:
            if name not in self.refused:
                return {
                    "ok": False,
                    "text": f"{printable(name)} was not refused in this kernel: only a host the "
                    "code was refused, or a preset, is granted from the page",
                }
            hosts = (name,)
        if not isinstance(shown, list) or list(hosts) != shown:
            return {"ok": False, "text": "the hosts shown are not those this grant allows"}
        if self.sandbox.spec.network == "allow":
            return {"ok": False, "text": "this kernel's network is open already (allow)"}
        grant = self.store.add(name, hosts)
        policy = self.sandbox.allow_hosts(hosts)
        self.granted.append(name)
        if self.run_log is not None:
            record = NetworkGrant(
                granted_at=datetime.now(timezone.utc),
                notebook=self.store.path.stem,
                grant=name,
                hosts=hosts,
                live=policy is not None,
            )
            record_grant(record, [self.run_log])
        what = f"{title_of(name)} ({', '.join(hosts)})" if name in PRESETS else name
        logger.info("the person granted %s to notebook %s", what, self.store.path.stem)
        if policy is None:
            return {
                "ok": True,
                "live": False,
                "grant": grant.model_dump(mode="json"),
                "text": f"allowed {what} for this notebook from its next kernel: this kernel has "
                "no network at all (network none), so restart it to use the grant; a restart "
                "loses the variables and state",
            }
        return {
            "ok": True,
            "live": True,
            "grant": grant.model_dump(mode="json"),
            "text": f"allowed {what} for this notebook: run the cell again (the state is kept)",
        }

    def _listing(self) -> dict[str, Any]:
        """The notebook's grants, and the presets the page may offer (each with its hosts)."""
        return {
            "ok": True,
            "notebook": self.store.path.stem,
            "network": "list" if self.sandbox.spec.allow_list else self.sandbox.spec.network,
            "grants": [grant.model_dump(mode="json") for grant in self.store.read()],
            "presets": [
                {"grant": name, "hosts": list(hosts), "title": PRESET_TITLES[name]}
                for name, hosts in PRESETS.items()
            ],
        }


def installer_preset(code: str) -> str | None:
    """The preset an install in ``code`` needs (``%pip install``, ``!uv pip install``: pypi;
    ``%conda install``: conda-forge), or None where ``code`` installs nothing."""
    found = INSTALL.search(code.replace("%", " ").replace("!", " "))  # (magics, shell lines)
    if found is None:
        return None
    return "conda-forge" if found.group(2) in NEEDS_INDEX else "pypi"


def _is_address(entry: str) -> bool:
    host = entry.rpartition(":")[0] if entry.count(":") == 1 else entry
    try:
        return not isinstance(parse_host(host), str)
    except ValueError:
        return True


def grant_listing(key: str) -> str:
    """``rewyn-kernel grants list``'s text for one notebook's file."""
    grants = GrantStore(grants_path(key)).read()
    if not grants:
        return f"{key}: no network grants\n"
    lines = [f"{key}:"]
    for grant in grants:
        lines.append(f"  {grant.name}: {', '.join(grant.hosts)} (granted {grant.granted_at})")
    return "\n".join(lines) + "\n"


def known_notebooks() -> list[str]:
    """The notebook keys that have grants on this host."""
    folder = host_data_dir("grants")
    if not folder.is_dir():
        return []
    return sorted(path.stem for path in folder.glob("*.json"))


def dump(grants: Sequence[Grant]) -> str:
    return json.dumps([grant.model_dump(mode="json") for grant in grants])
