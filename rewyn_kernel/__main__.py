"""``python -c "<BOOT>"`` (what kernel.json runs; see kernel/kernelspec.py): start the sandboxed
kernel. ``python -m rewyn_kernel`` works too, from a directory you trust."""

import os
import sys

# ipykernel imports debugpy when it is installed; this kernel offers no debugger, so quiet
# pydevd's start-up warning about frozen modules (it would land in every server log).
os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")


def main() -> None:
    """Start the kernel with the settings in ``sys.argv``."""
    from rewyn_kernel.kernel._plugins import no_pydantic_plugins

    with no_pydantic_plugins():  # (the runtime builds models as it is imported: see _plugins)
        from rewyn_kernel.kernel import prestart

    # The sandbox's worker starts now and comes up while Jupyter's stack is imported below.
    prestart.prestart(sys.argv[1:])
    try:
        from ipykernel.kernelapp import IPKernelApp

        from rewyn_kernel.kernel.kernel import SandboxKernel

        # No OutStream: no user code runs in this process, so its own stdout and stderr belong
        # in the log, not in a cell. (ipykernel's OutStream also makes the control thread's
        # flush after a shutdown race the IOPub thread's stop: a 2.5 s exit, then a SIGKILL.)
        IPKernelApp.launch_instance(kernel_class=SandboxKernel, outstream_class=None)
    finally:
        prestart.discard()  # (the kernel never took it: it did not start)


if __name__ == "__main__":
    main()
