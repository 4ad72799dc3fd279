"""Fake numba.cuda on host memory."""

import numpy as np


class DeviceNDArray:
    def __init__(self, a):
        self._a = a

    def __getitem__(self, k):
        return DeviceNDArray(self._a[k])

    def copy_to_host(self, ary=None, stream=0):
        if ary is None:
            return self._a.copy()
        assert isinstance(ary, np.ndarray) and ary.shape == self._a.shape
        ary[...] = self._a
        return ary

    def copy_to_device(self, ary, stream=0):
        src = ary._a if isinstance(ary, DeviceNDArray) else ary
        assert src.shape == self._a.shape
        self._a[...] = src


class _Stream:
    def synchronize(self):
        pass


def to_device(a, stream=0):
    assert isinstance(a, np.ndarray)
    return DeviceNDArray(a.copy())


def pinned_array(n, dtype=np.float64):
    return np.empty(n, dtype)


def device_array(n, dtype=np.float64):
    return DeviceNDArray(np.empty(n, dtype))


def default_stream():
    return _Stream()


def synchronize():
    pass


def is_available():
    return True
