"""What ``rewyn-kernel doctor`` checks of a container engine: the CLI, the daemon, the image
and the OCI runtime."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence

from rewyn_kernel.runtime.providers.base import CheckItem
from rewyn_kernel.runtime.providers.container.engine import daemonless, run_cli

__all__ = ["engine_checks"]


def engine_checks(
    cli: Sequence[str], runtime: str, image: str, oci_runtime: str | None
) -> list[CheckItem]:
    """Say precisely what is missing: the CLI, the daemon, the image, the OCI runtime."""
    binary = shutil.which(runtime)
    items = [CheckItem("binary", binary is not None, binary or f"{runtime} is not on PATH")]
    if binary is None:
        return items
    info = run_cli([*cli, "info", "--format", "{{json .}}"])
    if info.returncode != 0:
        why = (info.stderr.strip().splitlines() or ["no answer"])[-1]
        items.append(CheckItem("daemon", False, f"{why} (start the engine, e.g. dockerd)"))
        return items
    items.append(CheckItem("daemon", True, "answers"))
    inspected = run_cli([*cli, "image", "inspect", image])
    items.append(
        CheckItem(
            "image",
            inspected.returncode == 0,
            image
            if inspected.returncode == 0
            else f"{image} is not present: {runtime} pull {image}",
        )
    )
    if oci_runtime:
        items.append(_check_oci(runtime, oci_runtime, info.stdout))
    return items


def _check_oci(runtime: str, oci_runtime: str, info_json: str) -> CheckItem:
    if daemonless(runtime):
        found = shutil.which(oci_runtime) is not None
        return CheckItem("oci runtime", found, oci_runtime if found else f"{oci_runtime} not found")
    try:
        runtimes = json.loads(info_json).get("Runtimes") or {}
    except (ValueError, AttributeError):
        runtimes = {}
    ok = oci_runtime in runtimes
    detail = (
        oci_runtime
        if ok
        else (
            f"{oci_runtime} is not registered with the engine (add it to "
            "/etc/docker/daemon.json 'runtimes' and reload the daemon)"
        )
    )
    return CheckItem("oci runtime", ok, detail)
