"""rewyn-kernel: run model-written and untrusted Python in a sandbox, from code or Jupyter."""

__version__ = "0.1.0"

__all__ = ["__version__"]
