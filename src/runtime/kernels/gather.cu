// cuarrow's gather kernel: many copies within one device in one launch
// (gather_args.h).  Built by nvcc into a fatbin that the library embeds and
// loads per context (gather.cpp); the driver calls of a copy each cost the
// H200 machine about 5 us of host time, so a stream of thousands of pieces
// went at a quarter of the device's copy bandwidth.
#include "gather_args.h"

namespace {

// How the copy loops read and write their words.  plain_access: plain
// loads and stores.  streaming_stores, the kernel's: plain loads,
// cache-streaming stores (st.global.cs: the written lines marked
// evict-first, as a copy writes each byte once and does not read it back).
// bench/gather_probe.cu times others through the same loops.
struct plain_access {
  template <class Word>
  __device__ static Word load(const Word* p) {
    return *p;
  }
  template <class Word>
  __device__ static void store(Word* p, const Word& v) {
    *p = v;
  }
};

struct streaming_stores : plain_access {
  template <class Word>
  __device__ static void store(Word* p, const Word& v) {
    __stcs(p, v);
  }
};

// Copies bytes [begin, end) of one item with this block's threads, in the
// widest words both sides share the alignment of, `InFlight` loads a thread
// before their stores (bench/gather_probe.cu times other counts).  The
// words start where the destination is `Align`-byte aligned (a multiple of
// the word; the kernel's 16-byte words at its cache lines, kLine), the
// bytes before them one at a time.
template <class Word, int InFlight = 4, class Access = plain_access, uint64_t Align = sizeof(Word)>
__device__ void copy_words(unsigned char* __restrict__ dst, const unsigned char* __restrict__ src, uint64_t begin,
                           uint64_t end) {
  constexpr uint64_t w = sizeof(Word);
  static_assert(Align % w == 0, "the words start at a word boundary");
  // Bytes before the first aligned word, and after the last.
  uint64_t head = (Align - (reinterpret_cast<uint64_t>(dst + begin) % Align)) % Align;
  if (head > end - begin) head = end - begin;
  const uint64_t body_begin = begin + head;
  const uint64_t words = (end - body_begin) / w;
  const uint64_t body_end = body_begin + words * w;
  for (uint64_t i = begin + threadIdx.x; i < body_begin; i += blockDim.x) dst[i] = src[i];
  Word* __restrict__ d = reinterpret_cast<Word*>(dst + body_begin);
  const Word* __restrict__ s = reinterpret_cast<const Word*>(src + body_begin);
  // Four loads in flight by default: a tile of 16-byte words is 16 a
  // thread, four rounds of this.
  const uint64_t stride = blockDim.x;
  uint64_t i = threadIdx.x;
  for (; i + (InFlight - 1) * stride < words; i += InFlight * stride) {
    Word v[InFlight];
#pragma unroll
    for (int k = 0; k < InFlight; ++k) v[k] = Access::load(s + i + k * stride);
#pragma unroll
    for (int k = 0; k < InFlight; ++k) Access::store(d + i + k * stride, v[k]);
  }
  for (; i < words; i += stride) Access::store(d + i, Access::load(s + i));
  for (uint64_t i = body_end + threadIdx.x; i < end; i += blockDim.x) dst[i] = src[i];
}

// Bytes [begin, end) of a piece of `size` bytes whose sides share 8-byte
// alignment but not 16 (in an IPC body, about half the buffers: the body
// packs them at 8 bytes): 16-byte stores, each from two aligned 16-byte
// loads of the source (the upper half of one, the lower half of the next),
// four stores in flight; the bytes around that body by 8-byte words.  The
// loads may reach up to 8 bytes before `begin` and 8 past `end` (the
// neighbouring tiles' bytes), never outside the piece's source bytes.  A
// tile after the piece's first starts at a destination line (gather_args.h),
// so that it has no bytes before its 16-byte stores, nor after them but at
// the piece's end.  On the H100 this moved such pieces 7% faster than
// 8-byte words did (gather_probe: 1.69 ms against 1.82 ms for 2.36 GB in
// 160 pieces, docs/gpu-runs/2026-12-05-1603-h100.md).
template <class Access = plain_access, uint64_t Align = 16>
__device__ void copy_shifted8(unsigned char* __restrict__ dst, const unsigned char* __restrict__ src, uint64_t begin,
                              uint64_t end, uint64_t size) {
  // The first x >= begin, and >= 8, at which dst + x is Align-byte aligned
  // (so 16-byte: src + x is then 8 past a 16-byte boundary, and src + x - 8
  // is the first load, within the piece).
  uint64_t p = begin < 8 ? 8 : begin;
  p += (Align - (reinterpret_cast<uint64_t>(dst + p) % Align)) % Align;
  // The stores at p + 16 i end by `end`; their second loads, 8 bytes
  // further, by the piece's end.
  const uint64_t last = size >= 8 ? size - 8 : 0;
  const uint64_t limit = end < last ? end : last;
  const uint64_t words = limit >= p + 16 ? (limit - p) / 16 : 0;
  if (words == 0) {
    copy_words<unsigned long long, 4, Access>(dst, src, begin, end);
    return;
  }
  copy_words<unsigned long long, 4, Access>(dst, src, begin, p);
  const uint4* __restrict__ s = reinterpret_cast<const uint4*>(src + p - 8);
  uint4* __restrict__ d = reinterpret_cast<uint4*>(dst + p);
  const uint64_t stride = blockDim.x;
  uint64_t i = threadIdx.x;
  for (; i + 3 * stride < words; i += 4 * stride) {
    uint4 lo[4], hi[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      lo[k] = Access::load(s + i + k * stride);
      hi[k] = Access::load(s + i + k * stride + 1);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) Access::store(d + i + k * stride, make_uint4(lo[k].z, lo[k].w, hi[k].x, hi[k].y));
  }
  for (; i < words; i += stride) {
    const uint4 lo = Access::load(s + i), hi = Access::load(s + i + 1);
    Access::store(d + i, make_uint4(lo.z, lo.w, hi.x, hi.y));
  }
  copy_words<unsigned long long, 4, Access>(dst, src, p + 16 * words, end);
}

// Where the 16-byte stores start: the destination's cache lines, where the
// tiles after a piece's first start too (gather_args.h).
constexpr uint64_t kLine = CUARROW_GATHER_LINE;

}  // namespace

