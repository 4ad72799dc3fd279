// CUDA C++ kernels over cuarrow's device views (needs a real GPU).
//
// Builds Arrow arrays on the host, moves them to the device with one
// batched to_device each, runs kernels over the typed views (sum of int32
// with nulls, string lengths, list sizes, over sliced arrays too), copies
// the results back and checks them.  Prints one PASS/FAIL line per check and
// returns non-zero on any failure.  The kernels are launched with the CUDA
// runtime (this program only; the library never links it); cuarrow and the
// runtime share the device's primary context.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <cuarrow/arrow/arrow.hpp>
#include <cuarrow/arrow/device_view.hpp>
#include <cuarrow/cuarrow.hpp>

namespace ca = cuarrow::arrow;

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++g_failures;
}

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("FAIL %s: %s\n", what, cudaGetErrorString(e));
  ++g_failures;
  return false;
}

cuarrow::buffer host_copy(const void* p, std::size_t n) {
  cuarrow::buffer b = cuarrow::allocate_host(static_cast<std::int64_t>(n));
  if (n > 0) std::memcpy(b.mutable_host_data(), p, n);
  return b;
}

cuarrow::buffer validity(const std::vector<bool>& valid) {
  std::vector<std::uint8_t> bits((valid.size() + 7) / 8, 0);
  for (std::size_t i = 0; i < valid.size(); ++i) {
    if (valid[i]) bits[i / 8] |= static_cast<std::uint8_t>(1u << (i % 8));
  }
  return host_copy(bits.data(), bits.size());
}

// ---- kernels -----------------------------------------------------------------------------

__global__ void sum_valid(ca::primitive_view<std::int32_t> v, unsigned long long* sum, unsigned long long* nulls) {
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < v.size(); i += gridDim.x * blockDim.x) {
    if (v.is_valid(i)) {
      atomicAdd(sum, static_cast<unsigned long long>(static_cast<long long>(v[i])));
    } else {
      atomicAdd(nulls, 1ull);
    }
  }
}

__global__ void string_lengths(ca::string_array_view s, std::int64_t* out) {
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < s.size(); i += gridDim.x * blockDim.x) {
    out[i] = s.is_valid(i) ? s.get(i).size : -1;
  }
}

__global__ void count_char(ca::large_string_array_view s, char c, unsigned long long* count) {
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < s.size(); i += gridDim.x * blockDim.x) {
    const ca::device_string_view v = s.value_or_empty(i);
    for (std::int64_t k = 0; k < v.size; ++k) {
      if (v[k] == c) atomicAdd(count, 1ull);
    }
  }
}

__global__ void list_sums(ca::list_array_view<std::int32_t> l, ca::primitive_view<std::int32_t> values,
                          std::int64_t* sizes, long long* sums) {
  for (std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < l.size(); i += gridDim.x * blockDim.x) {
    if (!l.is_valid(i)) {
      sizes[i] = -1;
      sums[i] = 0;
      continue;
    }
    sizes[i] = l.list_size(i);
    long long s = 0;
    for (std::int64_t k = l.begin(i); k < l.end(i); ++k) s += values.value_or(k, 0);
    sums[i] = s;
  }
}

template <class T>
std::vector<T> read_back(const cuarrow::buffer& b, std::size_t n) {
  std::vector<T> v(n);
  if (n > 0) cuarrow::copy_to_host(v.data(), b, 0, static_cast<std::int64_t>(n * sizeof(T)));
  return v;
}

// ---- the checks ---------------------------------------------------------------------------

