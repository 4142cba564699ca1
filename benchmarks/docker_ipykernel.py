"""Plain ipykernel inside the data-science image: the benchmarks' baseline for docker kernels.

The sandbox kernel on docker runs the image's Python and packages (Debian's IPython, pandas,
matplotlib); comparing it with ipykernel on the host would compare package versions. This runs
the image's own ipykernel (``python3-ipykernel``) in a container that shares the host's network
(the connection file's ports are on 127.0.0.1) and the notebook's folder at its own path, with
ipykernel's inline backend as a kernel has it. No sandboxing: it is the control.

    python benchmarks/docker_ipykernel.py CONNECTION_FILE IMAGE     (what a kernelspec runs)
"""

from __future__ import annotations

import os
import sys

LABEL = "io.rewyn-kernel.bench-control=1"
"""On every control container: a kernel that hangs is killed through its ``docker run``
client, which leaves the container running; the benchmark removes these after each notebook."""


def main(argv: list[str]) -> None:
    connection_file, image = os.path.abspath(argv[0]), argv[1]
    folder = os.getcwd()
    command = ["docker", "run", "--rm", "--init", "--network", "host", "--label", LABEL]
    command += ["-v", f"{connection_file}:{connection_file}:ro", "-v", f"{folder}:{folder}"]
    command += ["-w", folder, "-e", "MPLBACKEND=module://matplotlib_inline.backend_inline"]
    command += [image, "python3", "-m", "ipykernel_launcher", "-f", connection_file]
    os.execvp("docker", command)  # (docker run passes the kernel's signals on: interrupts work)


if __name__ == "__main__":
    main(sys.argv[1:])
