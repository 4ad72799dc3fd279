// How fast cuarrow's gather kernel (src/runtime/kernels/gather.cu, compiled
// into this program as the library ships it) moves many pieces within one
// device, beside the copy engines: one cudaMemcpyAsync of all the bytes (the
// raw device-to-device figure of issue 14), one cudaMemcpyAsync per piece
// (what cuarrow did for runs of 8 MiB or more before the H100 run of
// 2026-12-05, and does under transfer_options::device_gather_max_run_bytes),
// and variants of the kernel (tile size, loads in flight per thread).  The pieces are laid out as
// an IPC stream lays out a table's buffers: sources 64-byte aligned (device
// buffers), destinations 8-byte aligned and packed (the body's padding), so
// about half of them share only 8-byte alignment with their source.  A
// second set has every piece 16-byte aligned on both sides.
//
//   cuarrow_gather_probe [--bytes N] [--reps N] [--out results.json]
//
// Every case runs --reps times (11) after one warm-up; the figure is the
// median of the GPU time between two events around the case, and the
// host's time to queue it.  Each case's result is checked against the
// source (a kernel counts mismatched bytes): a wrong copy is a failure
// (exit code 1), not a figure.  Built by scripts/gpu-suite.sh prepare where
// nvcc is (tests/arrow/CMakeLists.txt); runs on a GPU only.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "../src/runtime/kernels/gather.cu"

namespace {

#define CHECK(call)                                                                              \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

// A variant of the kernel: `Tile` bytes a block, `Wide` 16-byte loads in
// flight a thread and `Narrow` 8-byte ones (4- and 1-byte words get
// Narrow * 8 bytes' worth), through the shipped kernel's own copy loops
// (copy_words, copy_shifted8).  The shipped kernel is <64 KiB, 4, 0>.
template <class Word, int Bytes>
constexpr int in_flight = Bytes / static_cast<int>(sizeof(Word)) > 0 ? Bytes / static_cast<int>(sizeof(Word)) : 1;

// Cache-streaming loads and/or stores (ld.global.cs / st.global.cs: the
// lines are marked evict-first, as a copy reads and writes each byte
// once), the others the kernel's own (plain_access), through the shipped
// copy loops.
template <bool Loads, bool Stores>
struct streaming {
  template <class Word>
  __device__ static Word load(const Word* p) {
    if constexpr (Loads) return __ldcs(p);
    else return plain_access::load(p);
  }
  template <class Word>
  __device__ static void store(Word* p, const Word& v) {
    if constexpr (Stores) __stcs(p, v);
    else plain_access::store(p, v);
  }
};

// Narrow == 0: pieces that share 8-byte alignment only go by the shipped
// kernel's copy_shifted8 (16-byte stores); Narrow > 0: by 8-byte words,
// Narrow loads in flight.  Access: how the loops load and store.  Align:
// where the 16-byte stores start (128, the shipped kernel's: at the
// destination's cache lines, so that no warp's stores straddle a 32-byte
// sector they share with another's, the pieces of an IPC body starting at
// 8-byte boundaries; 16: the kernel before 2026-12-05 23:00).
//
// Lines: the tiles after a piece's first start at the destination's lines
// (the shipped rule, gather_args.h's cuarrow_gather_range, since
// 2026-12-06); false: at multiples of Tile from the piece's start (the
// kernel before), each 8-byte-packed piece's tiles then having bytes
// before and after their 16-byte stores (their 16-byte loads kept within
// the tile, as that kernel's were).
template <uint64_t Tile, int Wide, int Narrow, class Access = plain_access, uint64_t Align = 128, bool Lines = true>
__device__ void copy_tile(const cuarrow_gather_args& args, uint32_t tile) {
  uint32_t index = 0;
  CUARROW_GATHER_FIND(args, tile, index);  // the shipped search; the tile's bytes by this Tile
  const cuarrow_gather_item& it = args.items[index];
  const uint64_t k = tile - it.first_tile;
  const uint64_t lead = Lines ? (CUARROW_GATHER_LINE - it.dst % CUARROW_GATHER_LINE) % CUARROW_GATHER_LINE : 0;
  const uint64_t b = k == 0 ? 0 : k * Tile + lead;
  if (b >= it.size) return;
  const uint64_t e = (k + 1) * Tile + lead < it.size ? (k + 1) * Tile + lead : it.size;
  auto* dst = reinterpret_cast<unsigned char*>(it.dst);
  const auto* src = reinterpret_cast<const unsigned char*>(it.src);
  const uint64_t shared = it.dst ^ it.src;
  constexpr int narrow = Narrow > 0 ? Narrow : 4;
  if (shared % 16 == 0) copy_words<uint4, Wide, Access, Align>(dst, src, b, e);
  else if (shared % 8 == 0 && Narrow == 0) copy_shifted8<Access, Align>(dst, src, b, e, Lines ? it.size : e);
  else if (shared % 8 == 0) copy_words<unsigned long long, narrow, Access>(dst, src, b, e);
  else if (shared % 4 == 0) copy_words<unsigned int, in_flight<unsigned int, narrow * 8>, Access>(dst, src, b, e);
  else copy_words<unsigned char, in_flight<unsigned char, narrow * 8>, Access>(dst, src, b, e);
}

// A block a tile, as the shipped kernel launches.
template <uint64_t Tile, int Wide, int Narrow, class Access = plain_access, uint64_t Align = 128, bool Lines = true>
__global__ void __launch_bounds__(CUARROW_GATHER_THREADS)
    gather_variant(const __grid_constant__ cuarrow_gather_args args) {
  copy_tile<Tile, Wide, Narrow, Access, Align, Lines>(args, blockIdx.x);
}

// (Resident blocks walking the tiles, a grid of what the SMs hold at once,
// were 6-9% slower than a block a tile on H100s at every piece count and
// tile size: bench/results/2026-12-06-0443-h100-probes and
// 2026-12-06-0700-h100-gather; no longer timed.)

__global__ void fill_pattern(unsigned char* p, uint64_t n) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    p[i] = static_cast<unsigned char>((i * 131 + 7) >> 3);
  }
}

