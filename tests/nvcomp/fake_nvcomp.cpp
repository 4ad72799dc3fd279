// A stand-in for libnvcomp.so.6 with the entry points cuarrow calls
// (src/runtime/nvcomp.cpp), for tests on the host emulation of the driver:
// ZSTD chunks are decompressed with libzstd on the host, through the
// emulated driver's copies, one call at a time and synchronously (the
// stream's earlier work is waited for first, the results are written
// before the call returns).  Declared from nvCOMP 6's documented C API.
//
// Knobs (read at each call):
//   CUARROW_FAKE_NVCOMP_VERSION=N    nvcompGetProperties' version (6000)
//   CUARROW_FAKE_NVCOMP_LAUNCH=N     nvcompBatchedZstdDecompressAsync returns N
//   CUARROW_FAKE_NVCOMP_STATUS=N     every chunk's status is N
//   CUARROW_FAKE_NVCOMP_SHORT=1      every chunk reports one byte fewer
// fake_nvcomp_chunks() counts the chunks decompressed (tests read it).
#include <cuda.h>
#include <dlfcn.h>
#include <zstd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct opts {
  int backend;
  char reserved[60];
};
struct alignments {
  std::size_t input, output, temp;
};
struct properties {
  std::uint32_t version, cudart_version;
};

using htod_t = CUresult (*)(CUdeviceptr, const void*, std::size_t, CUstream);
using dtoh_t = CUresult (*)(void*, CUdeviceptr, std::size_t, CUstream);
using sync_t = CUresult (*)(CUstream);

htod_t g_htod = nullptr;
dtoh_t g_dtoh = nullptr;
sync_t g_sync = nullptr;
std::atomic<unsigned long long> g_chunks{0};

int env_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  return e != nullptr && *e != '\0' ? std::atoi(e) : fallback;
}

bool find_driver() {
  if (g_sync != nullptr) return true;
  void* lib = dlopen("libcuarrow_cuda_emulation.so", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return false;
  using get_proc_t = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<get_proc_t>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) return false;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  CUdriverProcAddressQueryResult q{};
  if (get_proc("cuMemcpyHtoDAsync", &a, 3020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q) != CUDA_SUCCESS ||
      get_proc("cuMemcpyDtoHAsync", &b, 3020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q) != CUDA_SUCCESS ||
      get_proc("cuStreamSynchronize", &c, 2000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q) != CUDA_SUCCESS) {
    return false;
  }
  g_htod = reinterpret_cast<htod_t>(a);
  g_dtoh = reinterpret_cast<dtoh_t>(b);
  g_sync = reinterpret_cast<sync_t>(c);
  return true;
}

template <class T>
std::vector<T> fetch(const void* device, std::size_t n, CUstream s) {
  std::vector<T> v(n);
  if (n != 0) g_dtoh(v.data(), reinterpret_cast<CUdeviceptr>(device), n * sizeof(T), s);
  return v;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) unsigned long long fake_nvcomp_chunks() { return g_chunks.load(); }

__attribute__((visibility("default"))) int nvcompGetProperties(properties* p) {
  if (p == nullptr) return 10;
  p->version = static_cast<std::uint32_t>(env_int("CUARROW_FAKE_NVCOMP_VERSION", 6000));
  p->cudart_version = 13000;
  return 0;
}

__attribute__((visibility("default"))) const char* nvcompGetStatusString(int status) {
  return status == 12 ? "the fake could not decompress the chunk" : "a fake nvCOMP status";
}

__attribute__((visibility("default"))) int nvcompBatchedZstdDecompressGetRequiredAlignments(opts, alignments* a) {
  *a = alignments{8, 8, 8};
  return 0;
}

__attribute__((visibility("default"))) int nvcompBatchedZstdDecompressGetTempSize(std::size_t num_chunks, std::size_t,
                                                                                  opts, std::size_t* temp_bytes,
                                                                                  std::size_t, void*) {
  *temp_bytes = 64 * num_chunks;
  return 0;
}

__attribute__((visibility("default"))) int nvcompBatchedZstdDecompressAsync(
    const void* const* compressed, const std::size_t* compressed_bytes, const std::size_t* buffer_bytes,
    std::size_t* decompressed_bytes, std::size_t num_chunks, void*, std::size_t, void* const* out, opts, int* statuses,
    void* stream) {
  if (const int launch = env_int("CUARROW_FAKE_NVCOMP_LAUNCH", 0); launch != 0) return launch;
  if (!find_driver()) return 11;
  CUstream s = static_cast<CUstream>(stream);
  if (g_sync(s) != CUDA_SUCCESS) return 10;
  const auto in_ptrs = fetch<std::uint64_t>(compressed, num_chunks, s);
  const auto in_sizes = fetch<std::size_t>(compressed_bytes, num_chunks, s);
  const auto out_sizes = fetch<std::size_t>(buffer_bytes, num_chunks, s);
  const auto out_ptrs = fetch<std::uint64_t>(out, num_chunks, s);
  std::vector<std::size_t> got(num_chunks, 0);
  std::vector<int> status(num_chunks, 0);
  const int forced = env_int("CUARROW_FAKE_NVCOMP_STATUS", 0);
  const bool short_by_one = env_int("CUARROW_FAKE_NVCOMP_SHORT", 0) != 0;
  for (std::size_t i = 0; i < num_chunks; ++i) {
    std::vector<char> in(in_sizes[i]), dst(out_sizes[i]);
    if (!in.empty()) g_dtoh(in.data(), in_ptrs[i], in.size(), s);
    const std::size_t r = ZSTD_decompress(dst.data(), dst.size(), in.data(), in.size());
    if (ZSTD_isError(r)) {
      status[i] = 12;  // nvcompErrorCannotDecompress
      continue;
    }
    got[i] = short_by_one && r > 0 ? r - 1 : r;
    if (r != 0) g_htod(out_ptrs[i], dst.data(), r, s);
    if (forced != 0) status[i] = forced;
    g_chunks.fetch_add(1);
  }
  g_htod(reinterpret_cast<CUdeviceptr>(decompressed_bytes), got.data(), num_chunks * sizeof(std::size_t), s);
  g_htod(reinterpret_cast<CUdeviceptr>(statuses), status.data(), num_chunks * sizeof(int), s);
  g_sync(s);
  return 0;
}

}  // extern "C"
