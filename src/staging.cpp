// The pinned staging pipeline for pageable host memory (staging.hpp).
#include "staging.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define CUARROW_STREAMING_STORES 1
#endif

#include "copy_sources.hpp"
#include "cuarrow/context.hpp"
#include "cuarrow/error.hpp"
#include "runtime/runtime.hpp"
#include "worker_pool.hpp"

namespace cuarrow {
namespace detail {

std::int64_t env_int(const char* name, std::int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (end != nullptr) {
    if (*end == 'K' || *end == 'k') x <<= 10;
    if (*end == 'M' || *end == 'm') x <<= 20;
    if (*end == 'G' || *end == 'g') x <<= 30;
  }
  return x;
}

namespace {

void validate(const transfer_options& o) {
  if (o.staging_threshold_bytes < 0) throw invalid_argument("staging_threshold_bytes must be >= 0");
  if (o.pinned_pool_limit_bytes < 0) throw invalid_argument("pinned_pool_limit_bytes must be >= 0");
  if (o.staging_streaming_store_limit_bytes < 0) {
    throw invalid_argument("staging_streaming_store_limit_bytes must be >= 0");
  }
  if (o.device_gather_max_run_bytes < 0) {
    throw invalid_argument("device_gather_max_run_bytes must be >= 0 (0: no limit)");
  }
  if (o.staging_chunk_bytes < (64 << 10)) throw invalid_argument("staging_chunk_bytes must be at least 64 KiB");
  if (o.staging_threads < 1 || o.staging_threads > 256) {
    throw invalid_argument("staging_threads must be between 1 and 256");
  }
  if (o.staging_threads_to_device < 1 || o.staging_threads_to_device > 256) {
    throw invalid_argument("staging_threads_to_device must be between 1 and 256");
  }
}

struct options_state {
  std::mutex mutex;
  transfer_options options;
  options_state() {
    options.staging_threshold_bytes = env_int("CUARROW_STAGING_THRESHOLD", options.staging_threshold_bytes);
    options.staging_chunk_bytes = env_int("CUARROW_STAGING_CHUNK", options.staging_chunk_bytes);
    // Never more threads than the machine has (the default is tuned on a
    // 16-core host; a 2-core CI machine gets 2).
    const int hardware = host_cores();
    options.staging_threads = std::clamp(hardware, 1, options.staging_threads);
    options.staging_threads_to_device = std::clamp(hardware, 1, options.staging_threads_to_device);
    options.staging_threads = static_cast<int>(env_int("CUARROW_STAGING_THREADS", options.staging_threads));
    options.staging_threads_to_device =
        static_cast<int>(env_int("CUARROW_STAGING_THREADS_TO_DEVICE", options.staging_threads_to_device));
    options.pinned_pool_limit_bytes = env_int("CUARROW_PINNED_POOL_LIMIT", options.pinned_pool_limit_bytes);
    options.staging_streaming_store_limit_bytes =
        env_int("CUARROW_STAGING_STREAMING_LIMIT", options.staging_streaming_store_limit_bytes);
    options.device_gather = env_int("CUARROW_DEVICE_GATHER", 1) != 0;
    options.device_gather_max_run_bytes = env_int("CUARROW_DEVICE_GATHER_MAX_RUN", options.device_gather_max_run_bytes);
    try {
      validate(options);
    } catch (const error& e) {
      warn(std::string("ignoring the CUARROW_STAGING_* environment: ") + e.what());
      options = transfer_options{};
    }
  }
};

options_state& options() {
  static auto* s = new options_state;
  return *s;
}

// Non-temporal stores out of the slots into the caller's memory (device to
// host): a tuning knob for bench/staging_sweep.py, read once
// (CUARROW_STAGING_NT=2).  They did not pay on the H200 machine with the
// default 12 threads; copies to the device use them up to
// transfer_options::staging_streaming_store_limit_bytes.
bool streaming_stores_to_host() {
  static const bool on = (env_int("CUARROW_STAGING_NT", 0) & 2) != 0;
  return on;
}

// memcpy with non-temporal stores where the CPU has them: the destination's
// cache lines are neither read first nor kept (the copy is larger than the
// caches would keep anyway), which halves the host memory traffic of the
// write side.  Fenced, so that a DMA queued afterwards sees every byte.
void copy_bytes(unsigned char* dst, const unsigned char* src, std::size_t n, bool streaming) {
#ifdef CUARROW_STREAMING_STORES
  if (streaming && n >= 4096) {
    const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16;
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    const std::size_t blocks = n / 64;
    for (std::size_t b = 0; b < blocks; ++b, dst += 64, src += 64) {
      const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
      const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
      const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
      const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst), x0);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), x1);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), x2);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), x3);
    }
    _mm_sfence();
    std::memcpy(dst, src, n % 64);
    return;
  }
