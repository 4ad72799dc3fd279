"""Fake torch on host memory."""

import numpy as np

from . import cuda as cuda

uint8 = np.uint8
__version__ = "fake"


class Tensor:
    def __init__(self, a, dev="cpu"):
        self._a, self.dev = a, dev

    def __getitem__(self, k):
        return Tensor(self._a[k], self.dev)

    def cuda(self, non_blocking=False):
        assert self.dev == "cpu"
        return Tensor(self._a.copy(), "cuda")

    def cpu(self):
        return Tensor(self._a.copy(), "cpu")

    def copy_(self, src, non_blocking=False):
        self._a[...] = src._a
        return self

    def clone(self):
        return Tensor(self._a.copy(), self.dev)

    def zero_(self):
        self._a[...] = 0
        return self

    def numpy(self):
        assert self.dev == "cpu"
        return self._a


def from_numpy(a):
    if not a.flags.writeable:
        import warnings

        warnings.warn("The given NumPy array is not writable", stacklevel=2)
    return Tensor(a)


def empty(n, dtype=None, pin_memory=False, device=None):
    return Tensor(np.empty(n, dtype), "cuda" if device == "cuda" else "cpu")
