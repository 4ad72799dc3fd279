// What an IPC-capable pool costs against the device's default pool (issue 15,
// item 1): allocation latency at 4 B and 64 MiB, host<->device transfers of
// 4 B and 64 MiB into memory of each pool, memory a pool keeps after its
// buffers are freed, and whether the driver lets a process import its own
// pool.  The two resources are cuarrow's default (async_pool_resource: the
// device's default pool, release threshold raised to 1/16 of the device) and
// ipc_pool_resource (a pool created with POSIX file-descriptor handles, the
// same threshold).  bench/README.md says how to build and run it.
//
//   cuarrow_pool_ipc_probe [--device N] [--out results.json] [--budget SECONDS]
//
// Each case is called until `budget` seconds (0.3) passed and at least 20
// calls were made (4 B: at most 20000, 64 MiB: at most 200), after 3 warm-up
// calls; the figure is the median, with the 10th and 90th percentiles.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <cuarrow/cuarrow.hpp>
#include <cuarrow/ipc.hpp>
#include <cuarrow/memory_resource.hpp>

namespace {

using clock_type = std::chrono::steady_clock;

struct figure {
  std::string resource, kcase;
  std::int64_t bytes = 0;
  std::size_t calls = 0;
  double median_us = 0, p10_us = 0, p90_us = 0;
};

double budget_s = 0.3;

// Times `call` (seconds per call); `between` runs untimed after each call.
figure measure(const std::string& resource, const std::string& kcase, std::int64_t bytes,
               const std::function<void()>& call, const std::function<void()>& between = {}) {
  const std::size_t max_calls = bytes >= (1 << 20) ? 200 : 20000;
  for (int i = 0; i < 3; ++i) {
    call();
    if (between) between();
  }
  std::vector<double> us;
  const auto end = clock_type::now() + std::chrono::duration<double>(budget_s);
  while ((us.size() < 20 || clock_type::now() < end) && us.size() < max_calls) {
    const auto t0 = clock_type::now();
    call();
    const auto t1 = clock_type::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (between) between();
  }
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<std::size_t>(q * static_cast<double>(us.size() - 1))]; };
  figure f{resource, kcase, bytes, us.size(), at(0.5), at(0.1), at(0.9)};
  std::printf("%-14s %-42s %10lld B %8zu calls  median %10.2f us  p10 %10.2f  p90 %10.2f", resource.c_str(),
              kcase.c_str(), static_cast<long long>(bytes), f.calls, f.median_us, f.p10_us, f.p90_us);
  const bool transfer = kcase.rfind("H2D", 0) == 0 || kcase.rfind("D2H", 0) == 0;
  if (transfer && bytes >= (1 << 20)) std::printf("  %7.2f GB/s", static_cast<double>(bytes) / (f.median_us * 1e3));
  std::printf("\n");
  std::fflush(stdout);
  return f;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      o += ' ';
      continue;
    }
    o += c;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  int device = 0;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) device = std::atoi(argv[++i]);
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--budget" && i + 1 < argc) budget_s = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--device N] [--out results.json] [--budget SECONDS]\n", argv[0]);
      return 2;
    }
  }
  cuarrow::context ctx = cuarrow::context::get(device);
  const auto& props = ctx.properties();
  std::printf("device %d: %s, driver %s%s\n", device, props.name.c_str(), cuarrow::driver_path().c_str(),
              cuarrow::driver_is_emulated() ? " (host emulation: the figures mean nothing)" : "");
  if (!props.memory_pools_supported) {
    std::printf("this device has no stream-ordered pools: nothing to compare\n");
    return 1;
  }
  std::vector<figure> figures;
  std::vector<std::pair<std::string, std::string>> notes;
  const std::int64_t small = 4, large = std::int64_t{64} << 20;
  const std::shared_ptr<cuarrow::device_memory_resource> original = ctx.memory_resource();

  std::vector<std::uint8_t> host(static_cast<std::size_t>(large), 0x5a);
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, large);
  std::memset(reinterpret_cast<void*>(pinned.address()), 0x5a, static_cast<std::size_t>(large));
  std::vector<std::uint8_t> back(static_cast<std::size_t>(large));

  struct candidate {
    std::string name;
    std::shared_ptr<cuarrow::device_memory_resource> resource;
  };
  std::vector<candidate> candidates;
  candidates.push_back({"default_pool", std::make_shared<cuarrow::async_pool_resource>(ctx)});
  try {
    candidates.push_back({"ipc_pool", std::make_shared<cuarrow::ipc_pool_resource>(ctx)});
  } catch (const cuarrow::error& e) {
    std::printf("no ipc_pool_resource on this device: %s\n", e.what());
    notes.emplace_back("ipc_pool", e.what());
  }

  cuarrow::stream s(ctx);
  for (const candidate& c : candidates) {
    const auto& r = c.resource;
    // Memory a pool keeps: free memory before, while 1 GiB is allocated, and
    // after it is freed and the stream synchronized (no trim).
    {
      ctx.synchronize();
      const std::int64_t before = ctx.free_memory();
      std::optional<cuarrow::buffer> big = cuarrow::allocate_device(ctx, std::int64_t{1} << 30, s, r);
      s.synchronize();
      const std::int64_t during = ctx.free_memory();
      big.reset();
      s.synchronize();
      ctx.synchronize();
      const std::int64_t after = ctx.free_memory();
      char line[256];
      std::snprintf(line, sizeof line,
                    "free memory %.3f GiB before, %.3f GiB with 1 GiB allocated, %.3f GiB after free + sync (kept "
                    "%.3f GiB)",
                    static_cast<double>(before) / (1 << 30), static_cast<double>(during) / (1 << 30),
                    static_cast<double>(after) / (1 << 30), static_cast<double>(before - after) / (1 << 30));
      std::printf("%-14s %s\n", c.name.c_str(), line);
      notes.emplace_back(c.name + " retention", line);
    }
    for (std::int64_t n : {small, large}) {
      // Allocation alone (the free is queued untimed, then the stream synchronized).
      std::optional<cuarrow::buffer> b;
      figures.push_back(measure(
          c.name, "allocate (stream-ordered)", n, [&] { b = cuarrow::allocate_device(ctx, n, s, r); },
          [&] {
            b.reset();
            s.synchronize();
          }));
      // A whole cycle: allocate, free, synchronize.
      figures.push_back(measure(c.name, "allocate + free + synchronize", n, [&] {
        { cuarrow::buffer t = cuarrow::allocate_device(ctx, n, s, r); }
        s.synchronize();
      }));
      // Transfers into memory of this pool (synchronous calls).
      cuarrow::buffer dst = cuarrow::allocate_device(ctx, n, s, r);
      s.synchronize();
      figures.push_back(
          measure(c.name, "H2D pageable into", n, [&] { cuarrow::copy_from_host(dst, 0, host.data(), n); }));
      figures.push_back(measure(c.name, "H2D pinned into", n, [&] {
        cuarrow::copy_from_host(dst, 0, reinterpret_cast<const void*>(pinned.address()), n);
      }));
      figures.push_back(
          measure(c.name, "D2H pageable from", n, [&] { cuarrow::copy_to_host(back.data(), dst, 0, n); }));
      figures.push_back(measure(c.name, "D2H pinned from", n,
                                [&] { cuarrow::copy_to_host(reinterpret_cast<void*>(pinned.address()), dst, 0, n); }));
      // The benchmark's allocating form, with this pool as the context's resource.
      ctx.set_memory_resource(r);
      figures.push_back(measure(c.name, "H2D pageable, allocating (copy_to_device)", n,
                                [&] { (void)cuarrow::copy_to_device(ctx, host.data(), n); }));
      ctx.set_memory_resource(original);
    }
  }

  // Does the driver let a process import its own pool?  (The emulation does;
  // CUDA does not document it.)
  if (candidates.size() > 1) {
    std::string answer;
    try {
      auto& pool = static_cast<cuarrow::ipc_pool_resource&>(*candidates[1].resource);
      cuarrow::buffer b = cuarrow::allocate_device(ctx, 4096, s, candidates[1].resource);
      cuarrow::copy_from_host(b, 0, host.data(), 4096, s);
      s.synchronize();
      cuarrow::shareable_pool shared = cuarrow::export_pool(pool);
      cuarrow::imported_pool imported = cuarrow::import_pool(ctx, shared.fd(), shared.pool_id());
      cuarrow::buffer opened = cuarrow::open_ipc(imported, cuarrow::export_ipc(b));
      std::vector<std::uint8_t> got(4096);
      cuarrow::copy_to_host(got.data(), opened, 0, 4096);
      answer =
          std::equal(got.begin(), got.end(), host.begin()) ? "allowed, same bytes" : "allowed, but the bytes differ";
    } catch (const std::exception& e) {
      answer = std::string("refused: ") + e.what();
    }
    std::printf("importing the pool in the exporting process: %s\n", answer.c_str());
    notes.emplace_back("same-process import", answer);
  }

  // Opening 1 GiB of pool memory (in this process, which the driver allows):
  // what share() could cost on pool memory, beside the legacy cuIpcOpenMemHandle
  // of a plain allocation (share_bench's "driver's floor").  Each open maps
  // the allocation afresh (the previous buffer is dropped first).
  if (candidates.size() > 1) {
    try {
      const std::int64_t gib = std::int64_t{1} << 30;
      auto& pool = static_cast<cuarrow::ipc_pool_resource&>(*candidates[1].resource);
      cuarrow::buffer b = cuarrow::allocate_device(ctx, gib, s, candidates[1].resource);
      s.synchronize();
      cuarrow::ipc_memory_handle h = cuarrow::export_ipc(b);
      cuarrow::shareable_pool shared = cuarrow::export_pool(pool);
      std::optional<cuarrow::buffer> opened;
      {
        std::optional<cuarrow::imported_pool> imported;
        figures.push_back(measure(
            "ipc_pool", "import_pool + open_ipc of one allocation", gib,
            [&] {
              imported.emplace(cuarrow::import_pool(ctx, shared.fd(), shared.pool_id()));
              opened.emplace(cuarrow::open_ipc(*imported, h));
            },
            [&] {
              opened.reset();
              imported.reset();
            }));
      }
      cuarrow::imported_pool imported = cuarrow::import_pool(ctx, shared.fd(), shared.pool_id());
      figures.push_back(measure(
          "ipc_pool", "open_ipc of one allocation, pool imported once", gib,
          [&] { opened.emplace(cuarrow::open_ipc(imported, h)); }, [&] { opened.reset(); }));
    } catch (const std::exception& e) {
      std::printf("opening 1 GiB of pool memory: %s\n", e.what());
      notes.emplace_back("1 GiB pool open", e.what());
    }
  }

  if (!out.empty()) {
    std::ofstream f(out);
    f << "{\n  \"device\": \"" << json_escape(props.name)
      << "\",\n  \"emulated\": " << (cuarrow::driver_is_emulated() ? "true" : "false") << ",\n  \"notes\": {";
    for (std::size_t i = 0; i < notes.size(); ++i) {
      f << (i ? ",\n" : "\n") << "    \"" << json_escape(notes[i].first) << "\": \"" << json_escape(notes[i].second)
        << "\"";
    }
    f << "\n  },\n  \"figures\": [";
    for (std::size_t i = 0; i < figures.size(); ++i) {
      const figure& g = figures[i];
      f << (i ? ",\n" : "\n") << "    {\"resource\": \"" << g.resource << "\", \"case\": \"" << g.kcase
        << "\", \"bytes\": " << g.bytes << ", \"calls\": " << g.calls << ", \"median_us\": " << g.median_us
        << ", \"p10_us\": " << g.p10_us << ", \"p90_us\": " << g.p90_us << "}";
    }
    f << "\n  ]\n}\n";
    std::printf("wrote %s\n", out.c_str());
  }
  return 0;
}