__global__ void count_mismatches(const unsigned char* a, const unsigned char* b, uint64_t n, unsigned long long* bad) {
  unsigned long long mine = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    mine += a[i] != b[i];
  }
  if (mine) atomicAdd(bad, mine);
}

struct piece {
  uint64_t dst, src, size;
};

// `count` pieces of about bytes / count each, sources 64-byte aligned in
// `src`, destinations packed at 8-byte alignment (or 16 with aligned16) in
// `dst`.
std::vector<piece> layout(uint64_t src, uint64_t dst, uint64_t bytes, int count, bool aligned16) {
  std::vector<piece> out;
  const uint64_t each = bytes / static_cast<uint64_t>(count);
  uint64_t s = 0, d = 0;
  for (int k = 0; k < count; ++k) {
    // Sizes vary a little (a multiple of 8), as a table's buffers do.
    uint64_t size = each - (static_cast<uint64_t>(k % 7) * 8);
    if (!aligned16 && k % 2 == 1) size -= 8;  // the next destination starts 8 past a 16-byte boundary
    out.push_back({dst + d, src + s, size});
    s += (size + 63) / 64 * 64;
    d += aligned16 ? (size + 15) / 16 * 16 : (size + 7) / 8 * 8;
  }
  return out;
}

template <class Launch>
void launch_all(const std::vector<piece>& ps, uint64_t tile, cuarrow_gather_args& args, Launch launch) {
  uint32_t tiles = 0;
  args.count = 0;
  for (const piece& p : ps) {
    if (args.count == CUARROW_GATHER_MAX_ITEMS) {
      launch(args, tiles);
      args.count = 0;
      tiles = 0;
    }
    auto& it = args.items[args.count++];
    it.dst = p.dst;
    it.src = p.src;
    it.size = p.size;
    it.first_tile = tiles;
    tiles += static_cast<uint32_t>((p.size + tile - 1) / tile);
  }
  if (args.count > 0) launch(args, tiles);
}

