import ctypes


class _Stream:
    def synchronize(self):
        pass


def get_current_stream():
    return _Stream()


def alloc_pinned_memory(n):
    return bytearray(n)


class runtime:
    memcpyHostToDevice, memcpyDeviceToHost, memcpyDeviceToDevice = 1, 2, 3

    @staticmethod
    def memcpy(dst, src, n, kind):
        assert kind in (1, 2, 3) and isinstance(dst, int) and isinstance(src, int)
        ctypes.memmove(dst, src, n)

    @staticmethod
    def streamSynchronize(s):
        assert s == 0

    @staticmethod
    def deviceSynchronize():
        pass

    @staticmethod
    def getDeviceCount():
        return 1
