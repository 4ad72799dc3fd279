"""The "CUDA Integration" page as an executable doctest (walkthrough.md),
and the demo that walks through it."""

import doctest
import os
import pathlib
import subprocess
import sys

import pytest
from conftest import EMULATED

PAGE = pathlib.Path(__file__).with_name("walkthrough.md")
NUMBA_HEADING = "## Numba integration"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


class _Checker(doctest.OutputChecker):
    """`<address>` stands for any device address (an integer)."""

    def check_output(self, want, got, optionflags):
        if want.strip() == "<address>":
            return got.strip().isdigit() and int(got) > 0
        return super().check_output(want, got, optionflags)


def _run_doctest(text, name):
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, name, str(PAGE), 0)
    assert test.examples, "no examples found"
    runner = doctest.DocTestRunner(checker=_Checker(), optionflags=FLAGS)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed (see the output above)"
    return result


def test_page_without_numba():
    """Contexts, buffers, host copies and the warning: runs everywhere."""
    text = PAGE.read_text()
    head = text.split(NUMBA_HEADING)[0]
    result = _run_doctest(head, "walkthrough (CUDA contexts and buffers)")
    assert result.attempted >= 15


@pytest.mark.gpu
def test_whole_page():
    """The whole page, Numba kernel included: needs a real GPU and Numba."""
    pytest.importorskip("numba.cuda")
    result = _run_doctest(PAGE.read_text(), "walkthrough (whole page)")
    assert result.attempted >= 25


def _demo(*args):
    env = dict(os.environ)
    return subprocess.run(
        [sys.executable, "-m", "cuarrow.demo", *args], env=env, capture_output=True, text=True, timeout=300
    )


def test_demo_runs():
    result = _demo()
    assert result.returncode == 0, result.stdout + result.stderr
    out = " ".join(result.stdout.split())  # the prose is wrapped
    assert ">>> ctx = cuda.Context(0)" in out
    assert "<class 'cuarrow.cuda.CudaBuffer'>" in out
    assert "<class 'pyarrow.lib.Buffer'>" in out
    assert "array([0, 1, 2, 3], dtype=int32)" in out
    assert "TypeError: Argument 'other' has incorrect type" in out
    assert "BufferError: buffer protocol for device buffer not supported" in out
    assert ">>> typed = cuda.to_device(pa.array(np.arange(4, dtype=np.int32)))" in out
    assert "<cuarrow.cuda.DeviceArray type=int32 length=4 null_count=0 device=cuda:0> [0,1,2,3]" in out
    if EMULATED:
        assert "EMULATED: no GPU is used" in out
        assert "Skipping this step: it runs a Numba CUDA kernel" in out
        assert "host emulation of the CUDA driver cannot run GPU kernels" in out
    else:
        assert "EMULATED" not in out
        if "Numba is not installed" not in out:
            assert "array([1, 2, 3, 4], dtype=int32)" in out
            assert "array([10, 11, 12, 13], dtype=int32)" in out
            assert ">>> increment_by_one[1, 32](typed)" in out
            assert "<pyarrow.lib.Int32Array object at" in out and "[ 1, 2, 3, 4 ]" in out
            assert "every step of the page ran on GPU 0" in out


def test_demo_emulated_flag():
    if not EMULATED:
        pytest.skip("this process already uses the real driver; the flag is tested in a fresh process below")
    result = _demo("--emulated")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "EMULATED: no GPU is used" in result.stdout


def test_demo_without_any_gpu_or_driver_selects_emulation():
    env = dict(os.environ)
    env.pop("CUARROW_CUDA_DRIVER", None)
    env["PATH"] = env.get("PATH", "")
    # Make the real driver impossible to find: the demo must fall back to
    # the emulation by itself and say why.
    code = (
        "import ctypes, sys\n"
        "from cuarrow import cuda\n"
        "from cuarrow import _driver\n"
        "_driver._probe_real_gpus = lambda: (0, 'no CUDA driver is installed (test)')\n"
        "from cuarrow import demo\n"
        "sys.exit(demo.main([]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "EMULATED: no GPU is used" in result.stdout
    assert "Why: no CUDA driver is installed (test)." in result.stdout
    assert "Skipping this step" in result.stdout


def test_console_script_installed():
    import importlib.metadata

    eps = importlib.metadata.entry_points()
    scripts = eps.select(group="console_scripts") if hasattr(eps, "select") else eps.get("console_scripts", [])
    assert any(ep.name == "cuarrow-demo" and ep.value == "cuarrow.demo:main" for ep in scripts)
