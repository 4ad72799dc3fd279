// Helpers shared by the core test suite.
//
// The suite runs against whatever driver cuarrow loads: the host emulation
// under ctest (CUARROW_CUDA_DRIVER=emulated), the real driver on the GPU
// machine (scripts/gpu-suite.sh).  Tests that inspect the emulated driver's
// internal state skip on a real driver, saying why.
#pragma once

#include <gtest/gtest.h>

#include <cuarrow_emulation.h>
#include <cuarrow/cuarrow.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace cuarrow_test {

// The emulation's inspection API, or nullptr members on a real driver.
struct emulation_api {
  int (*primary_ctx_retain_count)(int) = nullptr;
  size_t (*device_allocation_count)(int) = nullptr;
  size_t (*device_bytes_in_use)(int) = nullptr;
  size_t (*host_allocation_count)() = nullptr;
  size_t (*host_registration_count)() = nullptr;  // cuMemHostRegister ranges (how cuarrow pins)
  size_t (*stream_count)() = nullptr;
  size_t (*event_count)() = nullptr;
  size_t (*async_fault_count)() = nullptr;
  size_t (*ipc_mapping_count)() = nullptr;  // IPC handles opened (pool pointers imported) and not closed, this process
  size_t (*pool_count)() = nullptr;         // pools created or imported and not yet released
  void (*set_op_delay_us)(unsigned) = nullptr;
  bool available() const { return primary_ctx_retain_count != nullptr; }
};

const emulation_api& emu();

#define CUARROW_REQUIRE_EMULATION()                                                                     \
  do {                                                                                                  \
    if (!::cuarrow_test::emu().available())                                                             \
      GTEST_SKIP() << "inspects the emulated driver's internal state; the real driver has no such API"; \
  } while (0)

#define CUARROW_REQUIRE_DEVICES(n)                                                                        \
  do {                                                                                                    \
    if (::cuarrow::device_count() < (n))                                                                  \
      GTEST_SKIP() << "needs " << (n) << " CUDA devices, this machine has " << ::cuarrow::device_count(); \
  } while (0)

// Sets the emulation's per-operation delay for a scope (no-op on a real GPU),
// so that work left unsynchronized is still pending when the test looks.
class scoped_op_delay {
 public:
  explicit scoped_op_delay(unsigned us) {
    if (emu().set_op_delay_us) emu().set_op_delay_us(us);
  }
  ~scoped_op_delay() {
    if (emu().set_op_delay_us) emu().set_op_delay_us(0);
  }
};

std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed);

// Runs `queue`, which queues work on `s` and drops its handles of the
// device memory it uses, with the emulation's operations slowed down;
// then checks that at least `held` bytes stay allocated on `ctx` while
// the work may be queued (emulation only: a real GPU may be done), and
// that after `s` is synchronized every byte is freed without an
// asynchronous fault.
void expect_kept_until_passed(const cuarrow::context& ctx, const cuarrow::stream& s, std::int64_t held,
                              const std::function<void()>& queue);
std::vector<std::uint8_t> to_vector(const cuarrow::buffer& b);

// A fixture with the staging pipeline on small chunks (64 KiB chunks and
// threshold, 3 threads device to host, 2 to the device), so that small
// copies cross many chunk boundaries and several workers; it restores the
// options and checks that no asynchronous fault happened meanwhile.
class small_staging_test : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = cuarrow::get_transfer_options();
    cuarrow::transfer_options o = saved_;
    o.staging_threshold_bytes = 64 << 10;
    o.staging_chunk_bytes = 64 << 10;
    o.staging_threads = 3;
    o.staging_threads_to_device = 2;
    cuarrow::set_transfer_options(o);
    faults_ = emu().async_fault_count ? emu().async_fault_count() : 0;
  }
  void TearDown() override {
    cuarrow::set_transfer_options(saved_);
    if (emu().async_fault_count) {
      EXPECT_EQ(emu().async_fault_count(), faults_);
    }
  }
  cuarrow::transfer_options saved_;
  std::size_t faults_ = 0;
};

// Rewrites the FNV-1a 64 checksum that cuarrow's handles and descriptors
// carry at byte `at` (over the bytes before it, little-endian), after a test
// edited them: the edit then reaches the check it aims at, not the checksum's.
inline void reseal_checksum(std::vector<std::byte>& wire, std::size_t at) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < at; ++i) {
    h ^= static_cast<std::uint8_t>(wire[i]);
    h *= 0x100000001b3ull;
  }
  for (std::size_t i = 0; i < 8; ++i) wire[at + i] = static_cast<std::byte>((h >> (8 * i)) & 0xff);
}

/// Whether device 0 has stream-ordered pools with POSIX file-descriptor
/// handles (the process-wide IPC pool can be had).
inline bool pools_supported() {
  const cuarrow::context ctx = cuarrow::context::get(0);
  if (!ctx.properties().memory_pools_supported) return false;
  try {
    (void)cuarrow::ipc_pool_resource::shared_for(ctx);
    return true;
  } catch (const cuarrow::cuda_error& e) {
    if (e.code() == CUDA_ERROR_NOT_SUPPORTED) return false;
    throw;
  }
}

}  // namespace cuarrow_test

#define REQUIRE_SHAREABLE_POOLS()                                                                                  \
  do {                                                                                                             \
    if (!cuarrow_test::pools_supported()) GTEST_SKIP() << "this device has no POSIX file-descriptor memory pools"; \
  } while (0)