void test_sum(const cuarrow::context& ctx) {
  const std::int64_t n = 100000;
  std::vector<std::int32_t> values(n);
  std::vector<bool> valid(n);
  for (std::int64_t i = 0; i < n; ++i) {
    values[i] = static_cast<std::int32_t>(i % 1000) - 300;
    valid[i] = i % 7 != 3;
  }
  ca::array_data a;
  a.type = ca::int32();
  a.length = n;
  a.null_count = -1;
  a.buffers = {validity(valid), host_copy(values.data(), values.size() * 4)};

  for (const auto& [off, len] : std::vector<std::pair<std::int64_t, std::int64_t>>{{0, n}, {13, 5001}, {99999, 1}}) {
    long long expect_sum = 0;
    unsigned long long expect_nulls = 0;
    for (std::int64_t i = off; i < off + len; ++i) {
      if (valid[i]) {
        expect_sum += values[i];
      } else {
        ++expect_nulls;
      }
    }
    cuarrow::stream s(ctx);
    ca::array_data d = ca::to_device(a.slice(off, len), ctx, s);
    cuarrow::buffer out = cuarrow::allocate_device(ctx, 16, s);
    cuarrow::fill_async(out, 0, 16, 0, s);
    auto* sum = reinterpret_cast<unsigned long long*>(out.address());
    sum_valid<<<64, 256, 0, s.handle()>>>(ca::make_primitive_view<std::int32_t>(d), sum, sum + 1);
    if (!cuda_ok(cudaGetLastError(), "sum_valid launch")) return;
    s.synchronize();
    auto got = read_back<unsigned long long>(out, 2);
    check(static_cast<long long>(got[0]) == expect_sum && got[1] == expect_nulls,
          "sum of int32 with nulls, slice(" + std::to_string(off) + ", " + std::to_string(len) +
              "): " + std::to_string(static_cast<long long>(got[0])) + " (expected " + std::to_string(expect_sum) +
              "), " + std::to_string(got[1]) + " nulls (expected " + std::to_string(expect_nulls) + ")");
  }
}

void test_strings(const cuarrow::context& ctx) {
  std::vector<std::optional<std::string>> words;
  for (int i = 0; i < 5000; ++i) {
    if (i % 11 == 0) {
      words.push_back(std::nullopt);
    } else {
      words.push_back(std::string(static_cast<std::size_t>(i % 17), static_cast<char>('a' + i % 26)));
    }
  }
  std::vector<std::int32_t> offsets{0};
  std::vector<std::int64_t> large_offsets{0};
  std::vector<bool> valid;
  std::string data;
  for (const auto& w : words) {
    valid.push_back(w.has_value());
    data += w.value_or("");
    offsets.push_back(static_cast<std::int32_t>(data.size()));
    large_offsets.push_back(static_cast<std::int64_t>(data.size()));
  }
  ca::array_data a;
  a.type = ca::utf8();
  a.length = static_cast<std::int64_t>(words.size());
  a.null_count = -1;
  a.buffers = {validity(valid), host_copy(offsets.data(), offsets.size() * 4), host_copy(data.data(), data.size())};

  const std::int64_t off = 7, len = 4000;
  cuarrow::stream s(ctx);
  ca::array_data d = ca::to_device(a.slice(off, len), ctx, s);
  cuarrow::buffer out = cuarrow::allocate_device(ctx, len * 8, s);
  string_lengths<<<32, 256, 0, s.handle()>>>(ca::make_binary_view<std::int32_t>(d),
                                             reinterpret_cast<std::int64_t*>(out.address()));
  if (!cuda_ok(cudaGetLastError(), "string_lengths launch")) return;
  s.synchronize();
  auto got = read_back<std::int64_t>(out, static_cast<std::size_t>(len));
  bool ok = true;
  for (std::int64_t i = 0; i < len; ++i) {
    const auto& w = words[static_cast<std::size_t>(off + i)];
    ok = ok && got[static_cast<std::size_t>(i)] == (w ? static_cast<std::int64_t>(w->size()) : -1);
  }
  check(ok, "utf8 string lengths of a sliced array (4000 values at offset 7)");

  ca::array_data large = a;
  large.type = ca::large_utf8();
  large.buffers[1] = host_copy(large_offsets.data(), large_offsets.size() * 8);
  ca::array_data dl = ca::to_device(large, ctx, s);
  cuarrow::buffer count = cuarrow::allocate_device(ctx, 8, s);
  cuarrow::fill_async(count, 0, 8, 0, s);
  count_char<<<32, 256, 0, s.handle()>>>(ca::make_binary_view<std::int64_t>(dl), 'q',
                                         reinterpret_cast<unsigned long long*>(count.address()));
  if (!cuda_ok(cudaGetLastError(), "count_char launch")) return;
  s.synchronize();
  unsigned long long expect = 0;
  for (const auto& w : words) {
    if (w) {
      for (char c : *w) expect += c == 'q' ? 1 : 0;
    }
  }
  check(read_back<unsigned long long>(count, 1)[0] == expect, "large_utf8 character count");
}

