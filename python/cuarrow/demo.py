"""Walk through the Arrow "CUDA Integration" page with cuarrow.cuda.

Run ``python -m cuarrow.demo`` (or the ``cuarrow-demo`` command).  Every
statement of the page runs as written, with ``cuarrow.cuda`` in place of
``pyarrow.cuda``, on GPU 0, and prints its result as the page does.

It ends with what the page wished for and could not do: an Arrow array
copied to the device with its type, and the Numba kernel run on it directly,
without building a DeviceNDArray by hand.

On a machine without a GPU the demo runs on cuarrow's host emulation of the
CUDA driver and says so in a banner; the Numba steps, which need a real GPU
to run a kernel, are skipped with a sentence saying why.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import traceback
import warnings
from typing import Any

RULE = "=" * 72


def _say(text: str = "") -> None:
    print()
    print(textwrap.fill(text, width=78) if text else "")


def _heading(title: str) -> None:
    print()
    print(title)
    print("-" * len(title))


class _Session:
    """Runs statements like the interactive prompt: echo, then the result."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {"__name__": "__cuarrow_demo__"}

    def run(self, source: str, expect_error: bool = False) -> bool:
        lines = source.strip("\n").splitlines()
        print(">>> " + lines[0])
        for line in lines[1:]:
            print("... " + line)
        if len(lines) > 1:
            print("...")
        try:
            code = compile(source.strip("\n") + "\n", "<demo>", "single")
            exec(code, self.namespace)
        except Exception as e:  # noqa: BLE001 - shown as the REPL would
            print("Traceback (most recent call last):")
            print("  ...")
            print("".join(traceback.format_exception_only(type(e), e)).rstrip())
            if not expect_error:
                raise
            return False
        return True


_EMULATED_SKIP = {
    "kernel": (
        "Skipping this step: it runs a Numba CUDA kernel, and the host emulation of the CUDA "
        "driver cannot run GPU kernels (Numba needs a real NVIDIA GPU)."
    ),
    "memory": (
        "Skipping this step: it allocates device memory with Numba, which needs a real NVIDIA GPU "
        "(Numba cannot use the host emulation of the CUDA driver)."
    ),
}