#else
  (void)streaming;
#endif
  std::memcpy(dst, src, n);
}

// Pinned staging buffers, two per worker, kept for the process's life (the
// memory is portable: usable from every context).
struct pipeline {
  std::mutex mutex;  // one staged copy at a time; concurrent callers queue
  worker_pool pool;
  std::vector<void*> slots;
  std::size_t slot_bytes = 0;
  CUcontext slot_ctx = nullptr;  // the context the slots were registered in

  // Called with `mutex` held and `ctx` current.  Returns false when pinned
  // memory cannot be had (the caller then copies directly).
  bool ensure_slots(std::size_t count, std::size_t bytes, CUcontext ctx) {
    if (slot_bytes != bytes) {
      retire_slots();
      slot_bytes = bytes;
    }
    if (slots.empty()) slot_ctx = ctx;
    on_release_contexts(release_at_exit);
    while (slots.size() < count) {
      try {
        slots.push_back(allocate_page_locked(bytes, /*mapped=*/false));
      } catch (const std::exception&) {
        return false;
      }
    }
    return true;
  }

  // Called with `mutex` held.  Unpins and frees every slot.
  void retire_slots() noexcept {
    for (void* p : slots) free_page_locked(p, slot_bytes, slot_ctx);
    slots.clear();
  }

  // Before the runtime drops its contexts (exit, cuarrow::shutdown): the
  // slots are unregistered in the context they were registered in.  A copy
  // still running keeps its slots (the lock is not waited for).
  static void release_at_exit() noexcept;
};

pipeline& the_pipeline() {
  static auto* p = new pipeline;
  return *p;
}

void pipeline::release_at_exit() noexcept {
  pipeline& p = the_pipeline();
  std::unique_lock lock(p.mutex, std::try_to_lock);
  if (lock.owns_lock()) p.retire_slots();
}

// A staged job's plan: the pieces cut into segments, each inside one chunk
// (one pinned slot's worth), packed one after another.  A segment with
// `new_run` starts a DMA; the others extend the previous segment's DMA
// (the rest of a piece, a merged neighbour or the gap before it).
struct segment {
  std::size_t slot_offset = 0;
  const unsigned char* src = nullptr;  // host source (to device); null: a gap of zeros
  unsigned char* dst = nullptr;        // host destination (to host); null: dropped
  CUdeviceptr device = 0;
  std::size_t size = 0;
  bool new_run = true;
  const piece_source* source = nullptr;  // instead of src: a file or a callback
  std::size_t source_offset = 0;         // where in its piece the segment starts
  std::uint64_t file_offset = 0;         // to a file sink
  bool gap = false;                      // a merged neighbour's gap (zeros to the device, dropped to the host)
};

struct chunk_range {
  std::size_t first = 0;  // segments [first, end)
  std::size_t end = 0;
};

struct plan {
  std::vector<segment> segments;
  std::vector<chunk_range> chunks;
};

// Chunk capacities for `total` bytes.  With `ramp`, the last round of
// chunks, one per worker, is a quarter of `chunk` and the round before it
// half, so that the last host copies end soon after the last DMA (device to
// host; smaller first chunks did not pay host to device on the H200).
std::vector<std::size_t> capacities(std::size_t total, std::size_t chunk, int workers, bool ramp) {
  std::vector<std::size_t> caps;
  std::size_t sum = 0;
  const std::size_t w = static_cast<std::size_t>(workers);
  const std::size_t floor_bytes = std::min<std::size_t>(chunk, 64 << 10);
  while (sum < total) {
    std::size_t c = chunk;
    if (ramp && workers > 1) {
      if (caps.size() < w) c = std::max(floor_bytes, chunk / 4);
      else if (caps.size() < 2 * w) c = std::max(floor_bytes, chunk / 2);
    }
    caps.push_back(c);
    sum += c;
  }
  std::reverse(caps.begin(), caps.end());  // the small ones last
  return caps;
}

