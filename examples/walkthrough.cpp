// cuarrow walkthrough: contexts, device buffers, copies, pinned memory,
// streams and events, printing what each step did.
//
// On a machine without a GPU it says so and runs on cuarrow's host emulation
// of the CUDA driver.
#include <cuarrow/cuarrow.hpp>

#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace {

void print_ints(const char* label, const std::int32_t* v, std::size_t n) {
  std::printf("%s[", label);
  for (std::size_t i = 0; i < n; ++i) std::printf(i ? ", %d" : "%d", v[i]);
  std::printf("]\n");
}

// Use the real GPU if there is one; otherwise re-run this program on the
// host emulation, saying so.
void choose_driver(char** argv) {
  const char* env = std::getenv("CUARROW_CUDA_DRIVER");
  if (env != nullptr && *env != '\0') return;
  std::string why;
  try {
    if (cuarrow::device_count() > 0) return;
    why = "the CUDA driver reports no device";
  } catch (const cuarrow::driver_error& e) {
    why = e.what();
  }
  std::printf("No CUDA GPU here (%s)\n", why.c_str());
  std::printf("Re-running on cuarrow's host emulation of the CUDA driver.\n\n");
  std::fflush(stdout);
  setenv("CUARROW_CUDA_DRIVER", "emulated", 1);
  execv("/proc/self/exe", argv);
  std::perror("execv");
  std::exit(1);
}

}  // namespace

int main(int, char** argv) {
  choose_driver(argv);
  try {
    cuarrow::load_driver();
    if (cuarrow::driver_is_emulated()) {
      std::printf("==================================================================\n");
      std::printf(" EMULATED: no GPU is used. This run uses cuarrow's host emulation\n");
      std::printf(" of the CUDA driver (a test tool); device memory is host memory.\n");
      std::printf("==================================================================\n\n");
    }
    int v = cuarrow::driver_version();
    std::printf("driver: %s (CUDA %d.%d)\n", cuarrow::driver_path().c_str(), v / 1000, (v % 1000) / 10);
    std::printf("devices: %d\n", cuarrow::device_count());

    // 1. A context on device 0 (its primary context, shared with other libraries).
    cuarrow::context ctx = cuarrow::context::get(0);
    const auto& p = ctx.properties();
    std::printf("\n>>> ctx = context::get(0)\n");
    std::printf("device %d: %s, %.1f GiB, compute capability %d.%d, PCI %s\n", ctx.device_number(), p.name.c_str(),
                static_cast<double>(p.total_memory) / (1 << 30), p.compute_capability_major, p.compute_capability_minor,
                p.pci_bus_id.c_str());
    std::printf("memory resource: %s\n", ctx.memory_resource()->name().c_str());

    // 2. Host data to the device.
    std::array<std::int32_t, 4> arr{};
    std::iota(arr.begin(), arr.end(), 0);
    std::printf("\n>>> cuda_buf = copy_to_device(ctx, arr)    // arr = [0, 1, 2, 3], int32\n");
    cuarrow::buffer cuda_buf = cuarrow::copy_to_device(ctx, arr.data(), sizeof(arr));
    std::printf("%s\n", cuda_buf.describe().c_str());
    std::printf("size %lld bytes, device type %s (Arrow code %d), device id %d, bytes_allocated %lld\n",
                static_cast<long long>(cuda_buf.size()), cuarrow::to_string(cuda_buf.type()),
                static_cast<int>(cuda_buf.type()), cuda_buf.device_id(), static_cast<long long>(ctx.bytes_allocated()));

    // 3. Back to the host.
    std::printf("\n>>> copy_to_new_host(cuda_buf)\n");
    cuarrow::buffer host = cuarrow::copy_to_new_host(cuda_buf);
    print_ints("", reinterpret_cast<const std::int32_t*>(host.host_data()), 4);

    // 4. Host code cannot read device memory by accident.
    std::printf("\n>>> cuda_buf.host_data()\n");
    try {
      (void)cuda_buf.host_data();
    } catch (const cuarrow::host_access_error& e) {
      std::printf("host_access_error: %s\n", e.what());
    }

    // 5. Positions are checked on both sides.
    std::printf("\n>>> copy_to_host(out, cuda_buf, /*offset=*/8, /*size=*/16)\n");
    try {
      std::array<std::int32_t, 4> out{};
      cuarrow::copy_to_host(out.data(), cuda_buf, 8, 16);
    } catch (const cuarrow::out_of_range& e) {
      std::printf("out_of_range: %s\n", e.what());
    }

    // 6. A zero-copy slice, written into at an offset.
    std::printf("\n>>> tail = cuda_buf.slice(8); copy_from_host(tail, 0, {42, 43})\n");
    cuarrow::buffer tail = cuda_buf.slice(8);
    const std::int32_t patch[2] = {42, 43};
    cuarrow::copy_from_host(tail, 0, patch, sizeof(patch));
    host = cuarrow::copy_to_new_host(cuda_buf);
    print_ints("cuda_buf now ", reinterpret_cast<const std::int32_t*>(host.host_data()), 4);

    // 7. Pinned host memory and an asynchronous round trip on a stream, timed with events.
    std::printf("\n>>> pinned = allocate_pinned(ctx, 64 MiB); async H2D + D2H on a stream\n");
    const std::int64_t n = 64ll << 20;
    cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, n);
    std::memset(pinned.mutable_host_data(), 7, static_cast<std::size_t>(n));
    cuarrow::stream s(ctx);
    cuarrow::event start(ctx, CU_EVENT_DEFAULT), stop(ctx, CU_EVENT_DEFAULT);
    cuarrow::buffer big = cuarrow::allocate_device(ctx, n, s);
    start.record(s);
    cuarrow::copy_async(big, 0, pinned, 0, n, s);
    stop.record(s);
    cuarrow::fill_async(pinned, 0, n, 0, s);
    cuarrow::copy_async(pinned, 0, big, 0, n, s);
    s.synchronize();
    float ms = stop.elapsed_ms_since(start);
    std::printf("%s\n", pinned.describe().c_str());
    std::printf("64 MiB host->device from pinned memory: %.3f ms (%.1f GB/s)%s\n", ms,
                ms > 0 ? static_cast<double>(n) / (ms * 1e6) : 0.0,
                cuarrow::driver_is_emulated() ? "  [emulated: not a GPU figure]" : "");
    std::printf("round trip intact: %s\n", pinned.host_data()[n - 1] == std::byte{7} ? "yes" : "NO");

    std::printf("\nbytes_allocated on device 0: %lld\n", static_cast<long long>(ctx.bytes_allocated()));
    return 0;
  } catch (const cuarrow::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
