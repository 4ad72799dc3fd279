/* Host emulation of the CUDA driver: control and inspection API.
 *
 * libcuarrow_cuda_emulation.so is a stand-in for libcuda.so.1 that runs on
 * host memory, so that cuarrow's code paths run for real on machines without
 * a GPU (CI).  It is a test and development tool, never selected silently:
 * cuarrow loads it only when CUARROW_CUDA_DRIVER=emulated or when the program
 * calls cuarrow::select_driver("emulated").
 *
 * The library exports the driver's loader entry points with the driver's own
 * names and signatures (cuGetProcAddress_v2, cuGetProcAddress, cuInit,
 * cuDriverGetVersion); every other entry point is reached through
 * cuGetProcAddress, exactly as with the real driver.  The functions below are
 * extra: tests use them to inspect the emulated driver's state.
 *
 * Configuration, read once at cuInit:
 *   CUARROW_EMULATED_DEVICES        number of devices (default 1, 0 allowed:
 *                                   cuInit then fails with CUDA_ERROR_NO_DEVICE,
 *                                   as on a machine without GPUs)
 *   CUARROW_EMULATED_MEMORY         bytes of memory per device (default 1 GiB;
 *                                   suffixes K, M, G accepted)
 *   CUARROW_EMULATED_OP_DELAY_US    delay before each stream operation runs
 *                                   (default 0), to widen race windows
 *   CUARROW_EMULATED_NO_POOLS=1     report CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 0
 *                                   and fail cuMemAllocAsync with CUDA_ERROR_NOT_SUPPORTED
 *   CUARROW_EMULATED_NO_PEER=1      cuDeviceCanAccessPeer answers 0
 */
#ifndef CUARROW_EMULATION_H
#define CUARROW_EMULATION_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How many times the primary context of `device` is retained now (0 when
 * inactive); -1 for a bad ordinal. */
int cuarrow_emu_primary_ctx_retain_count(int device);

/* Live device allocations of `device` (cuMemAlloc, cuMemAllocAsync not yet
 * freed, memory held by the pool is not counted): their number and bytes. */
size_t cuarrow_emu_device_allocation_count(int device);
size_t cuarrow_emu_device_bytes_in_use(int device);

/* Live pinned host allocations (cuMemHostAlloc) and registrations
 * (cuMemHostRegister), all devices. */
size_t cuarrow_emu_host_allocation_count(void);
size_t cuarrow_emu_host_registration_count(void);

/* Live IPC mappings in this process: handles opened with cuIpcOpenMemHandle
 * and not yet closed (a handle opened twice by one context counts once), and
 * pointers imported with cuMemPoolImportPointer and not yet freed (likewise).
 * Added for tests that check cuarrow closes what it opens. */
size_t cuarrow_emu_ipc_mapping_count(void);

/* Memory pools made with cuMemPoolCreate or imported with
 * cuMemPoolImportFromShareableHandle and not yet released (a destroyed pool
 * is released when its last allocation or imported pointer is freed). */
size_t cuarrow_emu_pool_count(void);

/* Live streams and events (created, not destroyed), all devices. */
size_t cuarrow_emu_stream_count(void);
size_t cuarrow_emu_event_count(void);

/* Number of stream operations that failed while executing (a copy that found
 * its memory freed before it ran, ...).  Each such failure also makes the
 * context's next synchronizing call return CUDA_ERROR_ILLEGAL_ADDRESS, as a
 * real device fault would; this counter lets a test see it directly. */
size_t cuarrow_emu_async_fault_count(void);

/* Delay (microseconds) before each stream operation executes; overrides
 * CUARROW_EMULATED_OP_DELAY_US from now on. */
void cuarrow_emu_set_op_delay_us(unsigned int microseconds);

/* Contexts pushed (cuCtxPushCurrent, or made current by the library) and not
 * yet popped, all threads together: 0 when every push was matched. */
size_t cuarrow_emu_context_push_count(void);

/* Fault injection.  Every entry point handed out by cuGetProcAddress (and the
 * exported cuInit) passes one check on entry: each call is counted under its
 * entry point's name (the names of src/runtime/driver_entry_points.def; newer ABI and
 * per-thread-stream variants count under their base name), and a call chosen
 * by cuarrow_emu_inject_fault fails with the chosen code without doing
 * anything else (no side effect, outputs untouched).
 *
 * cuarrow_emu_inject_fault(name, k, code): the k-th call (k >= 1; 1 = the
 * next one) from now of the entry point `name`, or of any entry point when
 * `name` is NULL, returns `code` (a CUresult).  Several faults may be armed
 * at once; each fires once.  Returns 0, or -1 for an unknown name, k == 0 or
 * code == CUDA_SUCCESS.  Calls refused inside a host callback
 * (CUDA_ERROR_NOT_PERMITTED) are neither counted nor faulted.
 *
 * cuarrow_emu_call_count(name): calls of `name` (NULL: of all entry points)
 * since the last cuarrow_emu_reset_call_counts; (size_t)-1 for an unknown
 * name.  cuarrow_emu_faults_injected: faults that fired since the last
 * cuarrow_emu_clear_faults, which also disarms the faults not yet fired.
 * cuarrow_emu_entry_point_name(i): the i-th counted name, NULL past the end.
 * All of these are thread safe and work before cuInit. */
int cuarrow_emu_inject_fault(const char* name, unsigned long long k, int code);
size_t cuarrow_emu_call_count(const char* name);
void cuarrow_emu_reset_call_counts(void);
size_t cuarrow_emu_faults_injected(void);
void cuarrow_emu_clear_faults(void);
const char* cuarrow_emu_entry_point_name(size_t i);

#ifdef __cplusplus
}
#endif

#endif /* CUARROW_EMULATION_H */