def _numba_unavailable(emulated: bool) -> str | None:
    if emulated:
        return _EMULATED_SKIP["kernel"]
    try:
        import numba.cuda  # noqa: F401
    except ImportError:
        return "Skipping this step: Numba is not installed (pip install numba-cuda, or pip install 'cuarrow[numba]')."
    return None


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="cuarrow-demo", description="Walk through the Arrow 'CUDA Integration' page with cuarrow.cuda."
    )
    parser.add_argument(
        "--emulated",
        action="store_true",
        help="run on cuarrow's host emulation of the CUDA driver even if there is a GPU",
    )
    args = parser.parse_args(argv)

    from cuarrow import cuda

    if args.emulated:
        cuda.use_emulation()
        reason: str | None = "--emulated was given"
    else:
        reason = cuda.use_emulation_if_no_gpu()

    try:
        info = cuda.driver_info()
    except cuda.CudaError as e:
        print(f"cuarrow-demo: no usable CUDA driver: {e}", file=sys.stderr)
        return 1
    emulated = info["emulated"]

    print(RULE)
    print(" cuarrow demo: the Arrow 'CUDA Integration' page, with cuarrow.cuda")
    if emulated:
        print(RULE)
        print(" EMULATED: no GPU is used.  This run uses cuarrow's host emulation of the")
        print(" CUDA driver, a test tool: device memory is host memory, and nothing can")
        print(" run a GPU kernel.")
        if reason:
            print(f" Why: {reason}.")
    print(RULE)
    version = info["version"]
    print(f"driver: {info['path']} (CUDA {version // 1000}.{version % 1000 // 10}), {info['devices']} device(s)")
    if info["devices"] == 0:
        print("cuarrow-demo: the driver reports no CUDA device", file=sys.stderr)
        return 1

    s = _Session()
    try:
        _heading("CUDA contexts")
        _say("A CUDA context represents access to one CUDA-capable device.  Creating a context for device 0:")
        s.run("from cuarrow import cuda")
        s.run("ctx = cuda.Context(0)")
        print(f"    (device 0: {s.namespace['ctx'].device_name})")

        _heading("CUDA buffers")
        _say(
            "A CUDA buffer is created by copying data from host memory into the device's memory with "
            "Context.buffer_from_data().  The source can be any Python object that supports the buffer "
            "protocol, including Arrow buffers:"
        )
        s.run("import numpy as np")
        s.run("import pyarrow as pa")
        s.run("arr = np.arange(4, dtype=np.int32)")
        s.run("arr.nbytes")
        s.run("cuda_buf = ctx.buffer_from_data(arr)")
        s.run("type(cuda_buf)")
        s.run("cuda_buf.size     # the buffer's size in bytes")
        s.run("cuda_buf.address  # the buffer's address in device memory")
        s.run("cuda_buf.context.device_number")
        _say("Conversely, a CUDA buffer can be copied back to host memory, giving an ordinary CPU buffer:")
        s.run("buf = cuda_buf.copy_to_host()")
        s.run("type(buf)")
        s.run("np.frombuffer(buf, dtype=np.int32)")
        _say(
            "The page warns that many Arrow functions expect a CPU buffer and crash when given a CUDA "
            "buffer.  With cuarrow they raise instead: a CudaBuffer is not a pyarrow.Buffer and never "
            "exposes device memory to host code."
        )
        s.run('pa.py_buffer(b"x" * 16).equals(cuda_buf)', expect_error=True)
        s.run("memoryview(cuda_buf)", expect_error=True)

        _heading("Numba integration: Arrow to Numba")
        skip = _numba_unavailable(emulated)
        if skip:
            _say(skip)
        else:
            from cuarrow import _numba

            if _numba.numpy_compat_for_numba():
                _say(
                    "(Note: this numba-cuda cannot compile kernels under NumPy >= 2.5, which removed "
                    "numpy.row_stack; the demo aliases it to numpy.vstack first.)"
                )
            warnings.filterwarnings("ignore", message=".*will likely result in GPU under-utilization.*")
            s.run("import numba.cuda")
            s.run(
                "@numba.cuda.jit\n"
                "def increment_by_one(an_array):\n"
                "    pos = numba.cuda.grid(1)\n"
                "    if pos < an_array.size:\n"
                "        an_array[pos] += 1"
            )
            s.run("from numba.cuda.cudadrv.devicearray import DeviceNDArray")
            s.run("device_arr = DeviceNDArray(arr.shape, arr.strides, arr.dtype, gpu_data=cuda_buf.to_numba())")
            s.run("increment_by_one[16, 16](device_arr)")
            s.run("np.frombuffer(cuda_buf.copy_to_host(), dtype=np.int32)")

        _heading("Numba integration: Numba to Arrow")
        if skip:
            _say(_EMULATED_SKIP["memory"] if emulated else skip)
        else:
            s.run("arr = np.arange(10, 14, dtype=np.int32)")
            s.run("arr")
            s.run("device_arr = numba.cuda.to_device(arr)")
            s.run("cuda_buf = cuda.CudaBuffer.from_numba(device_arr.gpu_data)")
            s.run("cuda_buf.size")
            s.run("cuda_buf.address")
            s.run("cuda_buf.context.device_number")
            s.run("np.frombuffer(cuda_buf.copy_to_host(), dtype=np.int32)")

        _heading("Beyond the page: the standard protocols")
        _say(
            "Device buffers also speak __cuda_array_interface__ and DLPack, so Numba, CuPy and PyTorch "
            "view them without a copy (numba.cuda.as_cuda_array, cupy.asarray, torch.from_dlpack):"
        )
        s.run("cuda_buf.__cuda_array_interface__['shape'], cuda_buf.__dlpack_device__()")

        _heading("The page's wish: a typed array, no DeviceNDArray")
        _say(
            "The page notes that ideally one would define an Arrow array in CPU memory, copy it to CUDA "
            "memory without losing its type information, and call the Numba kernel on it without building "
            "the DeviceNDArray by hand, and that this was not possible yet.  With cuarrow it is:"
        )
        s.run("typed = cuda.to_device(pa.array(np.arange(4, dtype=np.int32)))")
        s.run("typed")
        if skip:
            _say(skip)
        else:
            s.run("increment_by_one[1, 32](typed)")
            s.run("typed.to_host()")
            _say(
                "The kernel ran on the typed device array in place (its __cuda_array_interface__ gives Numba "
                "the dtype, shape and address), and the result came back as an Arrow int32 array."
            )
    except Exception:  # noqa: BLE001
        print()
        print("cuarrow-demo: a step failed unexpectedly", file=sys.stderr)
        return 1

    print()
    print(RULE)
    where = "the host emulation (no GPU)" if emulated else f"GPU 0 ({s.namespace['ctx'].device_name})"
    if skip:
        print(f" Done on {where}; the Numba steps were skipped (see above).")
    else:
        print(f" Done: every step of the page ran on {where}.")
    print(RULE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
