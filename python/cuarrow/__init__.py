"""cuarrow: Apache Arrow columnar data on NVIDIA GPUs.

``cuarrow.cuda`` is pyarrow.cuda's API (contexts, device and pinned host
buffers, reader and writer, Numba interop) built on the cuarrow C++ library,
plus typed Arrow data on the GPU (``cuda.to_device`` / ``cuda.from_device``);
it installs beside the stock pyarrow wheel.  ``python -m cuarrow.demo`` walks
through the Arrow "CUDA Integration" page with it.
"""

from cuarrow._cuarrow import __version__

__all__ = ["__version__", "cuda"]


def __getattr__(name: str):
    # `import cuarrow` stays light; `cuarrow.cuda` (which imports pyarrow) on demand.
    if name == "cuda":
        import importlib

        return importlib.import_module("cuarrow.cuda")
    raise AttributeError(f"module 'cuarrow' has no attribute {name!r}")
