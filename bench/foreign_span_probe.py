"""Views of other libraries' device memory through cuarrow's span check
(wrap_device walks the driver's allocation ranges from a view's start):
PyTorch with expandable segments (tensors over VMM mappings placed end to
end), PyTorch's default caching allocator, CuPy's default and async pools.
Each tensor is viewed whole by buffer_from_object and read back; a view
1 byte and 1 GiB past a tensor is tried too (accepted into a neighbour, or
refused).  Mode "vmm": one 2 MiB physical allocation mapped N times end to
end (cuMemMap through ctypes), viewed whole by foreign_buffer: the walk's
cost per range, and its limit (262,144 ranges); and the cost of the one
pointer query with and without the two range attributes the check adds.
Prints one line per case; run on the GPU machine."""

import os
import sys

mode = sys.argv[1] if len(sys.argv) > 1 else "torch-expandable"
if mode == "torch-expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import numpy as np  # noqa: E402

from cuarrow import cuda  # noqa: E402

ctx = cuda.Context(0)


def attributes(address):
    """What the driver says of `address` (each attribute asked alone): the
    memory type, the range (start, size), whether it is mapped, and the
    mapping (base, size); an error's CUresult in their place."""
    import ctypes as C

    cu = C.CDLL("libcuda.so.1")
    out = {}
    for name, attr, t in (
        ("type", 2, C.c_uint),
        ("range_start", 11, C.c_ulonglong),
        ("range_size", 12, C.c_size_t),
        ("mapped", 13, C.c_uint),
        ("mapping_base", 19, C.c_ulonglong),
        ("mapping_size", 18, C.c_size_t),
    ):
        v = t(0)
        r = cu.cuPointerGetAttribute(C.byref(v), attr, C.c_ulonglong(address))
        out[name] = v.value if r == 0 else f"CUresult {r}"
    for k in ("range_start", "mapping_base"):
        if isinstance(out[k], int):
            out[k] = f"addr{out[k] - address:+d}"
    return out


def check(name, obj, nbytes, first):
    try:
        view = ctx.buffer_from_object(obj)
        head = np.frombuffer(view.slice(0, 8).copy_to_host().to_pybytes(), dtype=np.uint8)
        print(f"{mode} {name}: viewed {view.size} bytes (expected {nbytes}); first byte {head[0]} (expected {first})")
        for extra in (1, 1 << 30):
            try:
                ctx.foreign_buffer(view.address, view.size + extra, base=obj)
                print(f"{mode} {name}: +{extra} bytes past it: taken (a neighbour's memory)")
            except ValueError as e:
                print(f"{mode} {name}: +{extra} bytes past it: refused: {str(e)[:110]}")
    except Exception as e:  # noqa: BLE001
        print(f"{mode} {name}: FAILED {type(e).__name__}: {e}")


if mode.startswith("torch"):
    import torch

    keep = [torch.full((5 << 20,), 1, dtype=torch.uint8, device="cuda") for _ in range(7)]  # 35 MiB in pieces
    big = torch.full((1 << 30,), 7, dtype=torch.uint8, device="cuda")  # 1 GiB
    torch.cuda.synchronize()
    check("1 GiB tensor", big, 1 << 30, 7)
    print(f"{mode} attributes at the 1 GiB tensor: {attributes(big.data_ptr())}")
    print(f"{mode} attributes 1 GiB past its end: {attributes(big.data_ptr() + (2 << 30))}")
    check("5 MiB tensor", keep[3], 5 << 20, 1)
    sl = big[12345 : 12345 + (300 << 20)]
    check("300 MiB slice at 12345", sl, 300 << 20, 7)