void test_lists(const cuarrow::context& ctx) {
  // list<int32>: element i has i % 5 values, every 9th list null, every 4th value null.
  std::vector<std::int32_t> offsets{0}, values;
  std::vector<bool> list_valid, value_valid;
  for (int i = 0; i < 3000; ++i) {
    list_valid.push_back(i % 9 != 4);
    const int n = list_valid.back() ? i % 5 : 0;
    for (int k = 0; k < n; ++k) {
      values.push_back(i + k);
      value_valid.push_back(values.size() % 4 != 0);
    }
    offsets.push_back(static_cast<std::int32_t>(values.size()));
  }
  ca::array_data child;
  child.type = ca::int32();
  child.length = static_cast<std::int64_t>(values.size());
  child.null_count = -1;
  child.buffers = {validity(value_valid), host_copy(values.data(), values.size() * 4)};
  ca::array_data l;
  l.type = ca::list(ca::field("item", ca::int32()));
  l.length = 3000;
  l.null_count = -1;
  l.buffers = {validity(list_valid), host_copy(offsets.data(), offsets.size() * 4)};
  l.children = {child};

  const std::int64_t off = 5, len = 2990;
  cuarrow::stream s(ctx);
  ca::array_data d = ca::to_device(l.slice(off, len), ctx, s);
  cuarrow::buffer sizes = cuarrow::allocate_device(ctx, len * 8, s);
  cuarrow::buffer sums = cuarrow::allocate_device(ctx, len * 8, s);
  list_sums<<<32, 256, 0, s.handle()>>>(
      ca::make_list_view<std::int32_t>(d), ca::make_primitive_view<std::int32_t>(d.children[0]),
      reinterpret_cast<std::int64_t*>(sizes.address()), reinterpret_cast<long long*>(sums.address()));
  if (!cuda_ok(cudaGetLastError(), "list_sums launch")) return;
  s.synchronize();
  auto got_sizes = read_back<std::int64_t>(sizes, static_cast<std::size_t>(len));
  auto got_sums = read_back<long long>(sums, static_cast<std::size_t>(len));
  bool ok_sizes = true, ok_sums = true;
  for (std::int64_t i = 0; i < len; ++i) {
    const std::int64_t e = off + i;
    if (!list_valid[static_cast<std::size_t>(e)]) {
      ok_sizes = ok_sizes && got_sizes[static_cast<std::size_t>(i)] == -1;
      continue;
    }
    ok_sizes = ok_sizes && got_sizes[static_cast<std::size_t>(i)] == offsets[e + 1] - offsets[e];
    long long sum = 0;
    for (std::int32_t k = offsets[e]; k < offsets[e + 1]; ++k) sum += value_valid[k] ? values[k] : 0;
    ok_sums = ok_sums && got_sums[static_cast<std::size_t>(i)] == sum;
  }
  check(ok_sizes, "list sizes of a sliced list<int32> (2990 lists at offset 5)");
  check(ok_sums, "sums of list values with nulls through the child view");
}

}  // namespace

int main() {
  try {
    if (cuarrow::device_count() == 0) {
      std::printf("FAIL no CUDA device\n");
      return 1;
    }
    cuarrow::context ctx = cuarrow::context::get(0);
    std::printf("device 0: %s, driver %s\n", ctx.properties().name.c_str(), cuarrow::driver_path().c_str());
    cudaSetDevice(0);  // the runtime uses the same primary context
    test_sum(ctx);
    test_strings(ctx);
    test_lists(ctx);
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  std::printf("%s: %d failure(s)\n", g_failures == 0 ? "PASS" : "FAIL", g_failures);
  return g_failures == 0 ? 0 : 1;
}