// The chunk size for a produced piece larger than a chunk (`chunk`) whose
// source expects it to decode in parts of `part` bytes: whole parts, as
// many as fit in `chunk`, or one when a part is larger than `chunk` but
// fits in a slot (`slot` bytes); 0 (the usual chunks) when a part does not
// fit in a slot.
std::size_t part_chunk(std::size_t part, std::size_t chunk, std::size_t slot) {
  if (part == 0 || part > slot) return 0;
  return std::min(slot, std::max<std::size_t>(1, chunk / part) * part);
}

plan make_plan(std::span<const staged_piece> pieces, const std::vector<std::size_t>& caps, std::size_t slot_bytes) {
  plan p;
  std::size_t used = 0;
  std::size_t cap = 0;
  std::size_t piece_cap = 0;  // when nonzero, the size of the chunks the current piece opens
  bool joins = false;         // the next segment extends the current DMA
  auto add = [&](const unsigned char* src, unsigned char* dst, CUdeviceptr device, std::size_t n,
                 const piece_source* source, std::uint64_t file_offset, bool gap) {
    std::size_t source_offset = 0;
    while (n > 0) {
      if (p.chunks.empty() || used == cap) {
        p.chunks.push_back(chunk_range{p.segments.size(), p.segments.size()});
        cap = piece_cap != 0 ? piece_cap : caps[std::min(p.chunks.size() - 1, caps.size() - 1)];
        used = 0;
        joins = false;
      }
      const std::size_t take = std::min(n, cap - used);
      p.segments.push_back(segment{used, src, dst, device, take, !joins, source, source_offset, file_offset, gap});
      p.chunks.back().end = p.segments.size();
      used += take;
      joins = true;
      source_offset += take;
      if (src != nullptr) src += take;
      if (dst != nullptr) dst += take;
      device += take;
      file_offset += take;
      n -= take;
    }
  };
  bool have_previous = false;
  CUdeviceptr previous_end = 0;
  for (const staged_piece& piece : pieces) {
    if (piece.size == 0) continue;
    const bool merges = piece.merge_with_previous && have_previous && piece.device >= previous_end;
    // A produced piece (a decompressed buffer) that fits in a chunk starts
    // a new one rather than straddle two: the callback then makes it in one
    // call, straight into the slot.  The gap before it is then left as it is
    // on the device, not zeroed.
    const bool produced = piece.source != nullptr && piece.source->what == piece_source::kind::produce;
    bool fresh = false;
    if (produced && !p.chunks.empty() && piece.size <= caps.front()) {
      const std::size_t gap = merges ? static_cast<std::size_t>(piece.device - previous_end) : 0;
      if (used + gap + piece.size > cap) {
        used = cap;
        fresh = true;
      }
    }
    // A larger one that decodes in parts (a buffer cuarrow wrote) starts a
    // new chunk too, and its chunks end on its parts' bounds: each part is
    // then decoded straight into the slot of the worker that stages it,
    // never into scratch memory that another worker waits for.  Its gap
    // goes with the previous chunk.
    const std::size_t cut =
        produced && piece.size > caps.front() ? part_chunk(piece.source->part_bytes, caps.front(), slot_bytes) : 0;
    if (merges && !fresh) {
      add(nullptr, nullptr, previous_end, static_cast<std::size_t>(piece.device - previous_end), nullptr, 0,
          true);  // the gap
    } else {
      joins = false;
    }
    if (cut != 0) {
      if (!p.chunks.empty()) used = cap;
      piece_cap = cut;
    }
    add(piece.host_src, piece.host_dst, piece.device, piece.size, piece.source, piece.file_offset, false);
    piece_cap = 0;
    have_previous = true;
    previous_end = piece.device + piece.size;
  }
  return p;
}

// Issues one DMA per run of the chunk's segments.
template <class Dma>
void for_each_run(const plan& p, const chunk_range& c, Dma dma) {
  std::size_t i = c.first;
  while (i < c.end) {
    const segment& head = p.segments[i];
    std::size_t n = head.size;
    std::size_t k = i + 1;
    while (k < c.end && !p.segments[k].new_run) n += p.segments[k++].size;
    dma(head.slot_offset, head.device, n);
    i = k;
  }
}

