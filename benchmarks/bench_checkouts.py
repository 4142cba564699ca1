"""Print bubblewrap's create + first ``print(1)`` for this checkout against others, interleaved.

The start-up time of a sandbox drifts by a fifth or more between runs a few minutes apart on
these machines, so two figures measured one after the other say little. This runs the same
measurement for each checkout in turn, round after round (a fresh process each time, with that
checkout's package first on the path and its own default bounds), and prints each one's p50
over every round, and its ratio to the first checkout given (the baseline).

    git worktree add /tmp/base 75e33cd
    python -m benchmarks.bench_checkouts /tmp/base            # 8 rounds of 10
    python -m benchmarks.bench_checkouts /tmp/base /tmp/other --rounds 12 --runs 10

Every checkout runs under this interpreter (its dependencies must do for all of them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

MEASURE = """
import json, sys, time
from rewyn_kernel.runtime import SandboxSpec, create
from rewyn_kernel.runtime.sandbox import BubblewrapProvider

provider = BubblewrapProvider()
with create(SandboxSpec(timeout=60), provider=provider) as box:  # (warm caches, not counted)
    box.execute("print(1)")
took = []
for _ in range(int(sys.argv[1])):
    start = time.perf_counter()
    box = create(SandboxSpec(timeout=60), provider=provider)
    result = box.execute("print(1)")
    took.append((time.perf_counter() - start) * 1000)
    box.close()
    if not result.ok:
        raise SystemExit(f"the first print(1) failed: {result.ending} {result.message}")
print(json.dumps(took))
"""
"""One round for one checkout: ``runs`` fresh sandboxes, each timed from create() to the end
of its first one-shot ``print(1)`` (close not counted)."""


def measure(checkout: Path, runs: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(runs)],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {done.stderr.strip()[-2000:]}")
    samples: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return samples


def flat(rounds: list[list[float]]) -> list[float]:
    return [sample for one in rounds for sample in one]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path, help="the checkout to compare against")
    parser.add_argument("others", type=Path, nargs="*", help="more checkouts")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=10, help="sandboxes per round")
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parent.parent
    checkouts = [args.baseline.resolve(), here, *(path.resolve() for path in args.others)]
    for checkout in checkouts:
        if not (checkout / "rewyn_kernel" / "__init__.py").is_file():
            parser.error(f"{checkout} holds no rewyn_kernel package")
    samples: dict[Path, list[list[float]]] = {checkout: [] for checkout in checkouts}
    for _ in range(args.rounds):
        for checkout in checkouts:
            samples[checkout].append(measure(checkout, args.runs))
    base = statistics.median(flat(samples[checkouts[0]]))
    print(f"python {sys.version.split()[0]}; {args.rounds} rounds of {args.runs}, interleaved")
    print(f"{'checkout':<40} {'p50':>9} {'ratio':>7}  p50 of each round")
    for checkout, rounds in samples.items():
        p50 = statistics.median(flat(rounds))
        each = " ".join(f"{statistics.median(one):.0f}" for one in rounds)
        name = f"{checkout} (this one)" if checkout == here else str(checkout)
        print(f"{name:<40} {p50:7.1f} ms {p50 / base:6.2f}x  {each}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
