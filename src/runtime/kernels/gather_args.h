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
 * cuarrow_gather_tile says which bytes a block copies: the kernel calls it
 * on the device, the emulation on the host (one rule, not two copies). */
#ifndef CUARROW_GATHER_ARGS_H
#define CUARROW_GATHER_ARGS_H

#include <stdint.h>

#define CUARROW_GATHER_TILE (64u * 1024u)
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

/* The bytes block `tile` copies: the last item whose first tile is at or
 * before it (binary search over the items, which are in tile order), and
 * that item's bytes [*begin, *end) of this tile.  Returns the item's index
 * and *begin == *end where the tile is past the item's end (a grid may be
 * larger than the tiles it needs).  `args->count` is at least 1. */
CUARROW_GATHER_FN uint32_t cuarrow_gather_tile(const cuarrow_gather_args* args, uint32_t tile, uint64_t* begin,
                                               uint64_t* end) {
  uint32_t lo = 0, hi = args->count - 1;
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (args->items[mid].first_tile <= tile) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const cuarrow_gather_item* it = &args->items[lo];
  const uint64_t b = (uint64_t)(tile - it->first_tile) * CUARROW_GATHER_TILE;
  *begin = b < it->size ? b : it->size;
  *end = b + CUARROW_GATHER_TILE < it->size ? b + CUARROW_GATHER_TILE : it->size;
  if (*end < *begin) *end = *begin;
  return lo;
}

#endif