struct figure {
  std::string name, layout;
  int pieces = 0;
  uint64_t bytes = 0;
  double gpu_ms = 0, host_ms = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t bytes = 2360000000ull;
  int reps = 11;
  std::string out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bytes" && i + 1 < argc) bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--out" && i + 1 < argc) out_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--bytes N] [--reps N] [--out results.json]\n", argv[0]);
      return 2;
    }
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  unsigned char *src = nullptr, *dst = nullptr, *expect = nullptr;
  unsigned long long* bad = nullptr;
  const uint64_t room = bytes + bytes / 16 + (1 << 20);
  CHECK(cudaMalloc(&src, room));
  CHECK(cudaMalloc(&dst, room));
  CHECK(cudaMalloc(&expect, room));
  CHECK(cudaMalloc(&bad, sizeof(unsigned long long)));
  fill_pattern<<<4096, 256>>>(src, room);
  CHECK(cudaGetLastError());
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  auto* args = new cuarrow_gather_args;
  std::vector<figure> figures;
  int failures = 0;

  for (bool aligned16 : {false, true}) {
    for (int count : {1, 160, 1000, 4000}) {
      const auto ps = layout(reinterpret_cast<uint64_t>(src), reinterpret_cast<uint64_t>(dst), bytes, count, aligned16);
      uint64_t covered = 0;
      for (const piece& p : ps) covered += p.size;
      // The expected destination: the pieces copied by the copy engines.
      CHECK(cudaMemsetAsync(expect, 0, room, st));
      for (const piece& p : ps) {
        CHECK(cudaMemcpyAsync(expect + (p.dst - reinterpret_cast<uint64_t>(dst)), reinterpret_cast<void*>(p.src),
                              p.size, cudaMemcpyDeviceToDevice, st));
      }
      const uint64_t span = ps.back().dst + ps.back().size - reinterpret_cast<uint64_t>(dst);
      struct kase {
        const char* name;
        std::function<void()> run;
      };
      std::vector<kase> cases;
      cases.push_back({"one cudaMemcpyAsync of every byte (raw D2D)",
                       [&] { CHECK(cudaMemcpyAsync(dst, src, covered, cudaMemcpyDeviceToDevice, st)); }});
      cases.push_back({"cudaMemcpyAsync per piece (copy engines)", [&] {
                         for (const piece& p : ps) {
                           CHECK(cudaMemcpyAsync(reinterpret_cast<void*>(p.dst), reinterpret_cast<void*>(p.src), p.size,
                                                 cudaMemcpyDeviceToDevice, st));
                         }
                       }});
      cases.push_back({"cuarrow_gather as shipped (16 KiB tiles, cache-streaming stores)", [&] {
                         launch_all(ps, CUARROW_GATHER_TILE, *args, [&](cuarrow_gather_args& a, uint32_t tiles) {
                           cuarrow_gather<<<tiles, CUARROW_GATHER_THREADS, 0, st>>>(a);
                           CHECK(cudaGetLastError());
                         });
                       }});
      auto variant = [&](auto kernel, uint64_t tile) {
        return [&, kernel, tile] {
          launch_all(ps, tile, *args, [&](cuarrow_gather_args& a, uint32_t tiles) {
            kernel<<<tiles, CUARROW_GATHER_THREADS, 0, st>>>(a);
            CHECK(cudaGetLastError());
          });
        };
      };
      using cs_stores = streaming_stores;  // the shipped kernel's access (gather.cu)
      // The kernel before 2026-12-06 08:00: 64 KiB tiles, plain stores.
      cases.push_back({"variant: 64 KiB tiles, plain stores (the kernel before 2026-12-06 08:00)",
                       variant(gather_variant<64u << 10, 4, 0>, 64u << 10)});
      // The tile rule before 2026-12-06 07:00: tiles at multiples of the
      // tile size from each piece's start, so that an 8-byte-packed
      // piece's tiles all begin and end off the destination's lines.
      cases.push_back({"variant: tiles at multiples of 16 KiB from the piece's start",
                       variant(gather_variant<16u << 10, 4, 0, cs_stores, 128, false>, 16u << 10)});
      // Each of the two changes of 08:00 alone, and settings about them
      // (on the H100 of 07:00, 128 and 256 KiB tiles, 2 or 8 loads in
      // flight and resident blocks were all slower than 64 KiB tiles:
      // bench/results/2026-12-06-0700-h100-gather).
      cases.push_back({"variant: 16 KiB tiles, plain stores", variant(gather_variant<16u << 10, 4, 0>, 16u << 10)});
      cases.push_back({"variant: 64 KiB tiles, cache-streaming stores",
                       variant(gather_variant<64u << 10, 4, 0, cs_stores>, 64u << 10)});
      cases.push_back({"variant: 32 KiB tiles, cache-streaming stores",
                       variant(gather_variant<32u << 10, 4, 0, cs_stores>, 32u << 10)});
      cases.push_back({"variant: 8 KiB tiles, cache-streaming stores",
                       variant(gather_variant<8u << 10, 4, 0, cs_stores>, 8u << 10)});
      cases.push_back({"variant: 16 KiB tiles, cache-streaming loads and stores",
                       variant(gather_variant<16u << 10, 4, 0, streaming<true, true>>, 16u << 10)});
      cases.push_back({"variant: 16 KiB tiles, cache-streaming stores, 2 x 16 B in flight a thread",
                       variant(gather_variant<16u << 10, 2, 0, cs_stores>, 16u << 10)});
      // The shipped kernel's own settings again, after the others: a check
      // that the order of the cases, and the build, do not move the figures
      // (until 8ce8e90 the shipped kernel, built with fewer registers, ran
      // 3-4% slower than this).
      cases.push_back(
          {"variant: the shipped settings (16 KiB tiles from the destination's lines, cache-streaming stores)",
           variant(gather_variant<16u << 10, 4, 0, cs_stores>, 16u << 10)});
      for (std::size_t c = 0; c < cases.size(); ++c) {
        if (c == 0 && count != 1) continue;  // the raw figure once per layout kind
        CHECK(cudaMemsetAsync(dst, 0, room, st));
        cases[c].run();  // warm-up, then checked
        CHECK(cudaMemsetAsync(bad, 0, sizeof(unsigned long long), st));
        count_mismatches<<<4096, 256, 0, st>>>(dst, c == 0 ? src : expect, c == 0 ? covered : span, bad);
        unsigned long long nbad = 0;
        CHECK(cudaMemcpyAsync(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost, st));
        CHECK(cudaStreamSynchronize(st));
        if (nbad != 0) {
          std::fprintf(stderr, "WRONG: %s, %d pieces (%s): %llu bytes differ\n", cases[c].name, count,
                       aligned16 ? "16-byte aligned" : "8-byte aligned", nbad);
          ++failures;
          continue;
        }
        // 50 ms of the case's own work first: the SMs' clocks rise under
        // load, and on the H100 the first kernel case, which follows the
        // copy engines' cases, ran 3-6% slower than the same code later.
        const auto warm = std::chrono::steady_clock::now();
        do {
          cases[c].run();
          CHECK(cudaStreamSynchronize(st));
        } while (std::chrono::steady_clock::now() - warm < std::chrono::milliseconds(50));
        std::vector<double> gpu, host;
        for (int r = 0; r < reps; ++r) {
          CHECK(cudaStreamSynchronize(st));
          const auto t0 = std::chrono::steady_clock::now();
          CHECK(cudaEventRecord(e0, st));
          cases[c].run();
          CHECK(cudaEventRecord(e1, st));
          const auto t1 = std::chrono::steady_clock::now();
          CHECK(cudaEventSynchronize(e1));
          float ms = 0;
          CHECK(cudaEventElapsedTime(&ms, e0, e1));
          gpu.push_back(ms);
          host.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        figure f{cases[c].name,      aligned16 ? "16-byte aligned" : "8-byte aligned destinations",
                 c == 0 ? 1 : count, covered,
                 median(gpu),        median(host)};
        std::printf("%-50s %-28s %5d pieces  %8.3f ms GPU (%7.1f GB/s)  %8.3f ms to queue\n", f.name.c_str(),
                    f.layout.c_str(), f.pieces, f.gpu_ms, static_cast<double>(f.bytes) / f.gpu_ms / 1e6, f.host_ms);
        std::fflush(stdout);
        figures.push_back(f);
      }
    }
  }
  if (!out_path.empty()) {
    std::ofstream o(out_path);
    o << "{\n \"device\": \"" << prop.name << "\",\n \"bytes\": " << bytes << ",\n \"reps\": " << reps
      << ",\n \"figures\": [\n";
    for (std::size_t i = 0; i < figures.size(); ++i) {
      const figure& f = figures[i];
      o << "  {\"case\": \"" << f.name << "\", \"layout\": \"" << f.layout << "\", \"pieces\": " << f.pieces
        << ", \"bytes\": " << f.bytes << ", \"gpu_ms\": " << f.gpu_ms << ", \"queue_ms\": " << f.host_ms
        << ", \"gbps\": " << static_cast<double>(f.bytes) / f.gpu_ms / 1e6 << "}" << (i + 1 < figures.size() ? "," : "")
        << "\n";
    }
    o << " ],\n \"failures\": " << failures << "\n}\n";
  }
  delete args;
  return failures == 0 ? 0 : 1;
}
