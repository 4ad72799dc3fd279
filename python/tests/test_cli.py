"""The ``cuarrow`` command (python -m cuarrow): info, bench --quick, demo,
its errors, and cuarrow's one version (the C++ header, CMake, the wheel)."""

import importlib.metadata
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
from conftest import EMULATED, NUM_DEVICES

import cuarrow
from cuarrow import _cuarrow as _lib
from cuarrow import cuda

REPO = pathlib.Path(__file__).resolve().parents[2]
HEADER = REPO / "include" / "cuarrow" / "version.hpp"


def _env(**changes):
    env = dict(os.environ)
    if EMULATED:  # the suite may have chosen the emulation without the variable
        env["CUARROW_CUDA_DRIVER"] = "emulated"
        env.setdefault("CUARROW_EMULATED_DEVICES", "2")
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_cli(*args, timeout=120, **env):
    return subprocess.run(
        [sys.executable, "-m", "cuarrow", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(**env),
        cwd="/",  # the installed package, not a source tree's
    )


# ---------------------------------------------------------------- info


def test_info_json_describes_the_driver_and_every_device():
    r = run_cli("info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert {"cuarrow_version", "driver", "devices", "transfer_options", "pinned_pool", "gds"} <= set(info)
    assert info["cuarrow_version"] == cuarrow.__version__
    assert info["driver"]["emulated"] is EMULATED
    assert info["driver"]["path"] == cuda.driver_info()["path"]
    assert re.fullmatch(r"\d+\.\d+", info["driver"]["version"])
    assert len(info["devices"]) == NUM_DEVICES
    for ordinal, device in enumerate(info["devices"]):
        assert device["ordinal"] == ordinal
        assert device["name"] == cuda.Context(ordinal).device_name
        assert device["total_memory"] == _lib.get_device_properties(ordinal)["total_memory"] > 0
        for path in ("cuda_ipc", "pool_ipc"):
            assert isinstance(device[path]["usable"], bool)
            # A path that is not usable says why.
            assert device[path]["usable"] or device[path]["reason"]
        if EMULATED:
            assert device["pcie"] is None  # an emulated device has no link
    assert set(info["transfer_options"]) == set(cuda.transfer_options())
    assert {"pinned_bytes", "in_use_bytes"} <= set(info["pinned_pool"])
    gds = info["gds"]
    assert gds["mode"] in ("off", "auto", "on")
    assert gds["available"] or gds["reason"]
    nvcomp = info["nvcomp"]
    assert nvcomp["mode"] in ("off", "auto")
    assert nvcomp["available"] or nvcomp["reason"]


def test_info_json_follows_the_environment():
    r = run_cli("info", "--json", CUARROW_GDS="off", CUARROW_NVCOMP="off", CUARROW_EMULATED_DEVICES="3")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["gds"]["mode"] == "off" and not info["gds"]["available"]
    assert info["nvcomp"]["mode"] == "off" and "CUARROW_NVCOMP=off" in info["nvcomp"]["reason"]
    if EMULATED:
        assert len(info["devices"]) == 3


@pytest.mark.skipif(not EMULATED, reason="what the host emulation reports (this run has a real GPU)")
def test_info_on_the_emulation_says_so_plainly():
    r = run_cli("info")
    assert r.returncode == 0, r.stderr
    assert "HOST EMULATION" in r.stdout
    lines = r.stdout.splitlines()
    assert any(line.startswith("device 1 ") and "cuarrow emulated device 1" in line for line in lines)
    # Aligned: every value starts in the same column.
    columns = {re.match(r"\s*\S+(?: \S+)*\s{2,}", line).end() for line in lines}
    assert len(columns) == 1, r.stdout
    for key in ("PCIe", "CUDA IPC", "pool IPC", "pinned pool", "staging", "GPUDirect Storage"):
        assert any(line.strip().startswith(key) for line in lines), key


@pytest.mark.skipif(EMULATED, reason="needs a real GPU: the emulation has no PCIe link")
def test_info_reports_the_pcie_link_of_a_gpu():
    r = run_cli("info", "--json")
    info = json.loads(r.stdout)
    for device in info["devices"]:
        if device["pcie"] is not None:  # None where sysfs does not show the device (containers)
            assert device["pcie"]["width"] >= 1


# ---------------------------------------------------------------- bench


def test_bench_quick_measures_every_copy_within_its_time():
    r = run_cli("bench", "--quick", "--seconds", "0.5", "--size", "64K", timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for copy in ("H2D pageable", "H2D pinned", "D2H pageable", "D2H pinned"):
        rows = [line for line in out.splitlines() if line.startswith(copy)]
        assert len(rows) == 2, out  # 4 bytes and --size
        assert "64 KiB" in rows[1] and "GB/s" in rows[1]
    # Not a terminal: one plain progress line per case, no bar.
    assert "\r" not in r.stderr
    assert re.search(r"^bench: 1/\d+ H2D pageable 4 B \(cuarrow\)$", r.stderr, re.M), r.stderr
    if EMULATED:
        assert "meaningless" in out
        assert "raw reference unavailable" in out


def test_bench_quick_draws_a_bar_on_a_terminal():
    pty = pytest.importorskip("pty", reason="needs a pseudo-terminal (POSIX)")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cuarrow", "bench", "--quick", "--seconds", "0.2", "--size", "4K"],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=_env(),
        cwd="/",
    )
    os.close(slave)
    out, _ = proc.communicate(timeout=60)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    err = b"".join(chunks).decode()
    assert proc.returncode == 0, err
    # The bar counts to the number of measurements (cuarrow's, and the raw
    # copies' where a GPU library provides them) and ends full.
    steps = re.findall(r"\] (\d+)/(\d+) ", err)
    assert steps and steps[-1][0] == steps[-1][1] and int(steps[-1][1]) >= 8, err
    assert "\r[" in err and "bench: 1/" not in err
    assert b"D2H pinned" in out


def test_bench_rejects_a_bad_size_in_one_line():
    r = run_cli("bench", "--quick", "--size", "lots")
    assert r.returncode == 2
    assert "not a size" in r.stderr and "Traceback" not in r.stderr


def test_bench_without_a_source_tree_says_where_the_full_bench_is():
    package_tree = pathlib.Path(cuarrow.__file__).resolve().parents[2]
    if (package_tree / "bench" / "bench.py").is_file():
        pytest.skip("cuarrow runs from a source tree here: `cuarrow bench` would run the full benchmark")
    r = run_cli("bench")
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "bench/bench.py" in r.stderr


# ---------------------------------------------------------------- demo, help


def test_demo_runs():
    r = run_cli("demo", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "CUDA Integration" in r.stdout


@pytest.mark.parametrize("args", [(), ("info",), ("bench",), ("demo",)])
def test_help(args):
    r = run_cli(*args, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: ")


def test_no_command_prints_help_and_fails():
    r = run_cli()
    assert r.returncode == 2
    assert "info" in r.stdout and "bench" in r.stdout and "demo" in r.stdout


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("command", [("info",), ("info", "--json"), ("bench", "--quick", "--seconds", "0.1")])
def test_missing_driver_is_one_line(tmp_path, command):
    missing = str(tmp_path / "libcuda-missing.so")
    r = run_cli(*command, CUARROW_CUDA_DRIVER=missing)
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("cuarrow: no usable CUDA driver:") and missing in r.stderr


def test_no_device_is_one_line():
    r = run_cli("info", CUARROW_CUDA_DRIVER="emulated", CUARROW_EMULATED_DEVICES="0")
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("cuarrow: no CUDA device")


# ---------------------------------------------------------------- version


def _header_version():
    if not HEADER.is_file():
        pytest.skip("needs cuarrow's source tree (include/cuarrow/version.hpp)")
    text = HEADER.read_text()
    macros = dict(re.findall(r"^#define CUARROW_VERSION_(\w+) (\S+)$", text, re.M))
    return text, macros


def test_version_macros_agree():
    _, macros = _header_version()
    assert macros["STRING"] == '"{MAJOR}.{MINOR}.{PATCH}"'.format(**macros)


def test_binding_version_is_the_header_macro():
    # cuarrow.__version__ is CUARROW_VERSION_STRING compiled into the binding.
    _, macros = _header_version()
    assert cuarrow.__version__ == macros["STRING"].strip('"')


def test_pyproject_reads_its_version_from_the_header():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")
    text, macros = _header_version()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    provider = pyproject["tool"]["scikit-build"]["metadata"]["version"]
    assert provider["input"] == "include/cuarrow/version.hpp"
    match = re.search(provider["regex"], text)
    assert match and match.group("value") == macros["STRING"].strip('"') == cuarrow.__version__


def test_installed_metadata_version_is_the_binding_version():
    try:
        installed = importlib.metadata.version("cuarrow")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("cuarrow is not installed as a distribution here (no metadata)")
    assert installed == cuarrow.__version__


def test_cmake_project_version_is_the_header_macro():
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("needs cmake")
    _header_version()
    r = subprocess.run(
        [cmake, "-P", str(REPO / "cmake" / "cuarrowVersion.cmake")], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == cuarrow.__version__


def test_console_scripts_are_installed():
    scripts = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="console_scripts")}
    if "cuarrow-demo" not in scripts:
        pytest.skip("cuarrow is not installed as a distribution here (no entry points)")
    assert scripts["cuarrow"] == "cuarrow._cli:main"
    assert scripts["cuarrow-demo"] == "cuarrow.demo:main"


def test_version_option():
    r = run_cli("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"cuarrow {cuarrow.__version__}"
