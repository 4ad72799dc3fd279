/* A CUDA driver that records when cuarrow calls the real one: the entry
 * points below, each with its start and end on CLOCK_MONOTONIC (Python's
 * time.perf_counter_ns reads the same clock), forwarded unchanged.  Used by
 * bench/stream_launch_probe.py to say when a write's first copy is queued
 * relative to the Python call, on the GPU machine and on the emulation:
 *
 *   cc -O2 -shared -fPIC -o driver_trace.so bench/driver_trace.c -ldl
 *   CUARROW_CUDA_DRIVER=$PWD/driver_trace.so CUARROW_TRACE_DRIVER=libcuda.so.1 python3 ...
 *
 * CUARROW_TRACE_DRIVER names the driver to forward to (default
 * libcuda.so.1; the emulation's libcuarrow_cuda_emulation.so by path).
 * With CUARROW_TRACE_GPU=1, each kernel launch is also timed on the GPU: an
 * event recorded on its stream before it and one after (their times, from
 * the first launch's, through cuarrow_trace_gpu_take), which says how long
 * the kernels ran and how long the GPU waited between them (the events
 * cost the host a driver call each: time the host without them).
 * No cuda.h: the types below are the driver API's, by size.  Every other
 * entry point is the real driver's own (cuGetProcAddress forwards). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void* CUstream;
typedef void* CUfunction;
typedef void* CUevent;
typedef void* CUmemoryPool;
typedef void* CUcontext;
typedef unsigned long long cuuint64_t;

struct trace_event {
  const char* name;
  int64_t start_ns, end_ns, bytes;
};

#define MAX_EVENTS 65536
static struct trace_event events[MAX_EVENTS];
static atomic_int next_event;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void record(const char* name, int64_t start, int64_t bytes) {
  const int i = atomic_fetch_add(&next_event, 1);
  if (i >= MAX_EVENTS) return;
  events[i].name = name;
  events[i].start_ns = start;
  events[i].end_ns = now_ns();
  events[i].bytes = bytes;
}

/* The events so far, copied out (at most max), and forgotten. */
__attribute__((visibility("default"))) int cuarrow_trace_take(struct trace_event* out, int max) {
  int n = atomic_exchange(&next_event, 0);
  if (n > MAX_EVENTS) n = MAX_EVENTS;
  if (n > max) n = max;
  memcpy(out, events, (size_t)n * sizeof(struct trace_event));
  return n;
}

static void* real_library(void) {
  static void* lib;
  if (lib == NULL) {
    const char* name = getenv("CUARROW_TRACE_DRIVER");
    lib = dlopen(name != NULL && *name != '\0' ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) fprintf(stderr, "driver_trace: %s\n", dlerror());
  }
  return lib;
}

typedef CUresult (*get_proc_t)(const char*, void**, int, cuuint64_t, int*);
static get_proc_t real_get_proc;

/* The real driver's entry point `name` (of CUDA 12's API), or NULL. */
static void* real_proc(const char* name) {
  void* pfn = NULL;
  int status = 0;
  if (real_get_proc == NULL || real_get_proc(name, &pfn, 12000, 0, &status) != 0) return NULL;
  return pfn;
}

/* One wrapper per traced entry point: its real pointer, then the wrapper. */
#define TRACED(name, params, args, bytes) \
  static CUresult(*real_##name) params;   \
  static CUresult traced_##name params {  \
    const int64_t t = now_ns();           \
    const CUresult r = real_##name args;  \
    record(#name, t, (int64_t)(bytes));   \
    return r;                             \
  }

/* cuLaunchKernel, traced, and with CUARROW_TRACE_GPU=1 timed on the GPU:
 * gpu_events[2 i] recorded before launch i on its stream, [2 i + 1] after. */
#define MAX_TIMED 4096
static CUevent gpu_events[2 * MAX_TIMED];
static int gpu_events_made, gpu_timed;
static int gpu_timing = -1;
static CUresult (*real_cuEventCreate)(CUevent*, unsigned);
static CUresult (*real_cuEventRecord)(CUevent, CUstream);
static CUresult (*real_cuEventSynchronize)(CUevent);
static CUresult (*real_cuEventElapsedTime)(float*, CUevent, CUevent);
static CUresult (*real_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                       CUstream, void**, void**);

static void* real_proc(const char* name);

static int timing_on(void) {
  if (gpu_timing < 0) {
    const char* v = getenv("CUARROW_TRACE_GPU");
    gpu_timing = v != NULL && strcmp(v, "1") == 0;
    if (gpu_timing) {
      real_cuEventCreate = (CUresult(*)(CUevent*, unsigned))real_proc("cuEventCreate");
      real_cuEventSynchronize = (CUresult(*)(CUevent))real_proc("cuEventSynchronize");
      real_cuEventElapsedTime = (CUresult(*)(float*, CUevent, CUevent))real_proc("cuEventElapsedTime");
      if (real_cuEventRecord == NULL) real_cuEventRecord = (CUresult(*)(CUevent, CUstream))real_proc("cuEventRecord");
      gpu_timing = real_cuEventCreate && real_cuEventSynchronize && real_cuEventElapsedTime && real_cuEventRecord;
      if (!gpu_timing) fprintf(stderr, "driver_trace: no event entry points: GPU timing off\n");
    }
  }
  return gpu_timing;
}

/* An event of the pool (made on first use, in the current context). */
static CUevent gpu_event(int i) {
  while (gpu_events_made <= i) {
    if (real_cuEventCreate(&gpu_events[gpu_events_made], 0) != 0) return NULL;
    ++gpu_events_made;
  }
  return gpu_events[i];
}

static CUresult traced_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                      unsigned bz, unsigned shm, CUstream s, void** p, void** e) {
  const int64_t t = now_ns();
  const int timed = timing_on() && gpu_timed < MAX_TIMED && gpu_event(2 * gpu_timed + 1) != NULL;
  if (timed) real_cuEventRecord(gpu_events[2 * gpu_timed], s);
  const CUresult r = real_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, p, e);
  if (timed) real_cuEventRecord(gpu_events[2 * gpu_timed++ + 1], s);
  record("cuLaunchKernel", t, (int64_t)gx);
  return r;
}

