"""Print the local providers' figures side by side: bubblewrap against subprocess, one run.

Never asserts on timings. Measures, for each provider, alternating so that drift hits both:

1. create + first one-shot ``print(1)`` (p50 over fresh sandboxes), with the default bounds and
   with none;
2. one-shot ``print(1)`` on a warm sandbox, back to back and 50 ms apart (p50, p99), the
   bubblewrap one as a ratio of the subprocess one (target <= 1.2x);
3. a session round trip for ``x = 1`` (p50/p99; target p50 < 1 ms);
4. what each default bound (the memory cgroup, the pids limit, the scratch quota) adds to
   create + first execute, against the same with none.

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
from rewyn_kernel.runtime.providers.local import cgroup, quota
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


NO_BOUNDS: dict[str, int | None] = {
    "memory_limit_mb": None,
    "pids_limit": None,
    "disk_limit_mb": None,
}
"""The limits lifted: what every sandbox ran with before the default bounds."""


def _p50(samples: dict[str, list[float]]) -> dict[str, float]:
    return {name: percentile(values, 0.5) for name, values in samples.items()}


def create_and_run(provider: SandboxProvider, **limits: int | None) -> float:
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
    unbounded: dict[str, list[float]] = {name: [] for name in providers}
    for _ in range(runs):
        for name, provider in providers.items():
            firsts[name].append(create_and_run(provider))
            unbounded[name].append(create_and_run(provider, **NO_BOUNDS))
    row("create + first print(1), default bounds, p50", _p50(firsts))
    row("create + first print(1), no bounds, p50", _p50(unbounded))

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

    extras: list[tuple[str, dict[str, int | None], Callable[[], str | None]]] = [
        ("memory_limit_mb=4096 (a memory cgroup)", {"memory_limit_mb": 4096}, _no_cgroup),
        ("pids_limit=1024", {"pids_limit": 1024}, lambda: None),
        ("disk_limit_mb=4096 (a loop filesystem)", {"disk_limit_mb": 4096}, quota.unsupported),
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
                base[name].append(create_and_run(provider, **NO_BOUNDS))
                more[name].append(create_and_run(provider, **{**NO_BOUNDS, **limits}))
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
