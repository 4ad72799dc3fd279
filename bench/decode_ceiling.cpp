// The host's own decode ceiling for a compressed read (issue 14's ZSTD and
// LZ4 targets): the frames of a table's buffers decoded by `threads` C++
// threads, one decompression context each, through the system's libzstd /
// liblz4, from host memory into host memory.  No file, no device, no
// Python between frames: what the machine's cores decode per second.
//
// A shared library for bench/ipc_bench.py (ctypes, one call a round: the
// GIL is released for the whole decode), built with the probes
// (-DCUARROW_BUILD_PROBES=ON: lib/libcuarrow_decode_ceiling.so).
//
//   int cuarrow_decode_ceiling(int codec, size_t count, const void* const* src, const size_t* src_size,
//                              void* const* dst, const size_t* dst_size, int threads,
//                              char* error, size_t error_capacity);
//
// codec: 0 LZ4 frame, 1 ZSTD; frame i (src[i], src_size[i] bytes) decodes
// into exactly dst_size[i] bytes at dst[i].  The threads take frames in
// order from one shared counter.  Returns 0, or -1 with a message in
// `error` (the first failing frame's).
#include <lz4frame.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

// Decodes frame `i`; an empty string when it held exactly its declared size.
std::string decode_lz4(LZ4F_dctx* ctx, const void* src, std::size_t src_size, void* dst, std::size_t dst_size) {
  std::size_t in_pos = 0, out_pos = 0;
  while (in_pos < src_size) {
    std::size_t out_n = dst_size - out_pos, in_n = src_size - in_pos;
    const std::size_t r = LZ4F_decompress(ctx, static_cast<char*>(dst) + out_pos, &out_n,
                                          static_cast<const char*>(src) + in_pos, &in_n, nullptr);
    if (LZ4F_isError(r)) return LZ4F_getErrorName(r);
    in_pos += in_n;
    out_pos += out_n;
    if (r == 0) break;  // the frame's end
    if (in_n == 0 && out_n == 0) return "LZ4F_decompress made no progress";
  }
  if (out_pos != dst_size) return "decoded " + std::to_string(out_pos) + " bytes, expected " + std::to_string(dst_size);
  return {};
}

std::string decode_zstd(ZSTD_DCtx* ctx, const void* src, std::size_t src_size, void* dst, std::size_t dst_size) {
  const std::size_t n = ZSTD_decompressDCtx(ctx, dst, dst_size, src, src_size);
  if (ZSTD_isError(n)) return ZSTD_getErrorName(n);
  if (n != dst_size) return "decoded " + std::to_string(n) + " bytes, expected " + std::to_string(dst_size);
  return {};
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int cuarrow_decode_ceiling(
    int codec, std::size_t count, const void* const* src, const std::size_t* src_size, void* const* dst,
    const std::size_t* dst_size, int threads, char* error, std::size_t error_capacity) {
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  std::string first_error;
  std::size_t first_bad = count;
  auto fail = [&](std::size_t i, std::string why) {
    const std::lock_guard lock(mutex);
    if (i < first_bad) {
      first_bad = i;
      first_error = "frame " + std::to_string(i) + ": " + why;
    }
  };
  auto work = [&] {
    LZ4F_dctx* lz4 = nullptr;
    ZSTD_DCtx* zstd = nullptr;
    if (codec == 0 && LZ4F_isError(LZ4F_createDecompressionContext(&lz4, LZ4F_VERSION))) {
      fail(0, "LZ4F_createDecompressionContext failed");
      return;
    }
    if (codec == 1 && (zstd = ZSTD_createDCtx()) == nullptr) {
      fail(0, "ZSTD_createDCtx failed");
      return;
    }
    for (std::size_t i; (i = next.fetch_add(1)) < count;) {
      std::string why = codec == 0 ? decode_lz4(lz4, src[i], src_size[i], dst[i], dst_size[i])
                                   : decode_zstd(zstd, src[i], src_size[i], dst[i], dst_size[i]);
      if (!why.empty()) {
        fail(i, std::move(why));
        if (codec == 0) LZ4F_resetDecompressionContext(lz4);
      }
    }
    LZ4F_freeDecompressionContext(lz4);
    ZSTD_freeDCtx(zstd);
  };
  if (codec != 0 && codec != 1) {
    first_error = "codec must be 0 (LZ4 frame) or 1 (ZSTD), not " + std::to_string(codec);
  } else {
    std::vector<std::thread> pool;
    const int n = std::max(1, threads);
    pool.reserve(static_cast<std::size_t>(n - 1));
    for (int t = 1; t < n; ++t) pool.emplace_back(work);
    work();  // the caller is one of the threads
    for (std::thread& t : pool) t.join();
  }
  if (first_error.empty()) return 0;
  if (error != nullptr && error_capacity > 0) std::snprintf(error, error_capacity, "%s", first_error.c_str());
  return -1;
}
