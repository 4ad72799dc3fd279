/* The arguments of cuarrow's gather kernel (gather.cu), shared by the
 * kernel, the runtime that launches it (gather.cpp) and the host emulation
 * that runs it without a GPU: C, fixed widths, no pointers but addresses.
 *
 * One launch copies up to CUARROW_GATHER_MAX_ITEMS ranges within one
 * device, each `size` bytes from `src` to `dst` (disjoint destinations, no
 * range reading another's destination).  Each item is cut into tiles of
 * CUARROW_GATHER_TILE bytes, one thread block a tile; `first_tile` is the
 * index of the item's first tile (the items' tiles are numbered one after
 * another, so the grid is the sum of their tile counts).  The arguments
 * travel in the launch's parameter space (CUDA 12.1 and later take up to
 * 32,764 bytes of parameters): no device table to upload first.
 *
 * CUARROW_GATHER_FIND and cuarrow_gather_range say which bytes a block
 * copies: the kernel uses them on the device, the emulation on the host
 * (through cuarrow_gather_tile): one rule, not two copies. */
#ifndef CUARROW_GATHER_ARGS_H
#define CUARROW_GATHER_ARGS_H

#include <stdint.h>

/* 16 KiB: on an H100, 64 KiB tiles moved 2.36 GB in 160 pieces at 0.93 x
 * one copy of every byte, 32 KiB at 0.96 x, 16 KiB at 0.98 x (0.99 x with
 * the kernel's cache-streaming stores; bench/results/2026-12-06-0700-h100-gather). */
#define CUARROW_GATHER_TILE (16u * 1024u)
#define CUARROW_GATHER_MAX_ITEMS 1000u
#define CUARROW_GATHER_THREADS 256u
#define CUARROW_GATHER_KERNEL_NAME "cuarrow_gather"

typedef struct cuarrow_gather_item {
  uint64_t dst;
  uint64_t src;
  uint64_t size;
  uint32_t first_tile;
  uint32_t reserved;
} cuarrow_gather_item;

typedef struct cuarrow_gather_args {
  uint32_t count; /* items used */
  uint32_t reserved;
  cuarrow_gather_item items[CUARROW_GATHER_MAX_ITEMS];
} cuarrow_gather_args;

#if defined(__CUDACC__)
#define CUARROW_GATHER_FN static inline __host__ __device__
#else
#define CUARROW_GATHER_FN static inline
#endif

/* The index of the item whose tiles hold block `tile`: the last item whose
 * first tile is at or before it (a binary search over the items, which are
 * in tile order), into `index`.  `args` is a cuarrow_gather_args value, not
 * a pointer, and `args.count` is at least 1.  A macro, not a function of
 * the arguments' address, so that the kernel indexes its __grid_constant__
 * parameter in place. */
#define CUARROW_GATHER_FIND(args, tile, index)       \
  do {                                               \
    uint32_t lo_ = 0, hi_ = (args).count - 1;        \
    while (lo_ < hi_) {                              \
      const uint32_t mid_ = (lo_ + hi_ + 1) / 2;     \
      if ((args).items[mid_].first_tile <= (tile)) { \
        lo_ = mid_;                                  \
      } else {                                       \
        hi_ = mid_ - 1;                              \
      }                                              \
    }                                                \
    (index) = lo_;                                   \
  } while (0)

/* Where the kernel's tiles after an item's first one start: at the
 * destination's CUARROW_GATHER_LINE-byte lines.  The first tile is then up
 * to a line longer than CUARROW_GATHER_TILE, and every later tile starts and
 * (but for the last) ends on a line, so that its block stores whole words
 * from its first thread's first store on, with no bytes before or after
 * them to copy one round at a time (in an IPC body, whose buffers are
 * packed at 8 bytes, every tile of most buffers had such bytes when the
 * tiles started at multiples of the tile size).  On H100s this did not
 * measurably move the kernel (gather_probe: 1.695 against 1.698 ms with
 * 64 KiB tiles; with 16 KiB, 1.581 against 1.589 ms in one run and 1.582
 * against 1.579 in another). */
#define CUARROW_GATHER_LINE 128u

/* Whether block `tile` copies bytes of an item of `size` bytes to `dst`
 * whose first tile is `first_tile`, and which: [*begin, *end) (not set where
 * it copies none: a grid may be larger than the tiles it needs, and an item
 * is given ceil(size / CUARROW_GATHER_TILE) tiles, of which its last may be
 * past its end, the first tile being longer; the kernel then returns).
 * Tile k > 0 starts `lead` bytes past k tiles, where dst + lead is the
 * destination's first line. */
CUARROW_GATHER_FN int cuarrow_gather_range(uint64_t dst, uint64_t size, uint32_t first_tile, uint32_t tile,
                                           uint64_t* begin, uint64_t* end) {
  const uint64_t lead = (CUARROW_GATHER_LINE - dst % CUARROW_GATHER_LINE) % CUARROW_GATHER_LINE;
  const uint64_t k = (uint64_t)(tile - first_tile);
  const uint64_t b = k == 0 ? 0 : k * CUARROW_GATHER_TILE + lead;
  if (b >= size) return 0;
  const uint64_t e = (k + 1) * CUARROW_GATHER_TILE + lead;
  *begin = b;
  *end = e < size ? e : size;
  return 1;
}

/* The bytes block `tile` copies, for the host (the emulation): the item
 * (CUARROW_GATHER_FIND), returned as its index, and that item's bytes
 * [*begin, *end) of this tile (cuarrow_gather_range), *begin == *end where
 * the tile is past the item's end. */
CUARROW_GATHER_FN uint32_t cuarrow_gather_tile(const cuarrow_gather_args* args, uint32_t tile, uint64_t* begin,
                                               uint64_t* end) {
  uint32_t i = 0;
  CUARROW_GATHER_FIND(*args, tile, i);
  if (!cuarrow_gather_range(args->items[i].dst, args->items[i].size, args->items[i].first_tile, tile, begin, end)) {
    *begin = *end = 0;
  }
  return i;
}

#endif