// Copies chunk `c`'s segments into `slot` (gaps as zeros).
void fill_slot(const plan& p, const chunk_range& c, unsigned char* slot, bool streaming) {
  for (std::size_t g = c.first; g < c.end; ++g) {
    const segment& seg = p.segments[g];
    if (seg.source != nullptr) fill_from_source(*seg.source, seg.source_offset, {slot + seg.slot_offset, seg.size});
    else if (seg.src != nullptr) copy_bytes(slot + seg.slot_offset, seg.src, seg.size, streaming);
    else std::memset(slot + seg.slot_offset, 0, seg.size);
  }
}

// The bytes of `captures` (sorted by device address) that land in
// [device, device + n) copied from `host`, the bytes that go there.
void capture_range(std::span<const staged_capture> captures, CUdeviceptr device, const unsigned char* host,
                   std::size_t n) {
  if (captures.empty() || n == 0) return;
  const CUdeviceptr end = device + n;
  // The first capture that may reach into the range (a capture is at most 8 bytes).
  const CUdeviceptr from = device >= 8 ? device - 8 : 0;
  auto it = std::lower_bound(captures.begin(), captures.end(), from,
                             [](const staged_capture& c, CUdeviceptr v) { return c.device < v; });
  for (; it != captures.end() && it->device < end; ++it) {
    const CUdeviceptr lo = std::max(it->device, device);
    const CUdeviceptr hi = std::min(it->device + static_cast<CUdeviceptr>(it->width), end);
    if (lo >= hi) continue;
    std::memcpy(it->out + (lo - it->device), host + (lo - device), static_cast<std::size_t>(hi - lo));
  }
}

// capture_range of every segment of chunk `c`, filled into `slot`.
void capture_chunk(std::span<const staged_capture> captures, const plan& p, const chunk_range& c,
                   const unsigned char* slot) {
  if (captures.empty()) return;
  for (std::size_t g = c.first; g < c.end; ++g) {
    const segment& seg = p.segments[g];
    capture_range(captures, seg.device, slot + seg.slot_offset, seg.size);
  }
}

// One staged job on the pool: the chunks are taken by the workers in turn.
struct job {
  explicit job(std::size_t n) : chunks(n) {}
  std::size_t chunks;
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr error;

  bool take(std::size_t& i) {
    if (failed.load()) return false;
    i = next.fetch_add(1);
    return i < chunks;
  }
  void fail(std::exception_ptr e) {
    std::lock_guard lock(error_mutex);
    if (!error) error = e;
    failed.store(true);
  }
};

// What a worker gets: its two pinned slots and their events.
struct worker_slots {
  void* slot[2];
  runtime_event* event[2];
  char* recorded[2];
};

// Runs `loop(worker_slots&, job&)` on `workers` workers, with the job's
// context current in each (scoped_context) and two slots (with an event
// each) per worker.  Waits for every recorded event before returning (the
// slots are then free for the next job); throws the first failure.  The
// events are created in `ctx`, current on the calling thread; one that
// cannot be created fails the job before any DMA touches a slot.
template <class Loop>
void run_job(CUcontext ctx, job& j, int workers, Loop loop, std::atomic<std::int64_t>* wait_ns = nullptr) {
  pipeline& p = the_pipeline();
  const std::size_t count = static_cast<std::size_t>(workers) * 2;
  std::vector<runtime_event> events;
  events.reserve(count);
  while (events.size() < count) events.emplace_back();
  std::vector<char> recorded(events.size(), 0);
  std::function<void(int)> body = [&](int w) {
    try {
      scoped_context guard(ctx);
      const std::size_t a = static_cast<std::size_t>(w) * 2;
      worker_slots ws{{p.slots[a], p.slots[a + 1]}, {&events[a], &events[a + 1]}, {&recorded[a], &recorded[a + 1]}};
      loop(ws, j);
    } catch (...) {
      j.fail(std::current_exception());
    }
  };
  p.pool.run(workers, body);
  // Every DMA to or from a slot must be over before the slots are reused.
  CUresult first = CUDA_SUCCESS;
  const timed waiting(wait_ns);
  for (std::size_t s = 0; s < events.size(); ++s) {
    if (!recorded[s]) continue;
    const CUresult r = events[s].try_synchronize();
    if (first == CUDA_SUCCESS) first = r;
  }
  if (j.error || first != CUDA_SUCCESS) {
    // A failed job may leave DMAs to or from the slots that no event
    // tracks (a record or a wait failed): never hand those slots to the
    // next job.  Unregistering waits for the DMAs that use them, as the
    // driver does before it unpins; the next job pins fresh ones.
    p.retire_slots();
  }
  if (j.error) std::rethrow_exception(j.error);
  check(first, "cuEventSynchronize");
}