extern "C" __global__ void __launch_bounds__(CUARROW_GATHER_THREADS)
    cuarrow_gather(const __grid_constant__ cuarrow_gather_args args) {
  uint32_t index = 0;
  CUARROW_GATHER_FIND(args, blockIdx.x, index);
  const cuarrow_gather_item& it = args.items[index];
  // Left unset until cuarrow_gather_range sets them: set to 0 first, nvcc
  // 13 once built the kernel with fewer loads in flight (3% slower).  Built
  // as it is (nvcc 13.0, sm_90) it uses 56 registers, 4 blocks an SM.
  uint64_t begin, end;
  if (!cuarrow_gather_range(it.dst, it.size, it.first_tile, blockIdx.x, &begin, &end)) return;
  auto* dst = reinterpret_cast<unsigned char*>(it.dst);
  const auto* src = reinterpret_cast<const unsigned char*>(it.src);
  const uint64_t shared = it.dst ^ it.src;
  // 16-byte words four in flight; pieces sharing only 8-byte alignment by
  // 16-byte stores; 4- and 1-byte words 32 bytes in flight (what the probe's
  // variants measured best, docs/gpu-runs/2026-12-05-1603-h100.md).  The
  // 16-byte stores start at the destination's 128-byte lines, so that no
  // line is written by two warps: 1-1.4% faster than from 16-byte
  // boundaries for 160 to 4,000 pieces on the H100 (gather_probe, 2.36 GB:
  // 1.664 ms against 1.687 for 160 pieces packed at 8 bytes;
  // docs/gpu-runs/2026-12-05-2211-h100.md).  Cache-streaming stores and
  // 16 KiB tiles (gather_args.h) took 160 pieces from 0.93 x one copy of
  // every byte to 0.99 x on an H100, 4,000 from 0.92 x to 0.98 x
  // (bench/results/2026-12-06-0700-h100-gather).
  if (shared % 16 == 0) copy_words<uint4, 4, streaming_stores, kLine>(dst, src, begin, end);
  else if (shared % 8 == 0) copy_shifted8<streaming_stores, kLine>(dst, src, begin, end, it.size);
  else if (shared % 4 == 0) copy_words<unsigned int, 8, streaming_stores>(dst, src, begin, end);
  else copy_words<unsigned char, 32, streaming_stores>(dst, src, begin, end);
}
