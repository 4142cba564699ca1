"""Print a kernel cell's time in a JupyterHub-style container: the sandboxed kernel against
plain ipykernel, both inside the same container, in one run.

The container is the one ``tests/test_hub_container.py`` starts (the engine's default seccomp
profile, no added capability, uid 1000, the package in a venv of its own mounted read-only):
there user namespaces are refused and the sandboxed kernel runs on the landlock provider. Inside
it, ``jupyter_client`` starts each kernel in turn, round after round, and times ``x = 1`` from
request to reply and idle, after warm-ups. Never asserts on timings.

    python -m benchmarks.bench_hub               # 2 rounds of 40 cells per kernel
    python -m benchmarks.bench_hub --rounds 3 --cells 60

Needs a docker engine and the test image (``scripts/container-engines.sh``).
"""

from __future__ import annotations

import argparse
import sys

from tests.conftest import TEST_IMAGE
from tests.hub_container import hub_container, hub_venv

INSIDE = r"""
import json, statistics, sys, time
from jupyter_client.manager import start_new_kernel
rounds, cells = int(sys.argv[1]), int(sys.argv[2])
def cell_times(name):
    km, kc = start_new_kernel(kernel_name=name, startup_timeout=120)
    try:
        for _ in range(8):
            kc.execute_interactive("x = 1", timeout=60)
        times = []
        for _ in range(cells):
            started = time.perf_counter()
            kc.execute_interactive("x = 1", timeout=60)
            times.append((time.perf_counter() - started) * 1000)
        return statistics.median(times)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
out = {}
for _ in range(rounds):
    for name in ("python3", "rewyn-sandbox"):
        out.setdefault(name, []).append(cell_times(name))
print(json.dumps(out))
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cells", type=int, default=40)
    args = parser.parse_args(argv)
    venv = hub_venv()
    with hub_container(TEST_IMAGE, venv.path) as hub:
        found = hub.python(INSIDE, str(args.rounds), str(args.cells), timeout=1800)
    plain, sandboxed = found["python3"], found["rewyn-sandbox"]
    print("Kernel cell 'x = 1' in the JupyterHub-style container (median of each round, ms)")
    for number, (base, ours) in enumerate(zip(plain, sandboxed, strict=True), 1):
        print(
            f"round {number}: ipykernel {base:7.2f}   sandboxed (landlock) {ours:7.2f}   "
            f"{ours / base:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
