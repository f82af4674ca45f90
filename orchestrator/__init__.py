"""tune-remote: tune AITER kernels on remote ROCm nodes from a laptop."""

__version__ = "0.1.0"