/* The launches timed since the last call, at most max: out[2 i] and
 * out[2 i + 1] their start and end in milliseconds from the first one's
 * start (after waiting for them); forgotten.  The count, or -1 where an
 * event could not be read. */
__attribute__((visibility("default"))) int cuarrow_trace_gpu_take(double* out, int max) {
  int n = gpu_timed;
  gpu_timed = 0;
  if (n > max) n = max;
  if (n == 0) return 0;
  if (real_cuEventSynchronize(gpu_events[2 * n - 1]) != 0) return -1;
  for (int i = 0; i < 2 * n; ++i) {
    float ms = 0;
    if (real_cuEventElapsedTime(&ms, gpu_events[0], gpu_events[i]) != 0) return -1;
    out[i] = ms;
  }
  return n;
}

TRACED(cuMemcpyHtoDAsync, (CUdeviceptr d, const void* h, size_t n, CUstream s), (d, h, n, s), n)
TRACED(cuMemcpyDtoDAsync, (CUdeviceptr d, CUdeviceptr h, size_t n, CUstream s), (d, h, n, s), n)
TRACED(cuMemcpyAsync, (CUdeviceptr d, CUdeviceptr h, size_t n, CUstream s), (d, h, n, s), n)
TRACED(cuMemsetD8Async, (CUdeviceptr d, unsigned char v, size_t n, CUstream s), (d, v, n, s), n)
TRACED(cuMemAllocAsync, (CUdeviceptr * d, size_t n, CUstream s), (d, n, s), n)
TRACED(cuMemAllocFromPoolAsync, (CUdeviceptr * d, size_t n, CUmemoryPool p, CUstream s), (d, n, p, s), n)
TRACED(cuMemAlloc, (CUdeviceptr * d, size_t n), (d, n), n)
TRACED(cuMemHostAlloc, (void** p, size_t n, unsigned flags), (p, n, flags), n)
TRACED(cuMemHostRegister, (void* p, size_t n, unsigned flags), (p, n, flags), n)
TRACED(cuStreamSynchronize, (CUstream s), (s), 0)
TRACED(cuLaunchHostFunc, (CUstream s, void (*fn)(void*), void* u), (s, fn, u), 0)
TRACED(cuEventRecord, (CUevent e, CUstream s), (e, s), 0)
TRACED(cuStreamWaitEvent, (CUstream s, CUevent e, unsigned f), (s, e, f), 0)
TRACED(cuCtxPushCurrent, (CUcontext c), (c), 0)
TRACED(cuCtxPopCurrent, (CUcontext * c), (c), 0)
TRACED(cuMemcpyBatchAsync,
       (CUdeviceptr * d, CUdeviceptr* s, size_t* n, size_t count, void* a, size_t* ai, size_t na, CUstream st),
       (d, s, n, count, a, ai, na, st), count)

struct wrapper {
  const char* name;
  void** real;
  void* traced;
};

#define WRAP(name) \
  { #name, (void**)&real_##name, (void*)traced_##name }
static const struct wrapper wrappers[] = {
    WRAP(cuLaunchKernel),     WRAP(cuMemcpyHtoDAsync), WRAP(cuMemcpyDtoDAsync),       WRAP(cuMemcpyAsync),
    WRAP(cuMemsetD8Async),    WRAP(cuMemAllocAsync),   WRAP(cuMemAllocFromPoolAsync), WRAP(cuMemAlloc),
    WRAP(cuMemHostAlloc),     WRAP(cuMemHostRegister), WRAP(cuStreamSynchronize),     WRAP(cuLaunchHostFunc),
    WRAP(cuEventRecord),      WRAP(cuStreamWaitEvent), WRAP(cuCtxPushCurrent),        WRAP(cuCtxPopCurrent),
    WRAP(cuMemcpyBatchAsync),
};

__attribute__((visibility("default"))) CUresult cuDriverGetVersion(int* v) {
  void* lib = real_library();
  CUresult (*f)(int*) = lib ? (CUresult(*)(int*))dlsym(lib, "cuDriverGetVersion") : NULL;
  return f ? f(v) : 100; /* CUDA_ERROR_NO_DEVICE */
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                                                    cuuint64_t flags, int* status) {
  if (real_get_proc == NULL) {
    void* lib = real_library();
    real_get_proc = lib ? (get_proc_t)dlsym(lib, "cuGetProcAddress_v2") : NULL;
    if (real_get_proc == NULL) return 100;
  }
  const CUresult r = real_get_proc(symbol, pfn, version, flags, status);
  if (r != 0 || pfn == NULL || *pfn == NULL) return r;
  for (size_t i = 0; i < sizeof(wrappers) / sizeof(wrappers[0]); ++i) {
    if (strcmp(symbol, wrappers[i].name) == 0) {
      *wrappers[i].real = *pfn;
      *pfn = wrappers[i].traced;
      break;
    }
  }
  return r;
}
