"""Print start-up and round-trip figures for the container provider (never asserts on timings).

For each engine given (default: docker+runc, docker+runsc), measured in one run:

1. the baseline: wall time of a plain ``docker run --rm IMAGE python3 -c pass`` (p50);
2. cold start: ``create()`` then the first ``execute("pass")``, p50 over fresh sandboxes, as a
   ratio of the baseline (target <= 1.2x);
3. one-shot ``execute("print(1)")`` on a warm sandbox (a fork inside the container), p50;
4. a session round trip for ``x = 1``, p50/p99 after warm-ups (target p50 < 2 ms).

Needs a running engine and the test image (``scripts/container-engines.sh``). Run::

    python -m benchmarks.bench_container [--runs N] [--image IMAGE] [--engines docker docker+runsc]
"""

from __future__ import annotations

import argparse
import subprocess
import time
from collections.abc import Sequence

from benchmarks.bench_runtime import Table, percentile, timed
from rewyn_kernel.runtime import create
from rewyn_kernel.runtime.container import ContainerProvider


def provider_for(engine: str, image: str) -> ContainerProvider:
    cli, _, oci = engine.partition("+")
    if cli == "podman":
        oci = oci or "/usr/sbin/runc"
    return ContainerProvider(image=image, runtime=cli, oci_runtime=oci or None, pull="never")


def bench_engine(table: Table, engine: str, image: str, runs: int) -> None:
    provider = provider_for(engine, image)
    problems = [f"{i.name}: {i.detail}" for i in provider.check() if not i.ok]
    if problems:
        table.row(f"{engine}: not usable", "-", "; ".join(problems))
        return
    podman = provider.runtime.rsplit("/", 1)[-1] == "podman"
    oci = ["--runtime", provider.oci_runtime] if provider.oci_runtime else []
    cli = [provider.runtime, *(oci if podman else [])]
    # podman's default rlimits exceed this machine's hard limit: the same --ulimit as ours.
    limits = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"] if podman else []
    plain = [*cli, "run", "--rm", *([] if podman else oci), *limits, "--network", "none", image]
    plain += ["python3", "-c", "pass"]
    baseline = timed(runs, lambda: subprocess.run(plain, check=True, capture_output=True))
    base = percentile(baseline, 0.5)
    table.row(f"{engine}: plain run --rm p50", f"{base:.0f} ms", " ".join(plain[:4]) + " ...")

    boxes = []

    def cold() -> None:
        box = create(provider=provider)
        boxes.append(box)
        table.check(f"{engine} cold", box.execute("pass"))

    cold_times = timed(runs, cold)
    cold_p50 = percentile(cold_times, 0.5)
    close_times = timed(len(boxes), lambda: boxes.pop().close())
    table.row(
        f"{engine}: create + first execute p50",
        f"{cold_p50:.0f} ms",
        f"{cold_p50 / base:.2f}x (<= 1.2x)",
    )

    table.row(
        f"{engine}: close() p50", f"{percentile(close_times, 0.5):.0f} ms", "rm -f, not timed above"
    )
    with create(provider=provider) as box:
        box.execute("pass")
        one_shot = timed(runs, lambda: table.check(f"{engine} one-shot", box.execute("print(1)")))
        table.row(
            f"{engine}: one-shot print(1), warm p50",
            f"{percentile(one_shot, 0.5):.2f} ms",
            "a fork in the container",
        )
        with box.session() as session:
            for _ in range(20):
                session.execute("x = 1")
            trips = timed(runs * 20, lambda: session.execute("x = 1"))
        table.row(
            f"{engine}: session x = 1 p50",
            f"{percentile(trips, 0.5):.3f} ms",
            "target < 2 ms",
        )
        table.row(f"{engine}: session x = 1 p99", f"{percentile(trips, 0.99):.3f} ms")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--runs", type=int, default=10, help="fresh sandboxes / samples (default 10)"
    )
    parser.add_argument("--image", default="rewyn-test-python:3.11")
    parser.add_argument("--engines", nargs="+", default=["docker", "docker+runsc"])
    args = parser.parse_args(argv)
    table = Table()
    started = time.monotonic()
    for engine in args.engines:
        bench_engine(table, engine, args.image, max(1, args.runs))
    print(f"\n{time.monotonic() - started:.1f} s in all")
    for failure in table.failures:
        print("FAILED:", failure)
    return 1 if table.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
