"""Views of other libraries' device memory through cuarrow's span check
(wrap_device walks the driver's allocation ranges from a view's start):
PyTorch with expandable segments (tensors over VMM mappings placed end to
end), PyTorch's default caching allocator, CuPy's default and async pools.
Each tensor is viewed whole by buffer_from_object and read back; a view
1 byte and 1 GiB past a tensor is tried too (accepted into a neighbour, or
refused).  Prints one line per case; run on the GPU machine."""

import os
import sys

mode = sys.argv[1] if len(sys.argv) > 1 else "torch-expandable"
if mode == "torch-expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import numpy as np  # noqa: E402

from cuarrow import cuda  # noqa: E402

ctx = cuda.Context(0)


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
    check("5 MiB tensor", keep[3], 5 << 20, 1)
    sl = big[12345 : 12345 + (300 << 20)]
    check("300 MiB slice at 12345", sl, 300 << 20, 7)
else:
    import cupy

    if mode == "cupy-async":
        cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)
    a = cupy.full((1 << 30,), 7, dtype=cupy.uint8)
    b = cupy.full((5 << 20,), 1, dtype=cupy.uint8)
    cupy.cuda.Device().synchronize()
    check("1 GiB array", a, 1 << 30, 7)
    check("5 MiB array", b, 5 << 20, 1)
