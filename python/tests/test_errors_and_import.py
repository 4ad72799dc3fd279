"""Importing without a GPU, the first device call's error, the exception
classes, and what ships with the package (stubs, emulation)."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import cuarrow
from cuarrow import cuda


def run_python(code, **env):
    environ = dict(os.environ)
    environ.pop("CUARROW_CUDA_DRIVER", None)
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=environ, capture_output=True, text=True, timeout=120
    )


def test_import_without_driver_then_clear_error():
    result = run_python(
        """
        import cuarrow, cuarrow.cuda as cuda          # no driver needed to import
        try:
            cuda.Context(0)
        except cuda.CudaDriverError as e:
            assert isinstance(e, OSError) and e.code is None
            print("first call:", e)
        try:
            cuda.Context.get_num_devices()
        except OSError as e:
            print("again:", type(e).__name__)
        cuda.use_emulation()                          # still possible after the failed load
        print("emulated:", cuda.is_emulated(), cuda.Context(0).device_number)
        """,
        CUARROW_CUDA_DRIVER="/nonexistent/libcuda.so.1",
    )
    assert result.returncode == 0, result.stderr
    assert "first call: no CUDA driver found (/nonexistent/libcuda.so.1)" in result.stdout
    assert "CUARROW_CUDA_DRIVER=emulated" in result.stdout  # the message says how to go on
    assert "again: CudaDriverError" in result.stdout
    assert "emulated: True 0" in result.stdout


def test_no_device_error():
    result = run_python(
        """
        from cuarrow import cuda
        print("devices:", cuda.Context.get_num_devices())
        try:
            cuda.Context(0)
        except cuda.CudaDriverError as e:
            print("error:", e)
        try:
            cuda.new_host_buffer(8)
        except cuda.CudaDriverError as e:
            print("error:", e)
        """,
        CUARROW_CUDA_DRIVER="emulated",
        CUARROW_EMULATED_DEVICES="0",
    )
    assert result.returncode == 0, result.stderr
    assert "devices: 0" in result.stdout
    assert result.stdout.count("error: no CUDA device found") == 2


def test_use_emulation_after_real_driver_refused():
    result = run_python(
        """
        from cuarrow import cuda
        cuda.use_emulation(devices=1)
        cuda.Context(0)
        cuda.use_emulation()          # the same driver again: fine
        from cuarrow import _cuarrow
        try:
            _cuarrow.select_driver("")
        except RuntimeError as e:
            print("refused:", e)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout and "already loaded" in result.stdout


def test_cuda_error_carries_code_and_name(ctx):
    with pytest.raises(cuda.CudaError) as info:
        ctx.get_device_address(12345)
    e = info.value
    assert isinstance(e, OSError)
    assert isinstance(e.code, int) and e.code != 0
    assert e.name.startswith("CUDA_ERROR_")
    assert e.operation.startswith("cuPointerGetAttribute")
    assert str(e).startswith(f"Cuda error {e.code}: ")
    assert e.name in str(e)


def test_out_of_memory(ctx):
    with pytest.raises(cuda.CudaOutOfMemoryError) as info:
        ctx.new_buffer(1 << 50)
    e = info.value
    assert isinstance(e, MemoryError)
    assert isinstance(e, cuda.CudaError) and isinstance(e, OSError)
    assert e.code == 2 and e.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert str(1 << 50) in str(e)
    # Nothing leaked, and the context still works.
    assert ctx.new_buffer(16).size == 16
    with pytest.raises(MemoryError):
        cuda.new_host_buffer(1 << 50)


def test_exception_classes():
    assert issubclass(cuda.CudaError, OSError)
    assert issubclass(cuda.CudaOutOfMemoryError, cuda.CudaError)
    assert issubclass(cuda.CudaOutOfMemoryError, MemoryError)
    assert issubclass(cuda.CudaDriverError, cuda.CudaError)
    e = cuda.CudaError("message", 1, "CUDA_ERROR_INVALID_VALUE", "cuMemAlloc")
    assert (e.code, e.name, e.operation, str(e)) == (1, "CUDA_ERROR_INVALID_VALUE", "cuMemAlloc", "message")


def test_invalid_arguments_are_value_errors(ctx):
    import pyarrow as pa

    with pytest.raises(pa.ArrowInvalid):  # a ValueError, as pyarrow's checks
        ctx.new_buffer(-5)
    with pytest.raises(ValueError):
        ctx.new_buffer(-5)


def test_package_ships_stubs_and_emulation():
    package = pathlib.Path(cuarrow.__file__).parent
    from cuarrow import _cuarrow

    extension_dir = pathlib.Path(_cuarrow.__file__).parent
    assert (package / "py.typed").exists()
    stubs = list(extension_dir.glob("_cuarrow.pyi")) + list(package.glob("_cuarrow.pyi"))
    assert stubs, "the generated _cuarrow.pyi stub must ship with the package"
    text = stubs[0].read_text()
    assert "class Buffer" in text and "def copy_to_host" in text
    assert (extension_dir / "libcuarrow_cuda_emulation.so").exists()


def test_version():
    assert cuarrow.__version__ == "0.1.0"


def test_public_names_match_pyarrow_cuda():
    for name in [
        "Context",
        "CudaBuffer",
        "HostBuffer",
        "BufferReader",
        "BufferWriter",
        "new_host_buffer",
        "IpcMemHandle",
        "serialize_record_batch",
        "read_message",
        "read_record_batch",
    ]:
        assert hasattr(cuda, name), name
    for name in [
        "device_number",
        "handle",
        "get_num_devices",
        "synchronize",
        "bytes_allocated",
        "new_buffer",
        "foreign_buffer",
        "buffer_from_data",
        "buffer_from_object",
        "get_device_address",
        "to_numba",
        "from_numba",
    ]:
        assert hasattr(cuda.Context, name), name
    for name in [
        "size",
        "address",
        "context",
        "is_mutable",
        "parent",
        "slice",
        "copy_to_host",
        "copy_from_host",
        "copy_from_device",
        "to_pybytes",
        "equals",
        "from_buffer",
        "from_numba",
        "to_numba",
        "device_type",
        "is_cpu",
    ]:
        assert hasattr(cuda.CudaBuffer, name), name


def test_ipc_names_match_pyarrow_cuda():
    assert hasattr(cuda.Context, "open_ipc_buffer")
    assert hasattr(cuda.CudaBuffer, "export_for_ipc")
    assert hasattr(cuda.IpcMemHandle, "from_buffer")
    assert hasattr(cuda.IpcMemHandle, "serialize")


def test_from_buffer(ctx):
    import pyarrow as pa

    buf = ctx.new_buffer(8)
    assert cuda.CudaBuffer.from_buffer(buf) is buf
    with pytest.raises(pa.ArrowTypeError, match="buffer is not backed by a CudaBuffer"):
        cuda.CudaBuffer.from_buffer(pa.py_buffer(b"abc"))
