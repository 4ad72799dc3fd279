#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "child_process.hpp"
#include "test_support.hpp"

namespace cuarrow_test {

const emulation_api& emu() {
  static const emulation_api api = [] {
    emulation_api a;
    cuarrow::load_driver();
    if (!cuarrow::driver_is_emulated()) return a;
    void* h = dlopen(cuarrow::driver_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) return a;
    auto sym = [&](const char* name) { return dlsym(h, name); };
    a.primary_ctx_retain_count = reinterpret_cast<int (*)(int)>(sym("cuarrow_emu_primary_ctx_retain_count"));
    a.device_allocation_count = reinterpret_cast<size_t (*)(int)>(sym("cuarrow_emu_device_allocation_count"));
    a.device_bytes_in_use = reinterpret_cast<size_t (*)(int)>(sym("cuarrow_emu_device_bytes_in_use"));
    a.host_allocation_count = reinterpret_cast<size_t (*)()>(sym("cuarrow_emu_host_allocation_count"));
    a.host_registration_count = reinterpret_cast<size_t (*)()>(sym("cuarrow_emu_host_registration_count"));
    a.stream_count = reinterpret_cast<size_t (*)()>(sym("cuarrow_emu_stream_count"));
    a.event_count = reinterpret_cast<size_t (*)()>(sym("cuarrow_emu_event_count"));
    a.async_fault_count = reinterpret_cast<size_t (*)()>(sym("cuarrow_emu_async_fault_count"));
    a.ipc_mapping_count = reinterpret_cast<size_t (*)()>(sym("cuarrow_emu_ipc_mapping_count"));
    a.pool_count = reinterpret_cast<size_t (*)()>(sym("cuarrow_emu_pool_count"));
    a.set_op_delay_us = reinterpret_cast<void (*)(unsigned)>(sym("cuarrow_emu_set_op_delay_us"));
    return a;
  }();
  return api;
}

std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& x : v) x = static_cast<std::uint8_t>(rng());
  return v;
}

void expect_kept_until_passed(const cuarrow::context& ctx, const cuarrow::stream& s, std::int64_t held,
                              const std::function<void()>& queue) {
  const std::size_t faults = emu().async_fault_count ? emu().async_fault_count() : 0;
  ctx.synchronize();
  const std::int64_t base = ctx.bytes_allocated();
  {
    scoped_op_delay delay(20000);
    queue();
    if (emu().set_op_delay_us) {
      EXPECT_GE(ctx.bytes_allocated(), base + held) << "memory in use by queued work was freed";
    }
    s.synchronize();
  }
  ctx.synchronize();
  EXPECT_EQ(ctx.bytes_allocated(), base);
  if (emu().async_fault_count) {
    EXPECT_EQ(emu().async_fault_count(), faults);
  }
}

std::vector<std::uint8_t> to_vector(const cuarrow::buffer& b) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(b.size()));
  cuarrow::copy_to_host(v.data(), b, 0, b.size());
  return v;
}

}  // namespace cuarrow_test

int main(int argc, char** argv) {
  // A child process of a test (tests/child_process.hpp): run its mode only.
  bool child = false;
  int child_rc = cuarrow_test::run_child_mode_if_asked(argc, argv, &child);
  if (child) return child_rc;
  ::testing::InitGoogleTest(&argc, argv);
  // --env=NAME=VALUE: set before the driver is loaded (the emulation reads
  // its configuration once, at cuInit).
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--env=", 6) == 0) putenv(argv[i] + 6);
  }
  if (::testing::GTEST_FLAG(list_tests)) return RUN_ALL_TESTS();  // test discovery: no driver needed
  try {
    cuarrow::load_driver();
    std::printf("[cuarrow] driver %s (%s), %d device(s)\n", cuarrow::driver_path().c_str(),
                cuarrow::driver_is_emulated() ? "host emulation" : "real", cuarrow::device_count());
  } catch (const cuarrow::error& e) {
    std::fprintf(stderr, "[cuarrow] cannot load a CUDA driver: %s\n", e.what());
    return 1;
  }
  return RUN_ALL_TESTS();
}