std::size_t total_bytes(std::span<const staged_piece> pieces) {
  std::size_t total = 0;
  for (const staged_piece& piece : pieces) total += piece.size;
  return total;
}

// How many threads write one file.  Buffered writes to one file take its
// inode's lock one at a time on Linux (tmpfs, ext4, xfs), so more threads
// only contend: on the H200 machine write_feather into /dev/shm ran at
// 3.5 GB/s with one writer and 2.2-2.6 with 2 to 12
// (bench/write_scaling_probe.py --cuarrow).  The DMAs still overlap the
// writes (each worker drains one slot while the next fills).
int file_write_threads() {
  static const int n = static_cast<int>(std::clamp<std::int64_t>(env_int("CUARROW_FILE_WRITE_THREADS", 1), 1, 256));
  return n;
}

bool ramp_enabled() {
  static const bool on = env_int("CUARROW_STAGING_RAMP", 1) != 0;  // a tuning knob for bench/staging_sweep.py
  return on;
}

// Plans the job and runs `loop(worker_slots&, job&, const plan&)` on the
// pool, one staged job at a time; returns false (having done nothing) when
// no pinned staging memory can be had.
template <class Loop>
bool staged(CUcontext ctx, std::span<const staged_piece> pieces, bool to_device, Loop loop, int threads = 0,
            std::atomic<std::int64_t>* wait_ns = nullptr) {
  const transfer_options o = current_transfer_options();
  const std::size_t total = total_bytes(pieces);
  if (total == 0) return true;
  int max_workers = std::max(1, to_device ? o.staging_threads_to_device : o.staging_threads);
  // An explicit count (file reads: pread scales past the memcpy-bound
  // default) may exceed the configured one: the pool then grows its
  // threads, and the pipeline its slots, two per worker, kept for later jobs.
  if (threads > 0) max_workers = std::min(threads, 256);
  const std::size_t chunk = chunk_bytes_for(o, total, max_workers);
  const int slot_workers = std::max({1, o.staging_threads, o.staging_threads_to_device, max_workers});
  pipeline& p = the_pipeline();
  std::lock_guard lock(p.mutex);
  if (!p.ensure_slots(static_cast<std::size_t>(slot_workers) * 2, static_cast<std::size_t>(o.staging_chunk_bytes),
                      ctx)) {
    return false;
  }
  const std::size_t estimate = (total + chunk - 1) / chunk;
  const int workers = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(max_workers), estimate));
  const plan pl = make_plan(pieces, capacities(total, chunk, workers, !to_device && ramp_enabled()),
                            static_cast<std::size_t>(o.staging_chunk_bytes));
  job j(pl.chunks.size());
  run_job(
      ctx, j, std::min(workers, static_cast<int>(pl.chunks.size())),
      [&](worker_slots& ws, job& jj) { loop(ws, jj, pl); }, wait_ns);
  return true;
}

// A drained chunk into a file sink: one write per run of segments that
// lie one after another both in the slot and in the file (the gaps of
// merged neighbours are dropped).
void write_chunk(const output_file& file, const plan& p, const chunk_range& c, const unsigned char* slot) {
  std::size_t g = c.first;
  while (g < c.end) {
    const segment& head = p.segments[g];
    if (head.gap) {
      ++g;
      continue;
    }
    std::size_t n = head.size;
    std::size_t k = g + 1;
    while (k < c.end && !p.segments[k].gap && p.segments[k].slot_offset == head.slot_offset + n &&
           p.segments[k].file_offset == head.file_offset + n) {
      n += p.segments[k++].size;
    }
    file.write_at(slot + head.slot_offset, n, head.file_offset);
    g = k;
  }
}

// Device -> file without pinned staging memory: through one pageable
// chunk at a time (the driver stages each DMA itself).
void bounce_to_file(const output_file& file, std::span<const staged_piece> pieces, CUstream s) {
  const std::size_t chunk = static_cast<std::size_t>(current_transfer_options().staging_chunk_bytes);
  std::vector<unsigned char> bounce;
  for (const staged_piece& piece : pieces) {
    for (std::size_t done = 0; done < piece.size;) {
      const std::size_t n = std::min(chunk, piece.size - done);
      if (bounce.size() < n) bounce.resize(n);
      copy_device_to_host_async(bounce.data(), piece.device + done, n, s);
      synchronize_stream(s);
      file.write_at(bounce.data(), n, piece.file_offset + done);
      done += n;
    }
  }
}

}  // namespace