elif mode == "vmm":
    import ctypes as C
    import time

    cu = C.CDLL("libcuda.so.1")

    def ok(r, what):
        if r != 0:
            raise RuntimeError(f"{what}: CUresult {r}")

    class Loc(C.Structure):
        _fields_ = [("type", C.c_int), ("id", C.c_int)]

    class Prop(C.Structure):
        _fields_ = [
            ("type", C.c_int),
            ("handle_types", C.c_int),
            ("location", Loc),
            ("win32", C.c_void_p),
            ("compression", C.c_ubyte),
            ("rdma", C.c_ubyte),
            ("usage", C.c_ushort),
            ("reserved", C.c_ubyte * 4),
        ]

    class Access(C.Structure):
        _fields_ = [("location", Loc), ("flags", C.c_int)]

    primary = C.c_void_p()
    ok(cu.cuDevicePrimaryCtxRetain(C.byref(primary), 0), "cuDevicePrimaryCtxRetain")
    ok(cu.cuCtxSetCurrent(primary), "cuCtxSetCurrent")  # the context cuarrow's Context(0) uses
    granule = 2 << 20
    prop = Prop(1, 0, Loc(1, 0))  # pinned, no handle export, device 0
    handle = C.c_ulonglong()
    ok(cu.cuMemCreate(C.byref(handle), C.c_size_t(granule), C.byref(prop), C.c_ulonglong(0)), "cuMemCreate")

    def mapped_view(n):
        """n mappings of the one granule end to end: (base, unmap)."""
        base = C.c_ulonglong()
        size = n * granule
        ok(
            cu.cuMemAddressReserve(
                C.byref(base), C.c_size_t(size), C.c_size_t(granule), C.c_ulonglong(0), C.c_ulonglong(0)
            ),
            "cuMemAddressReserve",
        )
        for i in range(n):
            ok(
                cu.cuMemMap(
                    C.c_ulonglong(base.value + i * granule),
                    C.c_size_t(granule),
                    C.c_size_t(0),
                    handle,
                    C.c_ulonglong(0),
                ),
                "cuMemMap",
            )
        acc = Access(Loc(1, 0), 3)  # read and write
        ok(cu.cuMemSetAccess(base, C.c_size_t(size), C.byref(acc), C.c_size_t(1)), "cuMemSetAccess")

        def unmap():
            ok(cu.cuMemUnmap(base, C.c_size_t(size)), "cuMemUnmap")
            ok(cu.cuMemAddressFree(base, C.c_size_t(size)), "cuMemAddressFree")

        return base.value, unmap

    for n in (64, 40_000, (1 << 18) + 8):
        t0 = time.perf_counter()
        base, unmap = mapped_view(n)
        t_map = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            view = ctx.foreign_buffer(base, n * granule)
            t_view = time.perf_counter() - t0
            tail = view.slice(n * granule - 8, 8).copy_to_host().to_pybytes()
            print(
                f"vmm {n} mappings ({n * granule >> 30} GiB): viewed {view.size} bytes in {t_view * 1e3:.1f} ms "
                f"({t_view / n * 1e9:.0f} ns a range; mapping took {t_map:.1f} s); last 8 bytes read: {len(tail)}"
            )
            del view
        except ValueError as e:
            t_view = time.perf_counter() - t0
            print(f"vmm {n} mappings: refused in {t_view * 1e3:.1f} ms: {str(e)[:220]}")
        finally:
            unmap()

    # A reservation of 8 granules with only the first 4 mapped (one
    # cuMemMap each): what the driver says of a mapped and an unmapped
    # granule, and whether a view over 6 granules is taken (never read).
    base = C.c_ulonglong()
    ok(
        cu.cuMemAddressReserve(
            C.byref(base), C.c_size_t(8 * granule), C.c_size_t(granule), C.c_ulonglong(0), C.c_ulonglong(0)
        ),
        "cuMemAddressReserve",
    )
    for i in range(4):
        ok(
            cu.cuMemMap(
                C.c_ulonglong(base.value + i * granule), C.c_size_t(granule), C.c_size_t(0), handle, C.c_ulonglong(0)
            ),
            "cuMemMap",
        )
    ok(cu.cuMemSetAccess(base, C.c_size_t(4 * granule), C.byref(Access(Loc(1, 0), 3)), C.c_size_t(1)), "access")
    for g in (0, 3, 4, 7):
        print(
            f"vmm holes: granule {g} ({'mapped' if g < 4 else 'reserved only'}): {attributes(base.value + g * granule)}"
        )
    for n_g in (4, 6):
        try:
            v = ctx.foreign_buffer(base.value, n_g * granule)
            print(f"vmm holes: a view of {n_g} granules from the base: taken ({v.size} bytes)")
            del v
        except ValueError as e:
            print(f"vmm holes: a view of {n_g} granules from the base: refused: {str(e)[:160]}")
    ok(cu.cuMemUnmap(base, C.c_size_t(4 * granule)), "cuMemUnmap")
    ok(cu.cuMemAddressFree(base, C.c_size_t(8 * granule)), "cuMemAddressFree")
    plain = ctx.new_buffer(3 << 20)
    print(f"cuMemAlloc 3 MiB: {attributes(plain.address)}; at +1 MiB: {attributes(plain.address + (1 << 20))}")
    pooled = ctx.buffer_from_data(b"x" * (3 << 20))
    print(f"pool 3 MiB: {attributes(pooled.address)}")
    pinned = cuda.new_host_buffer(1 << 20)
    print(f"pinned 1 MiB: {attributes(pinned.address)}")
    managed = C.c_ulonglong()
    ok(cu.cuMemAllocManaged(C.byref(managed), C.c_size_t(1 << 20), 1), "cuMemAllocManaged")
    print(f"managed 1 MiB: {attributes(managed.value)}")
    host = np.zeros(1 << 20, dtype=np.uint8)
    ok(cu.cuMemHostRegister_v2(C.c_void_p(host.ctypes.data), C.c_size_t(1 << 20), 0), "cuMemHostRegister")
    print(f"registered 1 MiB: {attributes(host.ctypes.data)}")
    print(f"plain host memory: {attributes(np.zeros(1 << 20, dtype=np.uint8).ctypes.data)}")
    ok(cu.cuMemHostUnregister(C.c_void_p(host.ctypes.data)), "cuMemHostUnregister")

    # The one pointer query, with and without the range attributes.
    buf = ctx.new_buffer(1 << 20)
    # type, ordinal, managed, pool, legacy IPC, range start and size (the
    # query until 2026-12-07 asked the first 5), mapped, mapping base and size
    attrs = (C.c_int * 10)(2, 9, 8, 17, 10, 11, 12, 13, 19, 18)
    vals = [C.c_ulonglong() for _ in range(10)]
    ptrs = (C.c_void_p * 10)(*[C.cast(C.byref(v), C.c_void_p) for v in vals])
    f = cu.cuPointerGetAttributes
    for k in (5, 7, 10, 5, 7, 10):
        reps = 200_000
        t0 = time.perf_counter()
        for _ in range(reps):
            f(k, attrs, ptrs, C.c_ulonglong(buf.address))
        dt = time.perf_counter() - t0
        print(f"cuPointerGetAttributes with {k} attributes: {dt / reps * 1e9:.0f} ns a call (ctypes included)")
else:
    import cupy

    if mode == "cupy-async":
        cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)
    a = cupy.full((1 << 30,), 7, dtype=cupy.uint8)
    b = cupy.full((5 << 20,), 1, dtype=cupy.uint8)
    cupy.cuda.Device().synchronize()
    check("1 GiB array", a, 1 << 30, 7)
    check("5 MiB array", b, 5 << 20, 1)
