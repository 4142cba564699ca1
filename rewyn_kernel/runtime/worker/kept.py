"""Installs the kernel keeps for the notebook, as the code's process sets pip up for them.

The kernel copies the notebook's packages into the user's site-packages under the sandbox's
HOME (``~/.local``; see kernel/packages.py) and sets ``REWYN_PACKAGES=keep``. Here pip is told
to install there, and the code imports from there after the environment's own site-packages.

Which way pip is told depends on the interpreter:

- outside a virtual environment (a container image's ``python3``) pip's own ``--user``
  (``PIP_USER``): ``pip install``, ``uninstall``, ``list``, upgrades and console scripts
  (``~/.local/bin``) behave as on a desktop;
- in a virtual environment (the kernel's own, which the local providers run) ``--user`` is
  refused, so ``--prefix ~/.local`` (``PIP_PREFIX``), and ``PYTHONPATH`` names the folder so
  that pip's process sees what is installed there ("Requirement already satisfied", ``pip
  list``). pip does not remove what lies outside the environment: an upgrade would leave the
  old version's files, and ``pip uninstall`` refuses. So after an install the older versions
  are removed here (``tidy``), and ``%pip uninstall`` of a kept package is done here.

``PYTHONPATH`` reaches the processes the code starts (``!python``, pip), where the folder comes
first; the code's own process put its path together before (``child.set_path``), with the
folder last. The worker itself starts isolated (``-I``) and reads neither.
"""

from __future__ import annotations

import os
import re
import shutil
import site
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, FrozenSet, List, Tuple

ENV_NAME = "REWYN_PACKAGES"
"""Set (to ``keep``) in a sandbox whose installs a kernel keeps (``KernelSettings.for_kernel``)."""
_NAME = re.compile(r"[-_.]+")


def wanted() -> bool:
    """Whether the kernel keeps this sandbox's installs."""
    return os.environ.get(ENV_NAME) == "keep"


def in_venv() -> bool:
    return sys.prefix != getattr(sys, "base_prefix", sys.prefix)


def configure(user_site: str) -> None:
    """Point pip at ``user_site`` (made already), as the module docstring says."""
    scripts = os.path.join(site.getuserbase(), "bin")  # (console scripts: after the rest)
    path = os.environ.get("PATH", "").split(os.pathsep)
    if scripts not in path:
        os.environ["PATH"] = os.pathsep.join([*path, scripts])
    if not in_venv():
        os.environ.setdefault("PIP_USER", "1")
        return
    os.environ.setdefault("PIP_PREFIX", site.getuserbase())
    known = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if user_site not in known:
        os.environ["PYTHONPATH"] = os.pathsep.join([*known, user_site])


def _normal(name: str) -> str:
    return _NAME.sub("-", name).lower()


def distributions(user_site: str) -> Dict[str, List[Tuple[float, str]]]:
    """The kept distributions by normalised name: (when installed, dist-info folder)."""
    found = {}  # type: Dict[str, List[Tuple[float, str]]]
    try:
        names = os.listdir(user_site)
    except OSError:
        return found
    for entry in names:
        if not entry.endswith(".dist-info"):
            continue
        folder = os.path.join(user_site, entry)
        name = entry[: -len(".dist-info")].rsplit("-", 1)[0]
        try:
            with open(os.path.join(folder, "METADATA"), errors="replace") as handle:
                for line in handle:
                    if line.startswith("Name:"):
                        name = line.split(":", 1)[1].strip()
                        break
            when = os.stat(os.path.join(folder, "RECORD")).st_mtime
        except OSError:
            continue
        found.setdefault(_normal(name), []).append((when, folder))
    return found


def _recorded(folder: str, user_site: str) -> List[str]:
    """The files a dist-info's RECORD lists, those under the user base only."""
    base = os.path.dirname(os.path.dirname(os.path.dirname(user_site)))
    paths = []  # type: List[str]
    try:
        with open(os.path.join(folder, "RECORD"), errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return paths
    for line in lines:
        relative = line.rsplit(",", 2)[0] if line.count(",") >= 2 else line
        path = os.path.normpath(os.path.join(user_site, relative))
        if relative and path.startswith(base + os.sep):
            paths.append(path)
    return paths


def remove(folder: str, user_site: str, keep: FrozenSet[str] = frozenset()) -> None:
    """Remove the distribution of dist-info ``folder``: its files (but those in ``keep``),
    the folder, and the folders its files leave empty."""
    emptied = set()
    for path in _recorded(folder, user_site):
        if path in keep or not os.path.lexists(path) or os.path.isdir(path):
            continue
        try:
            os.unlink(path)
        except OSError:
            continue
        emptied.add(os.path.dirname(path))
        if path.endswith(".py"):  # (its compiled copy, which RECORD does not list)
            cache = os.path.join(os.path.dirname(path), "__pycache__")
            stem = os.path.basename(path)[:-3] + "."
            for name in os.listdir(cache) if os.path.isdir(cache) else ():
                if name.startswith(stem):
                    os.unlink(os.path.join(cache, name))
            emptied.add(cache)
    shutil.rmtree(folder, ignore_errors=True)
    for path in sorted(emptied, key=len, reverse=True):
        _prune(path, user_site)


def _prune(path: str, user_site: str) -> None:
    """Remove ``path`` and its parents inside ``user_site`` while they are empty."""
    while path.startswith(user_site + os.sep):
        try:
            os.rmdir(path)
        except OSError:
            return
        path = os.path.dirname(path)


def tidy(user_site: str) -> str:
    """After an install in a virtual environment: where a distribution has more than one
    version kept (pip left the old one), remove all but the newest; a note that says so, or
    '' (pip's own last line names the old version: it read the old metadata)."""
    if not in_venv():
        return ""
    said = []
    for versions in distributions(user_site).values():
        if len(versions) < 2:
            continue
        versions.sort()
        newest = versions[-1][1]
        keep = frozenset(_recorded(newest, user_site))
        for _when, folder in versions[:-1]:
            remove(folder, user_site, keep)
            said.append("%s (%s)" % (_version(newest), _version(folder)))
    if not said:
        return ""
    return (
        "[rewyn: kept %s, and removed the older version pip left (it does not remove "
        "what is installed outside the environment it runs from)]\n" % ", ".join(said)
    )


def _version(folder: str) -> str:
    """``name version`` of a dist-info folder, from its name."""
    return " ".join(os.path.basename(folder)[: -len(".dist-info")].rsplit("-", 1))


def uninstall(names: List[str], user_site: str) -> str:
    """``pip uninstall`` of kept packages in a virtual environment: what pip would print, or
    '' where a name is not kept here (pip then runs, as it would)."""
    kept = distributions(user_site)
    if not in_venv() or not names or any(_normal(name) not in kept for name in names):
        return ""
    said = []
    for name in names:
        for _when, folder in kept[_normal(name)]:
            version = os.path.basename(folder)[: -len(".dist-info")].rsplit("-", 1)[-1]
            remove(folder, user_site)
            said.append("Successfully uninstalled %s-%s\n" % (name, version))
    return "".join(said)