std::size_t chunk_bytes_for(const transfer_options& o, std::size_t total, int threads) {
  const std::size_t most = static_cast<std::size_t>(o.staging_chunk_bytes);
  const std::size_t least = std::min<std::size_t>(most, 1 << 20);
  const std::size_t workers = static_cast<std::size_t>(std::max(1, threads));
  std::size_t c = total / (workers * 8);
  c -= c % (64 << 10);
  return std::clamp(c, least, most);
}

transfer_options current_transfer_options() {
  options_state& s = options();
  std::lock_guard lock(s.mutex);
  return s.options;
}

bool is_page_locked(const void* p) {
  const pointer_attributes a = query_pointer(reinterpret_cast<std::uintptr_t>(p));
  return a.known && a.memory_type == CU_MEMORYTYPE_HOST;
}

void staged_host_to_device(CUcontext ctx, std::span<const staged_piece> pieces, CUstream s, int threads,
                           std::atomic<std::int64_t>* dma_wait_ns, std::span<const staged_capture> captures,
                           std::atomic<std::int64_t>* dma_count) {
  const std::size_t total = total_bytes(pieces);
  const std::int64_t limit = current_transfer_options().staging_streaming_store_limit_bytes;
  const bool streaming = limit > 0 && total <= static_cast<std::size_t>(limit);
  const bool done = staged(
      ctx, pieces, true,
      [&](worker_slots& ws, job& j, const plan& pl) {
        int turn = 0;
        std::size_t i = 0;
        std::int64_t dmas = 0;
        while (j.take(i)) {
          const int k = turn;
          turn ^= 1;
          if (*ws.recorded[k]) {
            const timed waiting(dma_wait_ns);
            ws.event[k]->synchronize();  // the slot's last DMA is done
          }
          auto* slot = static_cast<unsigned char*>(ws.slot[k]);
          const chunk_range& c = pl.chunks[i];
          fill_slot(pl, c, slot, streaming);
          capture_chunk(captures, pl, c, slot);
          for_each_run(pl, c, [&](std::size_t offset, CUdeviceptr device, std::size_t n) {
            copy_host_to_device_async(device, slot + offset, n, s);
            ++dmas;
          });
          ws.event[k]->record(s);
          *ws.recorded[k] = 1;
        }
        if (dma_count != nullptr) dma_count->fetch_add(dmas);
      },
      threads, dma_wait_ns);
  if (!done) {                           // no pinned memory for staging: let the driver copy
    std::vector<unsigned char> scratch;  // a piece from a file or a callback, made on the host first
    for (const staged_piece& piece : pieces) {
      if (piece.size == 0) continue;
      const unsigned char* from = piece.host_src;
      if (piece.source != nullptr) {
        synchronize_stream(s);  // the previous piece's copy has read the scratch
        scratch.resize(piece.size);
        fill_from_source(*piece.source, 0, scratch);
        from = scratch.data();
      }
      capture_range(captures, piece.device, from, piece.size);
      copy_host_to_device_async(piece.device, from, piece.size, s);
      if (dma_count != nullptr) dma_count->fetch_add(1);
    }
    synchronize_stream(s);
  }
}

bool gathered_host_to_device(std::span<const staged_piece> pieces,
                             const std::function<unsigned char*(std::size_t)>& block_for,
                             const std::function<void(CUdeviceptr, const unsigned char*, std::size_t)>& dma) {
  // One chunk as large as the pieces and their merged gaps: the block.
  const plan pl = make_plan(pieces, {std::numeric_limits<std::size_t>::max()}, std::numeric_limits<std::size_t>::max());
  if (pl.chunks.empty()) return true;
  const segment& last = pl.segments.back();
  unsigned char* block = block_for(last.slot_offset + last.size);
  if (block == nullptr) return false;
  fill_slot(pl, pl.chunks[0], block, false);
  for_each_run(pl, pl.chunks[0],
               [&](std::size_t offset, CUdeviceptr device, std::size_t n) { dma(device, block + offset, n); });
  return true;
}

