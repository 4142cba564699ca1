"""The Jupyter side: the sandboxed wrapper kernel, its kernelspec, and output safety.

Depends on ``rewyn_kernel.runtime``; the runtime never imports from here.
"""
