"""The benchmark and probe scripts of bench/ run end to end.

They measure only on the GPU machine, whose minutes are few; a script that
no longer runs there (an argument the binding stopped taking, a renamed
option) costs a call.  Here each runs in a child process on cuarrow's host
emulation of the CUDA driver, at its smallest sizes: the benchmarks'
self-tests (bench/selftest: every case, the checks that catch wrong data)
and every probe once.  What they print as figures is meaningless here and
not looked at; a script must exit 0 and write what it says it writes.

The children always use the emulation (CUARROW_CUDA_DRIVER=emulated), on a
GPU machine too: the CuPy stand-in of bench/selftest/fakes must never meet
a real device.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
FAKES = BENCH / "selftest" / "fakes"

pytestmark = pytest.mark.skipif(not BENCH.is_dir(), reason="bench/ is not beside the tests (an installed copy)")


def run_script(script: str, *args: str, fakes: bool = False, timeout: float = 300) -> str:
    env = dict(os.environ, CUARROW_CUDA_DRIVER="emulated")
    if fakes:  # host-memory CuPy for the raw device-copy references
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FAKES), env.get("PYTHONPATH")]))
    r = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, f"{script} exited {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    return r.stdout + r.stderr


@pytest.mark.parametrize("selftest", ["run.py", "ipc_run.py", "dask_run.py"])
def test_benchmark_selftest_passes(selftest):
    if selftest == "dask_run.py":
        pytest.importorskip("distributed", reason="the Dask benchmark needs distributed")
    out = run_script(f"selftest/{selftest}", timeout=600)
    assert "selftest passed" in out, out


@pytest.mark.parametrize("probe", ["projection_probe.py", "stream_write_probe.py"])
def test_table_probes_write_their_figures(tmp_path, probe):
    out = tmp_path / "probe.json"
    small = ["--table-bytes", "4M", "--reps", "1", "--dir", str(tmp_path), "--out", str(out)]
    if probe == "projection_probe.py" and shutil.which("cc"):
        small.append("--timeline")  # the projection on the driver trace's time line (cc builds the tracer)
    run_script(probe, *small, fakes=probe == "stream_write_probe.py")  # the raw copy of the latter is CuPy's
    result = json.loads(out.read_text())
    if probe == "stream_write_probe.py":
        assert [c["table"] for c in result["cases"]] == ["to_device", "read_feather"]
        for case in result["cases"]:  # the writer's own account of a write, both ways
            for key in ("gather_stats", "driver_stats"):
                assert case[key]["batches"] == case["batches"] and case[key]["wait_seconds"] > 0
    else:
        assert set(result["settings"]) == {
            "default",
            "an allocation a batch",
            "chunk 1 MiB",
            "chunk 2 MiB",
            "chunk 8 MiB",
            "24 threads",
        }
        for name, setting in result["settings"].items():
            assert "error" not in setting, (name, setting.get("error"))
            assert setting["proj2_stats"]["batches"] == result["batches"], name
        assert result["pread_whole"]["median_s"] > 0
        if "timeline" in result:  # every read queued its copies after the reader was open, before it returned
            for row in result["timeline"]["rows"]:
                assert (
                    row["open_us"] < row["first_copy_queued_us"] <= row["last_copy_queued_us"] < row["read_return_us"]
                )


def test_batch_copy_probe_runs_over_the_driver_it_is_given(tmp_path):
    from cuarrow import _cuarrow

    _cuarrow.load_driver()
    if not _cuarrow.driver_is_emulated():
        pytest.skip("the probe is given the emulation's library, which this process did not load")
    out = tmp_path / "b.json"
    run_script(
        "batch_copy_probe.py", "--driver", _cuarrow.driver_path(), "--total-mib", "1", "--reps", "1", "--out", str(out)
    )
    assert json.loads(out.read_text())


def test_small_copy_and_table_probes_run():
    assert "Python call of nothing" in run_script("probe_small.py")
    assert "DeviceTable.to_host()" in run_script("probe_tables.py", "--columns", "4", "--column-bytes", "1K")


def test_staging_sweep_writes_its_table(tmp_path):
    run_script(
        "staging_sweep.py",
        "--out",
        str(tmp_path),
        "--sizes",
        "2",
        "--chunks",
        "1",
        "--threads",
        "1",
        "--budget",
        "0.05",
        "--no-memcpy",
    )
    assert (tmp_path / "sweep.json").is_file() and (tmp_path / "sweep.txt").is_file()


def test_share_benchmark_and_write_scaling_probe_run(tmp_path):
    run_script("share_bench.py", "--quick", "--out", str(tmp_path / "share"))
    assert any((tmp_path / "share").iterdir())
    run_script("write_scaling_probe.py", "--gib", "0.01", str(tmp_path))


def test_decode_threads_probe_reads_every_file_at_every_thread_count(tmp_path):
    out = tmp_path / "decode.json"
    small = ["--table-bytes", "8M", "--ceiling-threads", "1,2", "--threads", "2,3", "--reps", "1"]
    run_script("decode_threads_probe.py", *small, "--dir", str(tmp_path), "--out", str(out))
    result = json.loads(out.read_text())
    assert set(result["reads"]) == {"zstd", "lz4", "zstd-cuarrow", "lz4-cuarrow"}
    for rows in result["reads"].values():
        assert set(rows) == {"2", "3"} and all(r["gb_per_s"] > 0 for r in rows.values())
    for codec in ("zstd", "lz4"):
        assert set(result["ceiling"][codec]["gb_per_s"]) == {"1", "2"}
    assert not list(tmp_path.glob("decode-threads-*")), "the probe's files are removed"


def test_readahead_probe_times_every_loop_with_and_without_work(tmp_path):
    out = tmp_path / "readahead.json"
    small = ["--table-bytes", "24M", "--step-gbps", "40", "--readahead-bytes", "1M", "--reps", "1"]
    run_script("readahead_probe.py", *small, "--dir", str(tmp_path), "--out", str(out))
    result = json.loads(out.read_text())
    assert result["emulated"] and result["batches"] > 1
    # pyarrow's, pyarrow's prefetched, cuarrow's without, with and with 1 MiB
    # runs; over a stream, pyarrow's and cuarrow's without and with read-ahead
    assert len(result["loops"]) == 8
    assert "pyarrow memory_map + cuarrow prefetch_to_device" in result["loops"]
    assert "stream: cuarrow for b in open_stream(path)" in result["loops"]
    for row in result["loops"].values():
        assert row["read_alone_s"] > 0 and set(row["with_work"]) == {"40.0"}
    assert not list(tmp_path.glob("readahead-probe-*")), "the probe's files are removed"


def test_projection_probe_runs_another_build_beside_this_one(tmp_path):
    """--against: the same settings with another cuarrow (here this one's
    own site folder) alternately, round by round, on one file."""
    import cuarrow

    out = tmp_path / "ab.json"
    site = Path(cuarrow.__file__).resolve().parent.parent
    run_script(
        "projection_probe.py",
        *("--table-bytes", "4M", "--reps", "1", "--dir", str(tmp_path), "--out", str(out)),
        *("--settings", "default", "--against", str(site), "--rounds", "2"),
    )
    result = json.loads(out.read_text())
    assert result["against"] == str(site)
    assert [(r["who"], r["setting"]) for r in result["rounds"]] == [("this", "default"), ("against", "default")] * 2
    assert all(r["whole_s"] > 0 and r["proj2_s"] > 0 for r in result["rounds"])


def _ipc_bench():
    sys.path.insert(0, str(BENCH))
    try:
        import ipc_bench
    finally:
        sys.path.remove(str(BENCH))
    return ipc_bench


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_decode_ceiling_decodes_every_frame_from_cpp_and_python_threads(tmp_path, monkeypatch, codec):
    """ipc_bench's host decode ceiling: bench/decode_ceiling.cpp (compiled
    here) and its Python fallback both leave every buffer's bytes in place,
    and the C++ one names a corrupt frame."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler here to build bench/decode_ceiling.cpp")
    pa = pytest.importorskip("pyarrow")
    np = pytest.importorskip("numpy")
    so = tmp_path / "libcuarrow_decode_ceiling.so"
    r = subprocess.run(
        [cxx, "-std=c++20", "-O1", "-shared", "-fPIC", str(BENCH / "decode_ceiling.cpp"), "-o", str(so)]
        + ["-llz4", "-lzstd", "-pthread"],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0 and ("lz4frame.h" in r.stderr or "zstd.h" in r.stderr):
        pytest.skip(f"the codec headers are not installed here: {r.stderr.strip()[:200]}")
    assert r.returncode == 0, r.stderr
    ipc_bench = _ipc_bench()
    rng = np.random.default_rng(3)
    table = pa.table(
        {
            "i": pa.array(rng.integers(0, 1000, 200_000)),
            "s": pa.array([f"v{k % 977}" for k in range(200_000)]),
            "n": pa.array([None if k % 7 == 0 else k * 0.5 for k in range(200_000)]),
        }
    )
    for how, library in (("C++ threads", so), ("Python threads", None)):
        monkeypatch.setattr(ipc_bench, "decode_ceiling_library", lambda lib=library: lib)
        decode = ipc_bench.ThreadedDecode(table, codec, 3)
        try:
            assert decode.how.startswith(how)
            for _, out in decode.frames:
                out.fill(0)
            assert decode() == decode.nbytes == sum(o.size for _, o in decode.frames)
            buffers = [b for c in table.columns for a in c.chunks for b in a.buffers() if b is not None and b.size]
            assert len(buffers) == len(decode.frames) >= 5
            for b, (_, out) in zip(buffers, decode.frames):
                assert out.tobytes() == b.to_pybytes()
            decode.set_threads(2)  # the probe's curve: the same frames on another count
            for _, out in decode.frames:
                out.fill(0)
            assert decode() == decode.nbytes
            for b, (_, out) in zip(buffers, decode.frames):
                assert out.tobytes() == b.to_pybytes()
        finally:
            decode.close()
    monkeypatch.setattr(ipc_bench, "decode_ceiling_library", lambda: so)
    decode = ipc_bench.ThreadedDecode(table, codec, 2)
    bad = pa.py_buffer(bytes(decode.frames[2][0])[: decode.frames[2][0].size // 2])  # a truncated frame
    decode.args[0][2], decode.args[1][2] = bad.address, bad.size
    with pytest.raises(RuntimeError, match=f"host {codec} decode: frame 2: "):
        decode()
