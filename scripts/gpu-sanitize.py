#!/usr/bin/env python3
"""compute-sanitizer over the GPU suite, on the GPU machine (scripts/gpu-suite.sh sanitize).

Runs every (tool, target) pair -- tools memcheck (with leak checking),
racecheck, synccheck, initcheck; targets the C++ suites against the real
driver (build/gpu/bin, from `gpu-suite.sh prepare`), the CUDA kernel test and
the Python suite -- several at a time, each under a time limit, and writes a
summary: per pair the tests' own result, the sanitizer's error count, and
what the errors are, split into

- hazards: memory access errors, races, synchronization and initialization
  errors, leaks -- any of these is a failure;
- CUDA API errors: calls that returned an error.  Some are deliberate (a test
  asking for more memory than the device has, a probe the library makes of a
  pointer the driver does not know); every distinct one is listed with its
  count and classified by the table DELIBERATE below, and an unlisted one is a
  failure.

Output: <out>/sanitize.md (the summary), <out>/sanitize-logs.tar.gz (every log).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

TOOLS = {
    "memcheck": ["--tool", "memcheck", "--leak-check", "full"],
    "racecheck": ["--tool", "racecheck"],
    "synccheck": ["--tool", "synccheck"],
    "initcheck": ["--tool", "initcheck"],
}

# CUDA API errors the suites cause on purpose, by (error name, API call):
# why each is expected.  Anything else is a finding.
DELIBERATE = {
    ("CUDA_ERROR_OUT_OF_MEMORY", "cuMemAlloc"): "tests that allocate more than the device has (out_of_memory is typed)",
    ("CUDA_ERROR_OUT_OF_MEMORY", "cuMemAllocAsync"): "tests that allocate more than the device has",
    ("CUDA_ERROR_OUT_OF_MEMORY", "cuMemAlloc_v2"): "tests that allocate more than the device has",
    ("CUDA_ERROR_INVALID_VALUE", "cuPointerGetAttribute"): "the copy engine asks whether host memory is pinned; "
    "for ordinary (pageable) memory the driver answers INVALID_VALUE",
    ("CUDA_ERROR_INVALID_VALUE", "cuIpcGetMemHandle"): "a GPU-only test shows the driver refusing IPC of pool memory",
    ("CUDA_ERROR_INVALID_CONTEXT", "cuIpcOpenMemHandle"): "a GPU-only test shows the driver refusing to open a "
    "handle in its own process",
    ("CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "cuMemHostUnregister"): "ending a registration that went with a "
    "destroyed context (the lifetime test)",
    ("CUDA_ERROR_INVALID_HANDLE", "cuIpcOpenMemHandle"): "tests opening the handle of a process that has exited "
    "(Ipc.HandleOfAProcessThatExitedIsACudaError, test_handle_of_an_exited_process_is_a_CudaError)",
    ("CUDA_ERROR_INVALID_HANDLE", "cuEventElapsedTime"): "Event.ElapsedTimeNeedsTimingEvents: the driver refuses "
    "events made without timing",
}

# Calls made by other libraries in the same process (numba-cuda's and
# cuda.bindings' entry-point lookups, PyTorch, CuPy): an API error whose
# backtrace holds no cuarrow frame is listed as theirs, not counted.
OURS = re.compile(r"libcuarrow|_cuarrow|cuarrow::|cuarrow/|cuarrow_")

# initcheck cannot see writes made by another process: device memory a child
# opens through CUDA IPC was written by its parent, so the child's reads of
# it are reported as uninitialized.  Such reports (backtrace inside the IPC
# child of a test) are listed apart, not counted.
CROSS_PROCESS = re.compile(r"ipc_child|cuarrow_child_\w*ipc")

# Hazards a test causes on purpose, by a frame of their backtrace.
DELIBERATE_HAZARDS = {
    "cuarrow_child_context_destroyed_under_results": "ArrowAdversarial.HostResultsOutliveAContextDestroyedUnderThem "
    "destroys the primary context under live pinned results (a lifetime test): their registrations end with it",
}


def base_name(call: str) -> str:
    """cuIpcOpenMemHandle_v2 -> cuIpcOpenMemHandle (the table uses the base names)."""
    return re.sub(r"_v\d+$", "", call)


API_ERROR = re.compile(r"Program hit (CUDA_ERROR_\w+) \(error \d+\) due to \"[^\"]*\" on CUDA API call to (\w+)")
# "ERROR SUMMARY: 12 errors" (one per process); not "... errors were not printed".
SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?\s*$", re.M)
HAZARD_HINTS = (
    "Invalid __global__",
    "Invalid __shared__",
    "Invalid __local__",
    "Uninitialized __global__ memory read",
    "Race reported",
    "Barrier error",
    "Leaked",
    "bytes leaked",
    "Host API memory access error",
    "Unused memory",
    "Divergent",
    "Address ",
)


def find_sanitizer() -> str:
    for candidate in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer"):
        if candidate and Path(candidate).exists():
            return candidate
    sys.exit("compute-sanitizer not found (looked on PATH and in /usr/local/cuda/bin)")


def targets(args: argparse.Namespace) -> dict:
    binaries = Path(args.bin)
    out = {}
    for name, exe in [
        ("cpp-suite", "cuarrow_test"),
        ("cpp-gpu-only", "cuarrow_gpu_test"),
        ("cpp-arrow", "cuarrow_arrow_test"),
        ("cpp-arrow-batching", "cuarrow_arrow_batching_test"),
        ("cuda-kernels", "cuarrow_arrow_kernel_test"),
    ]:
        if (binaries / exe).exists():
            out[name] = [str(binaries / exe)]
    # The soak has its own run (gpu-suite.sh soak-start); under a sanitizer it
    # would only be slow.
    out["python-suite"] = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "python/tests",
        "--ignore=python/tests/test_soak.py",
    ]
    return out


def blocks(text: str):
    """The sanitizer's reports, one list of lines each (a report starts with a
    line of its own and runs to the next blank '=========' line)."""
    block = []
    for line in text.splitlines():
        if not line.startswith("========="):
            continue
        body = line[len("=========") :].strip()
        if body == "COMPUTE-SANITIZER":  # the banner, not a report
            continue
        if not body:
            if block:
                yield block
            block = []
            continue
        block.append(body)
    if block:
        yield block


def classify(text: str, tool: str = "") -> dict:
    api = Counter()
    third_party = Counter()
    hazards = []
    cross_process = []
    deliberate = []
    for block in blocks(text):
        head = block[0]
        whole = "\n".join(block)
        m = API_ERROR.search("========= " + head)
        if m:
            key = (m.group(1), base_name(m.group(2)))
            (api if OURS.search(whole) else third_party)[key] += 1
            continue
        if head.startswith("ERROR SUMMARY") or not any(h in head for h in HAZARD_HINTS):
            continue
        if head.startswith("LEAK SUMMARY: 0 bytes"):
            continue
        why = next((w for frame, w in DELIBERATE_HAZARDS.items() if frame in whole), None)
        if why:
            deliberate.append(head)
            continue
        if head.startswith("LEAK SUMMARY") and any(d in text for d in DELIBERATE_HAZARDS):
            continue  # the summary of leaks listed one by one above
        if tool == "initcheck" and CROSS_PROCESS.search(whole):
            cross_process.append(head)
        else:
            hazards.append(head)
    m = SUMMARY.findall(text)
    classified = len(hazards) + len(cross_process) + len(deliberate) + sum(api.values()) + sum(third_party.values())
    summary = sum(int(n) for n in m) if m else None
    return {
        "api": api,
        "third_party": third_party,
        "hazards": hazards,
        "cross_process": cross_process,
        "deliberate": deliberate,
        "summary": summary,
        # Errors the sanitizer counted but no report above accounts for
        # (every report is printed, every process logs to its own file,
        # so this must be 0; anything else is a finding or a gap in this
        # script).
        "unexplained": (summary - classified) if summary is not None else 0,
    }


def run_one(sanitizer: str, tool: str, name: str, cmd: list, logdir: Path, timeout: int) -> dict:
    log = logdir / f"{tool}-{name}.log"
    options = list(TOOLS[tool])
    if tool == "memcheck" and name == "python-suite":
        # Python does not free the objects still alive at interpreter exit
        # (module globals, pytest's reports), so every buffer they hold is a
        # "leak" to memcheck.  Device memory is accounted exactly by the soak
        # instead (device bytes and pool bytes equal after warm-up and at the end).
        options = [o for o in options if o not in ("--leak-check", "full")]
    # Every report printed (0: no limit) and every process -- the IPC
    # children tests start, whose stdout the tests capture -- logging to a
    # file of its own, so that each error the sanitizer counts is classified.
    for old in logdir.glob(f"{tool}-{name}.*.san"):
        old.unlink()
    full = [
        sanitizer,
        *options,
        "--target-processes",
        "all",
        "--print-limit",
        "0",
        "--log-file",
        str(logdir / f"{tool}-{name}.%p.san"),
        *cmd,
    ]
    t0 = time.time()
    timed_out = False
    with open(log, "w") as f:
        f.write("$ " + " ".join(full) + "\n")
        f.flush()
        try:
            rc = subprocess.run(full, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc, timed_out = None, True
    text = log.read_text(errors="replace")
    reports = "\n".join(f.read_text(errors="replace") for f in sorted(logdir.glob(f"{tool}-{name}.*.san")))
    result = classify(reports, tool)
    tail = [line for line in text.splitlines() if re.search(r"passed|failed|PASSED|FAILED", line)]
    result.update(
        tool=tool,
        target=name,
        rc=rc,
        timed_out=timed_out,
        seconds=time.time() - t0,
        tests=tail[-1].strip() if tail else "",
    )
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "build/gpu-out"))
    ap.add_argument("--bin", default="build/gpu/bin")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--targets", default="", help="comma-separated subset of the targets (default: all)")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=480, help="seconds for one (tool, target) run")
    ap.add_argument(
        "--memcheck-python-ignore",
        default="test_gpu_interop.py,test_numba.py,test_threads.py",
        help="Python test files left out under memcheck (JIT compilers and many threads make "
        "memcheck take longer than one GPU-machine call; racecheck, synccheck and initcheck run them)",
    )
    args = ap.parse_args()

    sanitizer = find_sanitizer()
    out = Path(args.out)
    logdir = out / "sanitize-logs"
    logdir.mkdir(parents=True, exist_ok=True)
    all_targets = targets(args)
    wanted = [t for t in args.targets.split(",") if t] or list(all_targets)
    jobs = [(tool, name) for tool in args.tools.split(",") for name in wanted if name in all_targets]
    # The longest first: the Python suite under each tool.
    jobs.sort(key=lambda j: j[1] != "python-suite")
    env_note = os.environ.get("CUARROW_CUDA_DRIVER", "")
    if env_note:
        print(f"note: CUARROW_CUDA_DRIVER={env_note} is set; the sanitizer needs the real driver", flush=True)

    results = []
    with cf.ThreadPoolExecutor(max_workers=args.jobs) as pool:

        def command(tool: str, name: str) -> list:
            cmd = list(all_targets[name])
            if tool == "memcheck" and name == "python-suite":
                cmd += [f"--ignore=python/tests/{f}" for f in args.memcheck_python_ignore.split(",") if f]
            return cmd

        futures = [
            pool.submit(run_one, sanitizer, tool, name, command(tool, name), logdir, args.timeout)
            for tool, name in jobs
        ]
        for f in cf.as_completed(futures):
            r = f.result()
            results.append(r)
            print(
                f"[{r['tool']:<9}] {r['target']:<20} rc={r['rc']} errors={r['summary']} "
                f"hazards={len(r['hazards'])} {r['seconds']:.0f}s {r['tests']}",
                flush=True,
            )

    results.sort(key=lambda r: (list(TOOLS).index(r["tool"]), r["target"]))
    api_total = Counter()
    third_total = Counter()
    version = subprocess.run([sanitizer, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    lines = [
        "# compute-sanitizer over the GPU suite",
        "",
        f"- sanitizer: {version}",
        f"- date: {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}",
        "",
        "| tool | target | tests | sanitizer errors | hazards | CUDA API errors (deliberate / other) "
        "| unexplained | time |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    failed = False
    for r in results:
        deliberate = sum(n for k, n in r["api"].items() if k in DELIBERATE)
        other = sum(n for k, n in r["api"].items() if k not in DELIBERATE)
        api_total.update(r["api"])
        third_total.update(r["third_party"])
        # The suite's own result counts too (the sanitizer passes its exit code on).
        ok = not r["timed_out"] and r["rc"] == 0 and not r["hazards"] and other == 0 and r["unexplained"] == 0
        failed |= not ok
        status = "TIMEOUT" if r["timed_out"] else r["tests"].replace("|", "/")
        lines.append(
            f"| {r['tool']} | {r['target']} | {status} (rc {r['rc']}) | {r['summary']} | "
            f"{len(r['hazards'])} | {deliberate} / {other} | {r['unexplained']} | {r['seconds']:.0f} s |"
        )
    lines += ["", "CUDA API errors seen (all runs):", ""]
    for (err, call), n in api_total.most_common():
        why = DELIBERATE.get((err, call), "NOT DELIBERATE: a finding")
        lines.append(f"- {err} from {call}: {n} — {why}")
    lines += [
        "",
        "CUDA API errors of other libraries in the process (no cuarrow frame in the backtrace; not counted):",
        "",
    ]
    for (err, call), n in third_total.most_common():
        lines.append(f"- {err} from {call}: {n}")
    cross = Counter((r["target"], h) for r in results for h in r["cross_process"])
    lines += [
        "",
        f"initcheck reports of reads of IPC memory written by another process (initcheck does not "
        f"track writes across processes; not counted): {sum(cross.values())}",
        "",
    ]
    for (target, h), n in cross.most_common(10):
        lines.append(f"- {target}: {h} (x{n})")
    deliberate = Counter((r["target"], h.split(" at ")[0]) for r in results for h in r["deliberate"])
    lines += ["", f"Hazards tests cause on purpose (not counted): {sum(deliberate.values())}", ""]
    for (target, h), n in deliberate.most_common(10):
        lines.append(f"- {target}: {h} (x{n})")
    for frame, why in DELIBERATE_HAZARDS.items():
        lines.append(f"  - {frame}: {why}")
    lines += [
        "",
        "memcheck runs the C++ targets with --leak-check full, the Python suite without it "
        "(objects alive at interpreter exit are never freed; the soak accounts device memory exactly).",
    ]
    if args.memcheck_python_ignore:
        lines += ["", f"Python files left out under memcheck only: {args.memcheck_python_ignore}"]
    hazards = [(r["tool"], r["target"], h) for r in results for h in r["hazards"]]
    lines += ["", f"Hazards (memory errors, races, sync, initialization, leaks): {len(hazards)}", ""]
    for tool, target, h in hazards[:200]:
        lines.append(f"- {tool} / {target}: {h}")
    (out / "sanitize.md").write_text("\n".join(lines) + "\n")
    with tarfile.open(out / "sanitize-logs.tar.gz", "w:gz") as tar:
        tar.add(logdir, arcname="sanitize-logs")
    shutil.rmtree(logdir)
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
