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
 * 32,764 bytes of parameters): no device table to upload first. */
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

#endif
