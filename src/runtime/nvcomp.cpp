// Loading libnvcomp (NVIDIA's GPU compression library) at run time, and
// the one thing cuarrow asks of it: batched ZSTD decompression into device
// memory (include/cuarrow/nvcomp.hpp, runtime.hpp's gpu_zstd_decompress).
//
// Mirrors the cuFile loader (cufile.cpp): dlopen, symbol lookup into a
// table kept for the process's life, never unloaded, never required: every
// failure becomes nvcomp_status()'s reason, and the file readers then
// decompress on the host.
//
// libnvcomp's headers are not part of the CUDA toolkit cuarrow builds with,
// so the few types used are declared here from NVIDIA's documented nvCOMP 6
// C API (nvcomp/zstd.h, nvcomp/shared_types.h), with cuarrow's own names and
// the same layout.  Only major version 6 is loaded: these signatures are
// those of 6.x.
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuarrow/context.hpp"
#include "cuarrow/error.hpp"
#include "cuarrow/nvcomp.hpp"
#include "driver_table.hpp"
#include "runtime.hpp"

namespace cuarrow {
namespace detail {
namespace {

constexpr const char* kDefaultLibrary = "libnvcomp.so.6";
constexpr std::uint32_t kMajorVersion = 6;

// nvcompBatchedZstdDecompressOpts_t: the backend (an enum: 0 lets nvCOMP
// choose) and 60 reserved bytes that must be zero.
struct zstd_decompress_opts {
  int backend = 0;
  char reserved[60] = {};
};
static_assert(sizeof(zstd_decompress_opts) == 64);

// nvcompAlignmentRequirements_t.
struct alignment_requirements {
  std::size_t input = 1;
  std::size_t output = 1;
  std::size_t temp = 1;
};

// nvcompProperties_t: version is major * 1000 + minor * 100 + patch.
struct properties {
  std::uint32_t version = 0;
  std::uint32_t cudart_version = 0;
};

using status_t = int;       // nvcompStatus_t: 0 is nvcompSuccess
using cuda_stream = void*;  // cudaStream_t, which a CUstream is

struct nvcomp_table {
  status_t (*get_properties)(properties*) = nullptr;
  const char* (*status_string)(status_t) = nullptr;  // optional
  status_t (*zstd_alignments)(zstd_decompress_opts, alignment_requirements*) = nullptr;
  status_t (*zstd_temp_size)(std::size_t num_chunks, std::size_t max_chunk_bytes, zstd_decompress_opts,
                             std::size_t* temp_bytes, std::size_t max_total_bytes, cuda_stream) = nullptr;
  status_t (*zstd_decompress)(const void* const* compressed, const std::size_t* compressed_bytes,
                              const std::size_t* buffer_bytes, std::size_t* decompressed_bytes, std::size_t num_chunks,
                              void* temp, std::size_t temp_bytes, void* const* out, zstd_decompress_opts,
                              status_t* statuses, cuda_stream) = nullptr;
};

// Never destroyed, as the other loaders' state.
struct nvcomp_state {
  std::once_flag once;
  nvcomp_info info;
  nvcomp_table table;
  alignment_requirements align;
};

nvcomp_state& state() {
  static auto* s = new nvcomp_state;
  return *s;
}

// set_nvcomp_default_library's path, and whether nvCOMP was examined (after
// which the path no longer counts).
struct default_library {
  std::mutex mutex;
  std::string path;
  bool examined = false;
};

default_library& the_default() {
  static auto* d = new default_library;
  return *d;
}

// The default path, marking nvCOMP examined.
std::string take_default() {
  default_library& d = the_default();
  std::lock_guard lock(d.mutex);
  d.examined = true;
  return d.path;
}

std::string version_text(std::uint32_t v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 100) + "." + std::to_string(v % 100);
}

std::string status_text(const nvcomp_table& t, status_t st) {
  // The names of nvcompStatus_t, for a library without the string entry.
  std::string name;
  switch (st) {
    case 10: name = "nvcompErrorInvalidValue"; break;
    case 11: name = "nvcompErrorNotSupported"; break;
    case 12: name = "nvcompErrorCannotDecompress"; break;
    case 13: name = "nvcompErrorBadChecksum"; break;
    case 15: name = "nvcompErrorOutputBufferTooSmall"; break;
    case 16: name = "nvcompErrorWrongHeaderLength"; break;
    case 17: name = "nvcompErrorAlignment"; break;
    case 18: name = "nvcompErrorChunkSizeTooLarge"; break;
    default: name = "nvCOMP status " + std::to_string(st); break;
  }
  if (t.status_string != nullptr) {
    if (const char* s = t.status_string(st); s != nullptr && *s != '\0' && name.find(s) == std::string::npos) {
      name += std::string(" (") + s + ")";
    }
  }
  return name;
}

void compute(nvcomp_state& s, const std::string& default_path) {
  nvcomp_info& info = s.info;
  std::string mode = "auto";
  if (const char* env = std::getenv("CUARROW_NVCOMP"); env != nullptr && *env != '\0') mode = env;
  if (mode != "off" && mode != "auto") {
    info.mode = "off";
    info.reason = "CUARROW_NVCOMP=" + mode + " is not one of off, auto: nvCOMP is not used";
    return;
  }
  info.mode = mode;
  if (mode == "off") {
    info.reason = "CUARROW_NVCOMP=off: libnvcomp is not loaded";
    return;
  }
  const char* chosen = std::getenv("CUARROW_NVCOMP_LIBRARY");
  const bool explicit_library = chosen != nullptr && *chosen != '\0';
  info.library = explicit_library ? chosen : !default_path.empty() ? default_path : kDefaultLibrary;
  try {
    if (driver().emulated && !explicit_library) {
      info.reason =
          "the CUDA driver is cuarrow's host emulation: libnvcomp (which runs kernels on the real driver) is not "
          "loaded; set CUARROW_NVCOMP_LIBRARY to load one anyway";
      return;
    }
  } catch (const std::exception& e) {
    info.reason = std::string("no CUDA driver, so no nvCOMP: ") + e.what();
    return;
  }
  void* lib = dlopen(info.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    info.reason = "libnvcomp not found (" + info.library + ": " + (why ? why : "unknown dlopen error") +
                  "): compressed bodies are decompressed on the host. Install nvCOMP 6 (pip install "
                  "nvidia-libnvcomp-cu13) or point CUARROW_NVCOMP_LIBRARY at libnvcomp.so.6 to use it";
    return;
  }
  nvcomp_table t;
  std::string missing;
  auto find = [&](auto& fn, const char* name, bool required) {
    void* p = dlsym(lib, name);
    if (p == nullptr && required) missing += (missing.empty() ? "" : ", ") + std::string(name);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  find(t.get_properties, "nvcompGetProperties", true);
  find(t.status_string, "nvcompGetStatusString", false);
  find(t.zstd_alignments, "nvcompBatchedZstdDecompressGetRequiredAlignments", true);
  find(t.zstd_temp_size, "nvcompBatchedZstdDecompressGetTempSize", true);
  find(t.zstd_decompress, "nvcompBatchedZstdDecompressAsync", true);
  if (!missing.empty()) {
    info.reason = info.library + " lacks " + missing + ", which cuarrow calls: not a usable nvCOMP 6";
    return;
  }
  properties p;
  if (const status_t st = t.get_properties(&p); st != 0) {
    info.reason = "nvcompGetProperties failed: " + status_text(t, st);
    return;
  }
  info.version = version_text(p.version);
  if (p.version / 1000 != kMajorVersion) {
    info.reason = info.library + " is nvCOMP " + info.version + "; cuarrow calls the nvCOMP " +
                  std::to_string(kMajorVersion) + " API, whose signatures differ: not used";
    return;
  }
  alignment_requirements a;
  if (const status_t st = t.zstd_alignments(zstd_decompress_opts{}, &a); st != 0) {
    info.reason = "nvcompBatchedZstdDecompressGetRequiredAlignments failed: " + status_text(t, st);
    return;
  }
  s.table = t;
  s.align = a;
  info.available = true;
  info.reason = "nvCOMP " + info.version + " (" + info.library +
                ") decompresses ZSTD bodies on the GPU for the readers that ask for it";
}

const nvcomp_state& computed() {
  nvcomp_state& s = state();
  std::call_once(s.once, [&] {
    try {
      compute(s, take_default());
    } catch (const std::exception& e) {  // std::bad_alloc, nothing else throws
      s.info.reason = std::string("nvCOMP could not be examined: ") + e.what();
    }
  });
  return s;
}

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// A device allocation freed when it goes out of scope (after the stream
// work that used it was waited for).
struct device_scratch {
  CUdeviceptr p = 0;
  ~device_scratch() {
    if (p == 0 || shutting_down()) return;
    if (const CUresult r = driver().cuMemFree(p); r != CUDA_SUCCESS) warn_result(r, "cuMemFree (nvCOMP scratch)");
  }
};

}  // namespace

std::size_t gpu_zstd_alignment() noexcept {
  const nvcomp_state& s = computed();
  return s.info.available ? std::max(s.align.input, s.align.output) : 0;
}

std::vector<std::string> gpu_zstd_decompress(CUcontext ctx, std::span<const gpu_zstd_chunk> chunks, CUstream s) {
  const nvcomp_state& st = computed();
  if (!st.info.available) throw error("GPU decompression asked for, but nvCOMP is not available: " + st.info.reason);
  const nvcomp_table& t = st.table;
  const std::size_t n = chunks.size();
  std::vector<std::string> out(n);
  if (n == 0) return out;

  std::size_t max_chunk = 0, total = 0;
  for (const gpu_zstd_chunk& c : chunks) {
    max_chunk = std::max(max_chunk, c.size);
    total += c.size;
  }
  scoped_context guard(ctx);
  std::size_t temp_bytes = 0;
  if (const status_t r = t.zstd_temp_size(n, max_chunk, zstd_decompress_opts{}, &temp_bytes, total, s); r != 0) {
    throw error("nvcompBatchedZstdDecompressGetTempSize failed for " + std::to_string(n) +
                " chunks: " + status_text(t, r));
  }
  // One allocation: the four argument arrays of n words (compressed
  // pointers and sizes, output sizes, output pointers), the decompressed
  // sizes and the statuses nvCOMP writes (adjacent: one copy back), then
  // the temporary space at nvCOMP's alignment.
  const std::size_t args = 4 * n;
  const std::size_t results_at = args * 8;
  const std::size_t results_bytes = n * 8 + n * sizeof(status_t);
  const std::size_t temp_at = round_up(results_at + results_bytes, std::max<std::size_t>(st.align.temp, 256));
  const std::size_t size = temp_at + std::max<std::size_t>(temp_bytes, 1);
  device_scratch scratch;
  check_alloc(driver().cuMemAlloc(&scratch.p, size), "cuMemAlloc (nvCOMP scratch)", static_cast<std::int64_t>(size));

  std::vector<std::uint64_t> host(args);
  for (std::size_t i = 0; i < n; ++i) {
    host[i] = chunks[i].compressed;
    host[n + i] = chunks[i].compressed_size;
    host[2 * n + i] = chunks[i].size;
    host[3 * n + i] = chunks[i].out;
  }
  check(driver().cuMemcpyHtoDAsync(scratch.p, host.data(), results_at, s), "cuMemcpyHtoDAsync (nvCOMP arguments)");
  const CUdeviceptr base = scratch.p;
  auto at = [&](std::size_t word) { return reinterpret_cast<void*>(base + word * 8); };
  const status_t launched =
      t.zstd_decompress(static_cast<const void* const*>(at(0)), static_cast<const std::size_t*>(at(n)),
                        static_cast<const std::size_t*>(at(2 * n)), static_cast<std::size_t*>(at(4 * n)), n,
                        reinterpret_cast<void*>(base + temp_at), temp_bytes, static_cast<void* const*>(at(3 * n)),
                        zstd_decompress_opts{}, reinterpret_cast<status_t*>(base + results_at + n * 8), s);
  if (launched != 0) {
    check(driver().cuStreamSynchronize(s), "cuStreamSynchronize (after nvCOMP refused a call)");
    throw error("nvcompBatchedZstdDecompressAsync refused " + std::to_string(n) +
                " chunks: " + status_text(t, launched));
  }
  std::vector<std::byte> back(results_bytes);
  check(driver().cuMemcpyDtoHAsync(back.data(), base + results_at, results_bytes, s),
        "cuMemcpyDtoHAsync (nvCOMP sizes and statuses)");
  check(driver().cuStreamSynchronize(s), "cuStreamSynchronize (nvCOMP decompression)");
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t got = 0;
    status_t code = 0;
    std::memcpy(&got, back.data() + i * 8, 8);
    std::memcpy(&code, back.data() + n * 8 + i * sizeof(status_t), sizeof(status_t));
    if (code != 0) {
      out[i] = "nvCOMP cannot decompress it: " + status_text(t, code);
    } else if (got != chunks[i].size) {
      out[i] = "nvCOMP decompressed it to " + std::to_string(got) + " bytes, not the " +
               std::to_string(chunks[i].size) + " its length prefix declares";
    }
  }
  return out;
}

}  // namespace detail

nvcomp_info nvcomp_status() {
  try {
    return detail::computed().info;
  } catch (...) {  // copying the strings ran out of memory
    return {};
  }
}

bool set_nvcomp_default_library(std::string path) {
  detail::default_library& d = detail::the_default();
  std::lock_guard lock(d.mutex);
  if (d.examined) return false;
  d.path = std::move(path);
  return true;
}

}  // namespace cuarrow
