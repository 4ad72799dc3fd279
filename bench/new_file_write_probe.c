/* How fast one new file takes bytes from host memory, from C threads (no
 * GIL, unlike bench/write_scaling_probe.py): pwrite of 4 MiB pieces at
 * their offsets against memcpy into a shared mapping of the file (after
 * ftruncate; the whole file mapped once, or a mapping per 4 MiB piece),
 * with MADV_POPULATE_WRITE (pages allocated in one call, errors returned
 * instead of SIGBUS) and MADV_HUGEPAGE, for 1, 2, 4, 8 and 16 threads; the
 * best of two rounds.  Evidence for the Feather writer's design (issue 14's
 * write target, docs/known-gaps.md): where a new file's page allocation
 * caps any writer.
 *
 *   cc -O2 -pthread -o new_file_write_probe bench/new_file_write_probe.c
 *   ./new_file_write_probe MIB DIR
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

enum { PIECE = 4 << 20 };
enum mode { M_PWRITE, M_MAP, M_POPULATE, M_HUGE_POPULATE, M_PIECE_POPULATE, M_PIECE_HUGE_POPULATE, MODES };
static const char* const names[MODES] = {
    "pwrite of 4 MiB pieces",         "one mapping, memcpy",
    "one mapping, populate + memcpy", "one mapping, hugepage + populate + memcpy",
    "a mapping a piece, populate",    "a mapping a piece, hugepage + populate",
};

static size_t total;
static unsigned char* src;
static unsigned char* whole;
static int fd;
static enum mode mode;
static size_t next_offset;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char* what) {
  perror(what);
  exit(1);
}

static void* work(void* arg) {
  (void)arg;
  for (;;) {
    const size_t o = __atomic_fetch_add(&next_offset, PIECE, __ATOMIC_RELAXED);
    if (o >= total) return NULL;
    const size_t n = total - o < PIECE ? total - o : PIECE;
    if (mode == M_PWRITE) {
      for (size_t d = 0; d < n;) {
        const ssize_t w = pwrite(fd, src + o + d, n - d, (off_t)(o + d));
        if (w <= 0) die("pwrite");
        d += (size_t)w;
      }
    } else if (mode >= M_PIECE_POPULATE) {
      unsigned char* m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)o);
      if (m == MAP_FAILED) die("mmap");
      if (mode == M_PIECE_HUGE_POPULATE) (void)madvise(m, n, MADV_HUGEPAGE);
      if (madvise(m, n, MADV_POPULATE_WRITE) != 0) die("madvise(MADV_POPULATE_WRITE)");
      memcpy(m, src + o, n);
      munmap(m, n);
    } else {
      if (mode != M_MAP && madvise(whole + o, n, MADV_POPULATE_WRITE) != 0) die("madvise(MADV_POPULATE_WRITE)");
      memcpy(whole + o, src + o, n);
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s MIB DIR\n", argv[0]);
    return 2;
  }
  total = (size_t)atol(argv[1]) << 20;
  char path[4096];
  snprintf(path, sizeof path, "%s/new_file_write_probe.bin", argv[2]);
  struct statfs sf;
  if (statfs(argv[2], &sf) != 0) die("statfs");
  printf("%s: file system type 0x%lx, %zu MiB a file\n", argv[2], (unsigned long)sf.f_type, total >> 20);
  src = aligned_alloc(4096, total);
  if (src == NULL) die("aligned_alloc");
  memset(src, 1, total);
  static const int thread_counts[] = {1, 2, 4, 8, 16};
  for (mode = M_PWRITE; mode < MODES; mode++) {
    for (size_t t = 0; t < sizeof thread_counts / sizeof thread_counts[0]; t++) {
      const int threads = thread_counts[t];
      double best = 1e30;
      for (int round = 0; round < 2; round++) {
        unlink(path);
        next_offset = 0;
        const double t0 = now();
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) die("open");
        if (mode != M_PWRITE && ftruncate(fd, (off_t)total) != 0) die("ftruncate");
        if (mode >= M_MAP && mode <= M_HUGE_POPULATE) {
          whole = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
          if (whole == MAP_FAILED) die("mmap");
          if (mode == M_HUGE_POPULATE) (void)madvise(whole, total, MADV_HUGEPAGE);
        }
        pthread_t th[16];
        for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, work, NULL);
        for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
        if (mode >= M_MAP && mode <= M_HUGE_POPULATE) munmap(whole, total);
        close(fd);
        const double s = now() - t0;
        if (s < best) best = s;
        unlink(path);
      }
      printf("%-45s threads %2d: %6.2f GB/s\n", names[mode], threads, (double)total / best / 1e9);
      fflush(stdout);
    }
  }
  return 0;
}
