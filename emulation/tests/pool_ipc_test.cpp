// Memory pools made with cuMemPoolCreate, and sharing them with other
// processes through POSIX file descriptors (cuMemPoolExportToShareableHandle,
// cuMemPoolImportFromShareableHandle, cuMemPoolExportPointer,
// cuMemPoolImportPointer).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "support.hpp"

using namespace emu_test;

namespace {

CUmemPoolProps pool_props(int device, CUmemAllocationHandleType handles) {
  CUmemPoolProps p{};
  p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.handleTypes = handles;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

std::string to_hex(const CUmemPoolPtrExportData& d) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (unsigned char b : d.reserved) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

bool from_hex(const std::string& s, CUmemPoolPtrExportData* d) {
  if (s.size() < 2 * sizeof d->reserved) return false;
  for (size_t i = 0; i < sizeof d->reserved; ++i)
    d->reserved[i] = static_cast<unsigned char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return true;
}

// One descriptor over a Unix socket (SCM_RIGHTS), with one byte of data.
bool send_fd(int sock, int fd) {
  char byte = 'F';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(sock, &msg, 0) == 1;
}

int receive_fd(int sock) {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1) return -1;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

void* as_handle(int fd) { return reinterpret_cast<void*>(static_cast<intptr_t>(fd)); }

}  // namespace

TEST_F(Emu, CreatedPoolAllocatesInStreamOrderAndIsDestroyedWhenItsMemoryIsFreed) {
  const size_t pools = A.pool_count();
  CUmemoryPool pool = nullptr;
  CUmemPoolProps props = pool_props(0, CU_MEM_HANDLE_TYPE_NONE);
  CU_ASSERT(A.cuMemPoolCreate(&pool, &props));
  EXPECT_EQ(pools + 1, A.pool_count());
  CUstream s = stream();
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAllocFromPoolAsync(&p, 5000, pool, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  write_device(p, pattern(5000, 3));
  EXPECT_EQ(pattern(5000, 3), read_device(p, 5000));
  CUmemoryPool of = nullptr;
  CU_ASSERT(A.cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
  EXPECT_EQ(pool, of);
  cuuint64_t used = 0;
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  EXPECT_EQ(5120u, used);
  // Not IPC-capable: created without a handle type.
  int fd = -1;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            A.cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CUmemPoolPtrExportData data{};
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolExportPointer(&data, p));
  // Destroyed with an allocation live: the pool stays until it is freed.
  CU_ASSERT(A.cuMemPoolDestroy(pool));
  EXPECT_EQ(pools + 1, A.pool_count());
  CUdeviceptr q = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemAllocFromPoolAsync(&q, 64, pool, s));  // the handle is gone
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolDestroy(pool));
  CU_ASSERT(A.cuMemFreeAsync(p, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  EXPECT_EQ(pools, A.pool_count());
  EXPECT_EQ(0u, A.device_allocation_count(0));
}

TEST_F(Emu, PoolCreationChecksItsProperties) {
  CUmemoryPool pool = nullptr;
  CUmemPoolProps props = pool_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolCreate(nullptr, &props));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolCreate(&pool, nullptr));
  CUmemPoolProps bad = props;
  bad.location.id = 7;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolCreate(&pool, &bad));
  bad = props;
  bad.allocType = CU_MEM_ALLOCATION_TYPE_INVALID;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolCreate(&pool, &bad));
  bad = props;
  bad.handleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  EXPECT_EQ(CUDA_ERROR_NOT_SUPPORTED, A.cuMemPoolCreate(&pool, &bad));
  int types = 0;
  CU_ASSERT(A.cuDeviceGetAttribute(&types, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, 0));
  EXPECT_EQ(int{CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR}, types);
  // The default pool is not IPC-capable and cannot be destroyed.
  CUmemoryPool def = nullptr;
  CU_ASSERT(A.cuDeviceGetDefaultMemPool(&def, 0));
  int fd = -1;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            A.cuMemPoolExportToShareableHandle(&fd, def, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolDestroy(def));
  // A synchronisation trims a created pool to its release threshold.
  CUmemoryPool trimmed = nullptr;
  CUmemPoolProps plain = pool_props(0, CU_MEM_HANDLE_TYPE_NONE);
  CU_ASSERT(A.cuMemPoolCreate(&trimmed, &plain));
  for (cuuint64_t threshold : {cuuint64_t{0}, cuuint64_t{1} << 30}) {
    CU_ASSERT(A.cuMemPoolSetAttribute(trimmed, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    CUdeviceptr q = 0;
    CU_ASSERT(A.cuMemAllocFromPoolAsync(&q, 1 << 20, trimmed, nullptr));
    CU_ASSERT(A.cuMemFreeAsync(q, nullptr));
    CU_ASSERT(A.cuStreamSynchronize(nullptr));
    cuuint64_t reserved = 7;
    CU_ASSERT(A.cuMemPoolGetAttribute(trimmed, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
    EXPECT_EQ(threshold == 0 ? 0u : cuuint64_t{1} << 20, reserved) << "threshold " << threshold;
  }
  CU_ASSERT(A.cuMemPoolDestroy(trimmed));
  // maxSize bounds what the pool may reserve.
  CUmemPoolProps small = pool_props(0, CU_MEM_HANDLE_TYPE_NONE);
  small.maxSize = 4096;
  CU_ASSERT(A.cuMemPoolCreate(&pool, &small));
  CUdeviceptr p = 0;
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, A.cuMemAllocFromPoolAsync(&p, 8192, pool, nullptr));
  CU_ASSERT(A.cuMemAllocFromPoolAsync(&p, 4096, pool, nullptr));
  CU_ASSERT(A.cuMemFreeAsync(p, nullptr));
  CU_ASSERT(A.cuMemPoolDestroy(pool));
}

TEST_F(Emu, ShareablePoolExportsADescriptorThatImportsItsPointers) {
  const size_t pools = A.pool_count();
  CUmemoryPool pool = nullptr;
  CUmemPoolProps props = pool_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CU_ASSERT(A.cuMemPoolCreate(&pool, &props));
  CUstream s = stream();
  CUdeviceptr pad = 0, p = 0;
  CU_ASSERT(A.cuMemAllocFromPoolAsync(&pad, 300, pool, s));
  CU_ASSERT(A.cuMemAllocFromPoolAsync(&p, 10000, pool, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  write_device(p, pattern(10000, 5));
  unsigned types = 0;
  CU_ASSERT(A.cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, p));
  EXPECT_EQ(unsigned{CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR}, types);

  int fd = -1;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_NONE, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            A.cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1));
  CU_ASSERT(A.cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  ASSERT_GE(fd, 0);
  EXPECT_EQ(0, fcntl(fd, F_GETFD) & FD_CLOEXEC) << "the descriptor may be handed across exec";
  CUmemPoolPtrExportData data{};
  CU_ASSERT(A.cuMemPoolExportPointer(&data, p + 100));  // an interior pointer exports the allocation
  CUipcMemHandle legacy{};
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuIpcGetMemHandle(&legacy, p));  // pool memory has no legacy handle

  // Imported here (this process may import its own pool): the same bytes at
  // another address.
  CUmemoryPool imported = nullptr;
  CU_ASSERT(
      A.cuMemPoolImportFromShareableHandle(&imported, as_handle(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  close(fd);  // the imported pool does not need the descriptor
  EXPECT_EQ(pools + 2, A.pool_count());
  CUdeviceptr q = 0;
  CU_ASSERT(A.cuMemPoolImportPointer(&q, imported, &data));
  EXPECT_NE(p, q);
  EXPECT_EQ(pattern(10000, 5), read_device(q, 10000));
  write_device(q, pattern(10000, 6));
  EXPECT_EQ(pattern(10000, 6), read_device(p, 10000));
  CUdeviceptr again = 0;
  CU_ASSERT(A.cuMemPoolImportPointer(&again, imported, &data));
  EXPECT_EQ(q, again);
  EXPECT_EQ(1u, A.ipc_mapping_count());
  size_t range = 0;
  CU_ASSERT(A.cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, q));
  EXPECT_EQ(10000u, range);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemsetD8Async(q, 0, 10001, nullptr));

  // An imported pool allocates nothing and exports nothing.
  CUdeviceptr none = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemAllocFromPoolAsync(&none, 64, imported, s));
  int fd2 = -1;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            A.cuMemPoolExportToShareableHandle(&fd2, imported, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  // Pointers are imported into an imported pool only, and only its own.
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolImportPointer(&none, pool, &data));
  CUmemoryPool other = nullptr;
  CU_ASSERT(A.cuMemPoolCreate(&other, &props));
  CUdeviceptr o = 0;
  CU_ASSERT(A.cuMemAllocFromPoolAsync(&o, 256, other, s));
  CUmemPoolPtrExportData other_data{};
  // "From an already shared memory pool": not before the pool's first export
  // (what driver 580 answers on the H200).
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolExportPointer(&other_data, o));
  int other_fd = -1;
  CU_ASSERT(A.cuMemPoolExportToShareableHandle(&other_fd, other, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  close(other_fd);
  CU_ASSERT(A.cuMemPoolExportPointer(&other_data, o));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolImportPointer(&none, imported, &other_data));
  for (size_t i = 8; i < sizeof data.reserved; ++i) {  // any damaged byte
    CUmemPoolPtrExportData bad = data;
    bad.reserved[i] ^= 0x10;
    EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolImportPointer(&none, imported, &bad)) << "byte " << i;
  }
  CUmemPoolPtrExportData zero{};
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolImportPointer(&none, imported, &zero));

  // Access from another device.
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = 1;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUmemAccess_flags flags{};
  CU_EXPECT(A.cuMemPoolGetAccess(&flags, imported, &desc.location));
  EXPECT_EQ(CU_MEM_ACCESS_FLAGS_PROT_NONE, flags);
  CU_EXPECT(A.cuMemPoolSetAccess(imported, &desc, 1));
  CU_EXPECT(A.cuMemPoolGetAccess(&flags, imported, &desc.location));
  EXPECT_EQ(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, flags);
  desc.location.id = 9;
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, A.cuMemPoolSetAccess(imported, &desc, 1));
  desc.location.id = 0;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, A.cuMemPoolSetAccess(imported, &desc, 1));

  // The imported pool goes when destroyed and its pointers are freed.
  CU_ASSERT(A.cuMemPoolDestroy(imported));
  EXPECT_EQ(pools + 3, A.pool_count());
  CU_ASSERT(A.cuMemFree(q));
  EXPECT_EQ(1u, A.ipc_mapping_count());
  CU_ASSERT(A.cuMemFreeAsync(q, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  EXPECT_EQ(0u, A.ipc_mapping_count());
  EXPECT_EQ(pools + 2, A.pool_count());
  CU_ASSERT(A.cuMemFreeAsync(o, s));
  CU_ASSERT(A.cuMemFreeAsync(p, s));
  CU_ASSERT(A.cuMemFreeAsync(pad, s));
  CU_ASSERT(A.cuMemPoolDestroy(other));
  CU_ASSERT(A.cuMemPoolDestroy(pool));
  CU_ASSERT(A.cuStreamSynchronize(s));
  EXPECT_EQ(pools, A.pool_count());
}

TEST_F(Emu, DescriptorsThatAreNotShareablePoolsAreInvalidValue) {
  CUmemoryPool imported = nullptr;
  const auto type = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolImportFromShareableHandle(&imported, as_handle(-1), type, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolImportFromShareableHandle(&imported, as_handle(9999), type, 0));
  int fds[2];
  ASSERT_EQ(0, pipe(fds));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolImportFromShareableHandle(&imported, as_handle(fds[0]), type, 0));
  close(fds[0]);
  close(fds[1]);
  int other = memfd_create("cuarrow-emu-pool-notreally", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolImportFromShareableHandle(&imported, as_handle(other), type, 0));
  close(other);
  // A real one, with the wrong type or flags.
  CUmemoryPool pool = nullptr;
  CUmemPoolProps props = pool_props(0, type);
  CU_ASSERT(A.cuMemPoolCreate(&pool, &props));
  int fd = -1;
  CU_ASSERT(A.cuMemPoolExportToShareableHandle(&fd, pool, type, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            A.cuMemPoolImportFromShareableHandle(&imported, as_handle(fd), CU_MEM_HANDLE_TYPE_NONE, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolImportFromShareableHandle(&imported, as_handle(fd), type, 2));
  close(fd);
  CU_ASSERT(A.cuMemPoolDestroy(pool));
}

// pool_import <socket fd> <export data> <size> <seed>: receives the pool's
// descriptor over the socket, imports the pool and the pointer, checks the
// exporter's bytes and overwrites them with the pattern of seed + 1.
EMU_CHILD_MODE(pool_import) {
  CHILD_CHECK(argc == 4);
  Api& A = api();
  const int sock = std::atoi(argv[0]);
  const size_t size = std::stoull(argv[2]);
  const unsigned seed = static_cast<unsigned>(std::atoi(argv[3]));
  CUmemPoolPtrExportData data{};
  CHILD_CHECK(from_hex(argv[1], &data));
  const int fd = receive_fd(sock);
  CHILD_CHECK(fd >= 0);
  CUcontext c = nullptr;
  CHILD_CU(CUDA_SUCCESS, A.cuInit(0));
  CHILD_CU(CUDA_SUCCESS, A.cuDevicePrimaryCtxRetain(&c, 0));
  CHILD_CU(CUDA_SUCCESS, A.cuCtxPushCurrent(c));
  CUmemoryPool pool = nullptr;
  CHILD_CU(CUDA_SUCCESS,
           A.cuMemPoolImportFromShareableHandle(&pool, as_handle(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  close(fd);
  CUdeviceptr p = 0;
  CHILD_CU(CUDA_SUCCESS, A.cuMemPoolImportPointer(&p, pool, &data));
  std::vector<unsigned char> got(size);
  CHILD_CU(CUDA_SUCCESS, A.cuMemcpyDtoHAsync(got.data(), p, size, nullptr));
  CHILD_CHECK(got == pattern(size, seed));
  auto next = pattern(size, seed + 1);
  CHILD_CU(CUDA_SUCCESS, A.cuMemcpyHtoDAsync(p, next.data(), size, nullptr));
  CHILD_CU(CUDA_SUCCESS, A.cuStreamSynchronize(nullptr));
  CHILD_CU(CUDA_SUCCESS, A.cuMemFree(p));
  CHILD_CU(CUDA_SUCCESS, A.cuMemPoolDestroy(pool));
  CHILD_CHECK(A.pool_count() == 0 && A.ipc_mapping_count() == 0);
  CHILD_CU(CUDA_SUCCESS, A.cuCtxPopCurrent(nullptr));
  CHILD_CU(CUDA_SUCCESS, A.cuDevicePrimaryCtxRelease(0));
  return 0;
}

TEST_F(Emu, ShareablePoolOpensInAnotherProcessThroughScmRights) {
  CUmemoryPool pool = nullptr;
  CUmemPoolProps props = pool_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CU_ASSERT(A.cuMemPoolCreate(&pool, &props));
  CUstream s = stream();
  CUdeviceptr pad = 0, p = 0;
  const size_t size = (1 << 20) + 333;
  CU_ASSERT(A.cuMemAllocFromPoolAsync(&pad, 1000, pool, s));
  CU_ASSERT(A.cuMemAllocFromPoolAsync(&p, size, pool, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  write_device(p, pattern(size, 40));
  int fd = -1;
  CU_ASSERT(A.cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CUmemPoolPtrExportData data{};
  CU_ASSERT(A.cuMemPoolExportPointer(&data, p));
  int sv[2];
  ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, sv));  // sv[1] is inherited by the child
  ASSERT_TRUE(send_fd(sv[0], fd));
  close(fd);
  ChildResult r = run_child("pool_import", {std::to_string(sv[1]), to_hex(data), std::to_string(size), "40"});
  close(sv[0]);
  close(sv[1]);
  EXPECT_TRUE(r.exited && r.code == 0) << r.output;
  EXPECT_EQ(pattern(size, 41), read_device(p, size)) << "the child's writes are visible to the exporter";
  CU_ASSERT(A.cuMemFreeAsync(p, s));
  CU_ASSERT(A.cuMemFreeAsync(pad, s));
  CU_ASSERT(A.cuMemPoolDestroy(pool));
  CU_ASSERT(A.cuStreamSynchronize(s));
}

// pool_export_and_exit <socket fd> <size> <seed>: exports a pool's descriptor
// and one allocation holding the pattern, prints the export data, exits.
EMU_CHILD_MODE(pool_export_and_exit) {
  CHILD_CHECK(argc == 3);
  Api& A = api();
  const int sock = std::atoi(argv[0]);
  const size_t size = std::stoull(argv[1]);
  const unsigned seed = static_cast<unsigned>(std::atoi(argv[2]));
  CUcontext c = nullptr;
  CHILD_CU(CUDA_SUCCESS, A.cuInit(0));
  CHILD_CU(CUDA_SUCCESS, A.cuDevicePrimaryCtxRetain(&c, 0));
  CHILD_CU(CUDA_SUCCESS, A.cuCtxPushCurrent(c));
  CUmemoryPool pool = nullptr;
  CUmemPoolProps props = pool_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CHILD_CU(CUDA_SUCCESS, A.cuMemPoolCreate(&pool, &props));
  CUdeviceptr p = 0;
  CHILD_CU(CUDA_SUCCESS, A.cuMemAllocFromPoolAsync(&p, size, pool, nullptr));
  auto bytes = pattern(size, seed);
  CHILD_CU(CUDA_SUCCESS, A.cuMemcpyHtoDAsync(p, bytes.data(), size, nullptr));
  CHILD_CU(CUDA_SUCCESS, A.cuStreamSynchronize(nullptr));
  int fd = -1;
  CHILD_CU(CUDA_SUCCESS, A.cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CUmemPoolPtrExportData data{};
  CHILD_CU(CUDA_SUCCESS, A.cuMemPoolExportPointer(&data, p));
  CHILD_CHECK(send_fd(sock, fd));
  std::printf("DATA=%s\n", to_hex(data).c_str());
  std::fflush(stdout);
  return 0;  // exits with the allocation live
}

TEST_F(Emu, ImportedPoolMemoryOutlivesTheExportingProcess) {
  int sv[2];
  ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
  ChildResult r = run_child("pool_export_and_exit", {std::to_string(sv[1]), "4096", "9"});
  close(sv[1]);
  ASSERT_TRUE(r.exited && r.code == 0) << r.output;
  const size_t at = r.output.find("DATA=");
  ASSERT_NE(std::string::npos, at) << r.output;
  CUmemPoolPtrExportData data{};
  ASSERT_TRUE(from_hex(r.output.substr(at + 5), &data));
  const int fd = receive_fd(sv[0]);
  close(sv[0]);
  ASSERT_GE(fd, 0);
  CUmemoryPool pool = nullptr;
  CU_ASSERT(A.cuMemPoolImportFromShareableHandle(&pool, as_handle(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  close(fd);
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemPoolImportPointer(&p, pool, &data));
  EXPECT_EQ(pattern(4096, 9), read_device(p, 4096));
  CU_ASSERT(A.cuMemFree(p));
  CU_ASSERT(A.cuMemPoolDestroy(pool));
}
