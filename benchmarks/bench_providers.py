"""Print the local providers' figures side by side: bubblewrap against subprocess, one run.

Never asserts on timings. Measures, for each provider, alternating so that drift hits both:

1. create + first one-shot ``print(1)`` (p50 over fresh sandboxes);
2. one-shot ``print(1)`` on a warm sandbox, back to back and 50 ms apart (p50, p99), the
   bubblewrap one as a ratio of the subprocess one (target <= 1.2x);
3. a session round trip for ``x = 1`` (p50/p99; target p50 < 1 ms);
4. what a memory cgroup (``memory_limit_mb``) and a scratch quota (``disk_limit_mb``) add to
   create + first execute, against the same without.

    python -m benchmarks.bench_providers            # 20 runs each
    python -m benchmarks.bench_providers --quick    # 5 runs each
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from benchmarks.bench_runtime import percentile, timed
from rewyn_kernel.runtime import BubblewrapProvider, SubprocessProvider, create
from rewyn_kernel.runtime.host import cgroup, quota
from rewyn_kernel.runtime.sandbox import (
    Sandbox,
    SandboxProvider,
    SandboxResult,
    SandboxSpec,
    Session,
)

SPACING = 0.05


def checked(result: SandboxResult) -> SandboxResult:
    if not result.ok:
        raise SystemExit(f"benchmark cell failed: {result.ending} {result.message}")
    return result


def create_and_run(provider: SandboxProvider, **limits: int) -> float:
    """Milliseconds from create() to the end of a first print(1), then close (not counted)."""
    start = time.perf_counter()
    box = create(SandboxSpec.model_validate({"timeout": 60, **limits}), provider=provider)
    checked(box.execute("print(1)"))
    elapsed = (time.perf_counter() - start) * 1000
    box.close()
    return elapsed


def row(metric: str, values: dict[str, float], target: str = "") -> None:
    plain, bwrap = values["subprocess"], values["bubblewrap"]
    ratio = f"{bwrap / plain:.2f}x" if plain else "-"
    print(f"{metric:<56} {plain:>10.2f} ms {bwrap:>10.2f} ms {ratio:>7}  {target}".rstrip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=None, help="runs per figure (20)")
    parser.add_argument("--quick", action="store_true", help="5 runs per figure")
    args = parser.parse_args(argv)
    runs: int = args.runs or (5 if args.quick else 20)
    providers: dict[str, SandboxProvider] = {
        "subprocess": SubprocessProvider(),
        "bubblewrap": BubblewrapProvider(),
    }
    if not providers["bubblewrap"].available:
        found = BubblewrapProvider().probe()
        raise SystemExit(f"bubblewrap cannot run here: {found.detail}")
    print(f"python {sys.version.split()[0]}; runs={runs}; {cgroup.cgroup_support().detail}")
    print(f"{'metric':<56} {'subprocess':>13} {'bubblewrap':>13} {'ratio':>7}  target")

    firsts: dict[str, list[float]] = {name: [] for name in providers}
    for _ in range(runs):
        for name, provider in providers.items():
            firsts[name].append(create_and_run(provider))
    row("create + first print(1), p50", {k: percentile(v, 0.5) for k, v in firsts.items()})

    boxes = {name: create(provider=p, timeout=60) for name, p in providers.items()}
    try:
        for box in boxes.values():
            checked(box.execute("print(1)"))  # the first spare worker
        for label, pause in (("back to back", 0.0), ("50 ms apart", SPACING)):
            samples: dict[str, list[float]] = {name: [] for name in boxes}
            for _ in range(runs):
                for name, box in boxes.items():

                    def one(target: Sandbox = box) -> None:
                        checked(target.execute("print(1)"))

                    samples[name] += timed(1, one, pause)
            for fraction, tag in ((0.5, "p50"), (0.99, "p99")):
                target = "<= 1.2x" if tag == "p50" else ""
                values = {k: percentile(v, fraction) for k, v in samples.items()}
                row(f"one-shot print(1), {label}, {tag}", values, target)

        sessions = {name: box.session() for name, box in boxes.items()}
        rounds: dict[str, list[float]] = {name: [] for name in sessions}
        for name, session in sessions.items():

            def assign(target: Session = session) -> None:
                checked(target.execute("x = 1"))

            timed(20, assign)
            rounds[name] = timed(runs * 25, assign)
        for fraction, tag in ((0.5, "p50"), (0.99, "p99")):
            values = {k: percentile(v, fraction) for k, v in rounds.items()}
            row(f"session x = 1, {tag}", values, "< 1 ms" if tag == "p50" else "")
        for session in sessions.values():
            session.close()
    finally:
        for box in boxes.values():
            box.close()

    extras: list[tuple[str, dict[str, int], Callable[[], str | None]]] = [
        ("memory_limit_mb=256 (a memory cgroup)", {"memory_limit_mb": 256}, _no_cgroup),
        ("disk_limit_mb=1024 (a loop filesystem)", {"disk_limit_mb": 1024}, quota.unsupported),
    ]
    for label, limits, missing in extras:
        why = missing()
        if why is not None:
            print(f"{label}: not measured ({why})")
            continue
        base: dict[str, list[float]] = {name: [] for name in providers}
        more: dict[str, list[float]] = {name: [] for name in providers}
        for _ in range(max(3, runs // 2)):
            for name, provider in providers.items():
                base[name].append(create_and_run(provider))
                more[name].append(create_and_run(provider, **limits))
        added = {
            name: percentile(more[name], 0.5) - percentile(base[name], 0.5) for name in providers
        }
        row(f"{label}: added to create + first", added)
    return 0


def _no_cgroup() -> str | None:
    support = cgroup.cgroup_support()
    return None if support.parent is not None else support.detail


if __name__ == "__main__":
    sys.exit(main())