void staged_device_to_host(CUcontext ctx, std::span<const staged_piece> pieces, CUstream s, const output_file* file) {
  const bool streaming = streaming_stores_to_host();
  const bool done = staged(
      ctx, pieces, false,
      [&](worker_slots& ws, job& j, const plan& pl) {
        // Double-buffered: the DMA of a worker's next chunk runs while it
        // copies the previous one out of the other slot.
        auto drain = [&](int k, std::size_t i) {
          ws.event[k]->synchronize();
          const auto* slot = static_cast<const unsigned char*>(ws.slot[k]);
          const chunk_range& c = pl.chunks[i];
          if (file != nullptr) {
            write_chunk(*file, pl, c, slot);
            return;
          }
          for (std::size_t g = c.first; g < c.end; ++g) {
            const segment& seg = pl.segments[g];
            if (seg.dst != nullptr) copy_bytes(seg.dst, slot + seg.slot_offset, seg.size, streaming);
          }
        };
        int turn = 0;
        int pending_slot = -1;
        std::size_t pending = 0;
        std::size_t i = 0;
        while (j.take(i)) {
          const int k = turn;
          turn ^= 1;
          auto* slot = static_cast<unsigned char*>(ws.slot[k]);
          for_each_run(pl, pl.chunks[i], [&](std::size_t offset, CUdeviceptr device, std::size_t n) {
            copy_device_to_host_async(slot + offset, device, n, s);
          });
          ws.event[k]->record(s);
          *ws.recorded[k] = 1;
          if (pending_slot >= 0) drain(pending_slot, pending);
          pending_slot = k;
          pending = i;
        }
        if (pending_slot >= 0 && !j.failed.load()) drain(pending_slot, pending);
      },
      file != nullptr ? file_write_threads() : 0);
  if (!done && file != nullptr) {
    bounce_to_file(*file, pieces, s);
  } else if (!done) {
    for (const staged_piece& piece : pieces) {
      if (piece.size > 0) copy_device_to_host_async(piece.host_dst, piece.device, piece.size, s);
    }
    synchronize_stream(s);
  }
}

void write_host_to_file(const output_file& file, std::span<const host_file_piece> pieces) {
  const transfer_options o = current_transfer_options();
  const std::size_t chunk = static_cast<std::size_t>(o.staging_chunk_bytes);
  std::vector<host_file_piece> parts;
  std::size_t total = 0;
  for (const host_file_piece& p : pieces) {
    for (std::size_t done = 0; done < p.size; done += chunk) {
      parts.push_back({p.src + done, std::min(chunk, p.size - done), p.file_offset + done});
    }
    total += p.size;
  }
  const int workers =
      static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(file_write_threads()), parts.size()));
  if (total < 2 * chunk || workers < 2) {
    for (const host_file_piece& p : parts) file.write_at(p.src, p.size, p.file_offset);
    return;
  }
  pipeline& pl = the_pipeline();
  std::lock_guard lock(pl.mutex);
  job j(parts.size());
  std::function<void(int)> body = [&](int) {
    try {
      std::size_t i = 0;
      while (j.take(i)) file.write_at(parts[i].src, parts[i].size, parts[i].file_offset);
    } catch (...) {
      j.fail(std::current_exception());
    }
  };
  pl.pool.run(workers, body);
  if (j.error) std::rethrow_exception(j.error);
}

void staged_host_to_device(CUcontext ctx, CUdeviceptr dst, const void* src, std::size_t n, CUstream s) {
  const staged_piece piece{static_cast<const unsigned char*>(src), nullptr, dst, n, false};
  staged_host_to_device(ctx, std::span<const staged_piece>(&piece, 1), s);
}

void staged_device_to_host(CUcontext ctx, void* dst, CUdeviceptr src, std::size_t n, CUstream s) {
  const staged_piece piece{nullptr, static_cast<unsigned char*>(dst), src, n, false};
  staged_device_to_host(ctx, std::span<const staged_piece>(&piece, 1), s);
}

}  // namespace detail

transfer_options get_transfer_options() { return detail::current_transfer_options(); }

void set_transfer_options(const transfer_options& o) {
  detail::validate(o);
  detail::options_state& s = detail::options();
  std::lock_guard lock(s.mutex);
  s.options = o;
}

}  // namespace cuarrow
