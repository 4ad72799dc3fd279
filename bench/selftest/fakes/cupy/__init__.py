"""Fake CuPy on host memory: only to exercise bench.py's code paths."""

import numpy as np

from . import cuda as cuda

uint8 = np.uint8
__version__ = "fake"


class _Mem:
    def __init__(self, a):
        self.ptr = a.ctypes.data


class ndarray:
    def __init__(self, a):
        self._a = a

    def __getitem__(self, k):
        return ndarray(self._a[k])

    def __setitem__(self, k, v):
        self._a[k] = v

    @property
    def data(self):
        return _Mem(self._a)

    def get(self, stream=None, order="C", out=None):
        if out is None:
            return self._a.copy()
        assert out.shape == self._a.shape
        out[...] = self._a
        return out

    def set(self, arr, stream=None):
        self._a[...] = arr

    def copy(self):
        return ndarray(self._a.copy())


def asarray(a):
    assert isinstance(a, np.ndarray)
    return ndarray(np.array(a, copy=True))


def empty(n, dtype):
    return ndarray(np.empty(n, dtype))


def copyto(dst, src):
    dst._a[...] = src._a
