// CUDA IPC: export_ipc, open_ipc and the wire format of ipc_memory_handle
// (docs/ipc.md).
#include "cuarrow/ipc.hpp"
#include "buffer_factory.hpp"
#include "ipc_handle_factory.hpp"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuarrow/error.hpp"
#include "cuarrow/memory_resource.hpp"
#include "runtime/runtime.hpp"
#include "wire.hpp"

namespace cuarrow {
namespace {

// ---- wire format, version 1 (little-endian) ---------------------------------
//   0   8  magic "CUARIPC\0"
//   8   2  version (1)
//  10   2  reserved, 0
//  12   4  exporter's device ordinal (int32; -1 unknown)
//  16   8  offset of the buffer in the exported allocation (int64)
//  24   8  size of the buffer (int64)
//  32   8  random id of the exporting process (uint64; 0 unknown)
//  40  64  the driver's CUipcMemHandle of the allocation
// 104   8  FNV-1a 64 of bytes [0, 104)
// ---- wire format, version 2 (pool handles; the same up to byte 40) --------------
//  40   8  the exporting pool's id (uint64; 0 unknown)
//  48  64  the driver's CUmemPoolPtrExportData of the allocation
// 112   8  FNV-1a 64 of bytes [0, 112)
// pyarrow.cuda's format: int64 size (native endian), then, if the size is
// not 0, the 64-byte CUipcMemHandle: 72 bytes (8 for an empty buffer).
constexpr char kMagic[8] = {'C', 'U', 'A', 'R', 'I', 'P', 'C', '\0'};
constexpr std::size_t kVersionAt = 8, kReservedAt = 10, kDeviceAt = 12, kOffsetAt = 16, kSizeAt = 24, kExporterAt = 32,
                      kHandleAt = 40, kChecksumAt = 104;
constexpr std::size_t kPoolIdAt = 40, kPoolHandleAt = 48, kPoolChecksumAt = 112;
static_assert(kChecksumAt + 8 == ipc_memory_handle::serialized_size);
static_assert(kHandleAt + ipc_memory_handle::driver_handle_size == kChecksumAt);
static_assert(kPoolChecksumAt + 8 == ipc_memory_handle::pool_serialized_size);
static_assert(kPoolHandleAt + ipc_memory_handle::driver_handle_size == kPoolChecksumAt);
static_assert(sizeof(CUipcMemHandle) == ipc_memory_handle::driver_handle_size);
static_assert(sizeof(CUmemPoolPtrExportData) == ipc_memory_handle::driver_handle_size);
constexpr std::size_t kPyarrowSize = 8 + ipc_memory_handle::driver_handle_size;

using detail::fnv1a;
using detail::get_le;
using detail::put_le;

[[noreturn]] void malformed(std::size_t n, const std::string& why) {
  throw invalid_argument("cannot read an IPC memory handle from " + std::to_string(n) + " bytes: " + why);
}

// A random id of this process, written into the handles it exports, so that
// opening one here is recognised (pids repeat across PID namespaces; this
// does not in practice).
std::uint64_t process_id_token() {
  static const std::uint64_t token = [] {
    std::random_device rd;
    std::uint64_t t = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    t ^= static_cast<std::uint64_t>(getpid()) * 0x9e3779b97f4a7c15ull;
    t ^= static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    return t == 0 ? 1 : t;
  }();
  return token;
}

// ---- mappings opened in this process ------------------------------------------
//
// One mapping per (context, imported pool, driver handle), shared by every
// buffer opened from it: the real driver refused repeated opens in one
// context (CUDA_ERROR_ALREADY_MAPPED) before it reference-counted them, and
// does not document repeated pool pointer imports, so cuarrow opens once and
// counts itself.

using driver_handle_bytes = std::array<std::byte, ipc_memory_handle::driver_handle_size>;

struct mapping_key {
  CUcontext ctx;
  CUmemoryPool pool;  // the imported pool (pool handles); null for legacy handles
  driver_handle_bytes handle;
  friend bool operator<(const mapping_key& a, const mapping_key& b) {
    if (a.ctx != b.ctx) return std::less<CUcontext>()(a.ctx, b.ctx);
    if (a.pool != b.pool) return std::less<CUmemoryPool>()(a.pool, b.pool);
    return std::memcmp(a.handle.data(), b.handle.data(), a.handle.size()) < 0;
  }
};

struct ipc_mapping;

struct mapping_registry {
  std::mutex mutex;
  std::condition_variable closed;  // an entry was erased
  std::map<mapping_key, std::weak_ptr<ipc_mapping>> mappings;
};

mapping_registry& registry() {
  static auto* r = new mapping_registry;  // never destroyed: mappings may outlive main()
  return *r;
}

// What the handle that opened a mapping said about its origin, handed on when
// a buffer opened from it is exported again.
struct mapping_origin {
  int exporter_device = -1;  // -1 unknown
  std::uint64_t exporter = 0;
  ipc_handle_kind kind = ipc_handle_kind::legacy;
  std::uint64_t pool_id = 0;
};

struct ipc_mapping {
  ipc_mapping(context c, mapping_key k, CUdeviceptr b, std::int64_t n, mapping_origin o,
              std::shared_ptr<imported_pool::state> p)
      : ctx(std::move(c)), key(k), base(b), range(n), origin(o), pool(std::move(p)) {}
  ipc_mapping(const ipc_mapping&) = delete;
  ipc_mapping& operator=(const ipc_mapping&) = delete;

  context ctx;
  mapping_key key;
  CUdeviceptr base;    // the exported allocation, mapped here
  std::int64_t range;  // its size
  mapping_origin origin;
  // Pool handles: the imported pool, kept until its imported pointer is freed.
  std::shared_ptr<imported_pool::state> pool;

  ~ipc_mapping() {
    mapping_registry& r = registry();
    std::lock_guard lock(r.mutex);
    // Closed under the lock, so that no one opens the handle again in this
    // context until the driver has closed it.
    if (!detail::shutting_down()) {
      const bool pooled = origin.kind == ipc_handle_kind::pool;
      try {
        scoped_context guard(ctx);
        CUresult res = pooled ? detail::pool_free_imported(base) : detail::ipc_close_mem_handle(base);
        if (res != CUDA_SUCCESS)
          detail::warn_result(res, pooled ? "cuMemFree (imported pool memory)" : "cuIpcCloseMemHandle");
      } catch (const std::exception& e) {
        detail::warn(std::string("closing an IPC mapping: ") + e.what());
      }
    }
    auto it = r.mappings.find(key);
    if (it != r.mappings.end() && it->second.expired()) r.mappings.erase(it);
    r.closed.notify_all();
  }
};

CUipcMemHandle to_driver(const driver_handle_bytes& bytes) {
  CUipcMemHandle h{};
  std::memcpy(h.reserved, bytes.data(), bytes.size());
  return h;
}

// The mapping (of this process) that holds `address`, if any.
std::shared_ptr<ipc_mapping> mapping_containing(CUcontext ctx, std::uintptr_t address) {
  mapping_registry& r = registry();
  // The live mappings are collected under the lock and looked at after it:
  // a mapping whose last other holder goes meanwhile is destroyed here, and
  // its destructor takes the lock.
  std::vector<std::shared_ptr<ipc_mapping>> live;
  {
    std::lock_guard lock(r.mutex);
    for (auto& [key, weak] : r.mappings) {
      if (key.ctx != ctx) continue;
      if (auto m = weak.lock()) live.push_back(std::move(m));
    }
  }
  for (auto& m : live) {
    if (address >= m->base && address - m->base < static_cast<std::uintptr_t>(m->range)) return m;
  }
  return nullptr;
}

[[noreturn]] void rethrow_with_hint(const cuda_error& e, const std::string& hint) {
  throw cuda_error(e.code(), e.name(), e.operation(), std::string(e.what()) + "; " + hint);
}

}  // namespace

const char* to_string(ipc_handle_kind k) noexcept {
  switch (k) {
    case ipc_handle_kind::legacy: return "legacy";
    case ipc_handle_kind::pool: return "pool";
  }
  return "unknown";
}

// ---- ipc_memory_handle --------------------------------------------------------------

ipc_memory_handle::ipc_memory_handle(fields f)
    : driver_handle_(f.driver_handle),
      offset_(f.offset),
      size_(f.size),
      device_id_(f.device_id),
      exporter_(f.exporter),
      kind_(f.kind),
      pool_id_(f.pool_id),
      keep_alive_(std::move(f.keep_alive)) {}

bool ipc_memory_handle::exported_by_this_process() const noexcept {
  return exporter_ != 0 && exporter_ == process_id_token();
}

std::vector<std::byte> ipc_memory_handle::serialize() const {
  const bool pooled = kind_ == ipc_handle_kind::pool;
  std::vector<std::byte> out(pooled ? pool_serialized_size : serialized_size);
  std::byte* p = out.data();
  std::memcpy(p, kMagic, sizeof kMagic);
  put_le<std::uint16_t>(p + kVersionAt, pooled ? pool_wire_version : wire_version);
  put_le<std::uint16_t>(p + kReservedAt, 0);
  put_le<std::int32_t>(p + kDeviceAt, device_id_);
  put_le<std::int64_t>(p + kOffsetAt, offset_);
  put_le<std::int64_t>(p + kSizeAt, size_);
  put_le<std::uint64_t>(p + kExporterAt, exporter_);
  if (pooled) {
    put_le<std::uint64_t>(p + kPoolIdAt, pool_id_);
    std::memcpy(p + kPoolHandleAt, driver_handle_.data(), driver_handle_.size());
    put_le<std::uint64_t>(p + kPoolChecksumAt, fnv1a(p, kPoolChecksumAt));
  } else {
    std::memcpy(p + kHandleAt, driver_handle_.data(), driver_handle_.size());
    put_le<std::uint64_t>(p + kChecksumAt, fnv1a(p, kChecksumAt));
  }
  return out;
}

ipc_memory_handle ipc_memory_handle::deserialize(std::span<const std::byte> bytes) {
  const std::size_t n = bytes.size();
  const std::byte* p = bytes.data();
  fields f;
  if (n >= sizeof kMagic && std::memcmp(p, kMagic, sizeof kMagic) == 0) {
    if (n < kVersionAt + 2) malformed(n, "a cuarrow IPC handle is cut short before its version");
    const auto version = get_le<std::uint16_t>(p + kVersionAt);
    if (version != wire_version && version != pool_wire_version) {
      malformed(n, "unsupported cuarrow IPC handle version " + std::to_string(version) +
                       " (this cuarrow reads versions " + std::to_string(wire_version) + " and " +
                       std::to_string(pool_wire_version) + ")");
    }
    const bool pooled = version == pool_wire_version;
    const std::size_t expected = pooled ? pool_serialized_size : serialized_size;
    const std::size_t checksum_at = pooled ? kPoolChecksumAt : kChecksumAt;
    if (n != expected) {
      malformed(n, std::string("a cuarrow IPC handle of version ") + std::to_string(version) + " is " +
                       std::to_string(expected) + " bytes long" +
                       (n < expected ? " (it was cut short)" : " (extra bytes follow it)"));
    }
    if (get_le<std::uint64_t>(p + checksum_at) != fnv1a(p, checksum_at)) {
      malformed(n, "the checksum does not match: the handle was damaged on its way");
    }
    if (get_le<std::uint16_t>(p + kReservedAt) != 0) malformed(n, "reserved field is not 0");
    f.device_id = get_le<std::int32_t>(p + kDeviceAt);
    f.offset = get_le<std::int64_t>(p + kOffsetAt);
    f.size = get_le<std::int64_t>(p + kSizeAt);
    f.exporter = get_le<std::uint64_t>(p + kExporterAt);
    if (pooled) {
      f.kind = ipc_handle_kind::pool;
      f.pool_id = get_le<std::uint64_t>(p + kPoolIdAt);
      std::memcpy(f.driver_handle.data(), p + kPoolHandleAt, f.driver_handle.size());
    } else {
      std::memcpy(f.driver_handle.data(), p + kHandleAt, f.driver_handle.size());
    }
    if (f.device_id < -1) malformed(n, "negative device ordinal " + std::to_string(f.device_id));
    if (f.offset < 0) malformed(n, "negative offset " + std::to_string(f.offset));
  } else {
    // pyarrow.cuda: int64 size in native byte order, then the driver handle.
    if (n != 8 && n != kPyarrowSize) {
      malformed(n, "expected a cuarrow IPC handle (" + std::to_string(serialized_size) + " or " +
                       std::to_string(pool_serialized_size) +
                       " bytes, starting with \"CUARIPC\") or a pyarrow.cuda one (72 bytes, or 8 for an empty buffer)");
    }
    std::int64_t size = 0;
    std::memcpy(&size, p, sizeof size);
    if (size > 0 && n != kPyarrowSize) {
      malformed(n, "a pyarrow.cuda IPC handle of a " + std::to_string(size) + "-byte buffer is " +
                       std::to_string(kPyarrowSize) + " bytes long (it was cut short)");
    }
    f.size = size;
    if (size > 0) std::memcpy(f.driver_handle.data(), p + 8, f.driver_handle.size());
  }
  if (f.size < 0) malformed(n, "negative size " + std::to_string(f.size));
  if (f.offset > std::numeric_limits<std::int64_t>::max() - f.size) {
    malformed(n, "offset " + std::to_string(f.offset) + " + size " + std::to_string(f.size) + " overflows");
  }
  if (f.size == 0) {
    // An empty buffer is the same whatever memory it came from.
    f.offset = 0;
    f.driver_handle = {};
    f.kind = ipc_handle_kind::legacy;
    f.pool_id = 0;
  }
  return ipc_memory_handle(std::move(f));
}

std::string ipc_memory_handle::describe() const {
  std::string s = "cuarrow.ipc_memory_handle(size=" + std::to_string(size_) + ", offset=" + std::to_string(offset_) +
                  ", device=" + (device_id_ >= 0 ? std::to_string(device_id_) : std::string("unknown"));
  if (kind_ == ipc_handle_kind::pool) {
    char id[24];
    std::snprintf(id, sizeof id, "0x%016llx", static_cast<unsigned long long>(pool_id_));
    s += std::string(", pool=") + id;
  }
  return s + ")";
}

// ---- imported pools -----------------------------------------------------------------

struct imported_pool::state {
  state(context c, CUmemoryPool p, std::uint64_t id) : ctx(std::move(c)), pool(p), pool_id(id) {}
  state(const state&) = delete;
  state& operator=(const state&) = delete;
  ~state() {
    if (detail::shutting_down()) return;  // the driver releases everything at exit
    try {
      scoped_context guard(ctx);
      CUresult r = detail::pool_destroy(pool);
      if (r != CUDA_SUCCESS) detail::warn_result(r, "cuMemPoolDestroy (imported pool)");
    } catch (const std::exception& e) {
      detail::warn(std::string("destroying an imported pool: ") + e.what());
    }
  }
  context ctx;
  CUmemoryPool pool;
  std::uint64_t pool_id;
};

const context& imported_pool::get_context() const { return state_->ctx; }
std::uint64_t imported_pool::pool_id() const noexcept { return state_->pool_id; }
CUmemoryPool imported_pool::native_handle() const noexcept { return state_->pool; }

// ---- shareable pools ----------------------------------------------------------------

shareable_pool::~shareable_pool() {
  if (fd_ >= 0) close(fd_);
}

shareable_pool::shareable_pool(shareable_pool&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), pool_id_(other.pool_id_), device_id_(other.device_id_) {}

shareable_pool& shareable_pool::operator=(shareable_pool&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    pool_id_ = other.pool_id_;
    device_id_ = other.device_id_;
  }
  return *this;
}

int shareable_pool::release() noexcept { return std::exchange(fd_, -1); }

shareable_pool export_pool(const ipc_pool_resource& pool) {
  int fd = -1;
  detail::check(detail::pool_export_fd(&fd, pool.native_handle()),
                "cuMemPoolExportToShareableHandle");  // close-on-exec
  return shareable_pool(fd, pool.pool_id(), pool.device_id());
}

shareable_pool export_pool(const ipc_memory_handle& handle) {
  if (handle.kind() != ipc_handle_kind::pool) {
    throw invalid_argument(std::string("export_pool: this is a ") +
                           (handle.size() == 0 ? "handle of an empty buffer" : "legacy (cuMemAlloc) handle") +
                           ", which opens without a pool; send the handle alone");
  }
  if (!handle.exported_by_this_process()) {
    throw invalid_argument(
        "export_pool: this pool handle was exported by another process; only the exporter can share its pool");
  }
  int fd = -1;
  const CUresult r = detail::ipc_pool_export_fd_by_id(&fd, handle.pool_id());
  if (r == CUDA_ERROR_NOT_FOUND) {
    throw invalid_argument("export_pool: the pool of this handle (id " + std::to_string(handle.pool_id()) +
                           ") is gone, or is not a cuarrow ipc_pool_resource of this process");
  }
  detail::check(r, "cuMemPoolExportToShareableHandle");
  return shareable_pool(fd, handle.pool_id(), handle.device_id());
}

imported_pool import_pool(const context& ctx, int fd, std::uint64_t pool_id) {
  if (fd < 0) {
    throw invalid_argument("import_pool: " + std::to_string(fd) +
                           " is not a file descriptor; pass the descriptor export_pool gave in the exporting process, "
                           "as received in this one (SCM_RIGHTS, multiprocessing.reduction.recv_handle)");
  }
  scoped_context guard(ctx);
  CUmemoryPool pool = nullptr;
  CUresult r = detail::pool_import(&pool, fd);
  if (r != CUDA_SUCCESS) {
    try {
      detail::throw_cuda_error(r, "cuMemPoolImportFromShareableHandle");
    } catch (const cuda_error& e) {
      if (r == CUDA_ERROR_OUT_OF_MEMORY) throw;
      rethrow_with_hint(e, "descriptor " + std::to_string(fd) +
                               " must be one that export_pool (cuMemPoolExportToShareableHandle) gave in the "
                               "exporting process, received in this one");
    }
  }
  // Owned from here: destroyed if anything below fails.
  std::shared_ptr<imported_pool::state> s;
  try {
    s = std::make_shared<imported_pool::state>(ctx, pool, pool_id);
  } catch (...) {
    detail::pool_destroy(pool);
    throw;
  }
  detail::check(detail::pool_grant_access(pool, ctx.device_number()), "cuMemPoolSetAccess");
  return imported_pool(std::move(s));
}

// ---- export ----------------------------------------------------------------------------

namespace {

// Pool memory: a pool handle when the pool is shareable.
ipc_memory_handle export_pool_memory(const buffer& b, ipc_memory_handle::fields f, CUdeviceptr base,
                                     CUmemoryPool pool) {
  CUmemPoolPtrExportData data{};
  CUresult r = detail::pool_export_pointer(&data, base);
  if (r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED) {
      throw invalid_argument(
          "export_ipc: this buffer is memory of a stream-ordered pool that cannot be shared (cuMemPoolExportPointer "
          "answered " +
          detail::describe_result(r) +
          ": only pools created with shareable handles can export their memory, which the device's default pool "
          "(cuda_async_pool) and most other libraries' pools are not, and legacy CUDA IPC cannot export pool "
          "memory either). Allocate the memory to share from an ipc_pool_resource (cuarrow's default resource, "
          "cuda_ipc_pool, where the device supports it), or with cuMemAlloc, e.g. allocate_device(ctx, n, {}, "
          "std::make_shared<plain_device_resource>()) (in Python: Context.new_buffer(n)), copy the data into it "
          "(copy / copy_from_device), and export that buffer");
    }
    detail::throw_cuda_error(r, "cuMemPoolExportPointer");
  }
  std::memcpy(f.driver_handle.data(), data.reserved, f.driver_handle.size());
  f.kind = ipc_handle_kind::pool;
  f.pool_id = detail::ipc_pool_id(pool);
  f.offset = static_cast<std::int64_t>(b.address() - static_cast<std::uintptr_t>(base));
  f.size = b.size();
  f.keep_alive = b.owner();
  return detail::ipc_handle_factory::make(std::move(f));
}

}  // namespace

ipc_memory_handle export_ipc(const buffer& b) {
  switch (b.type()) {
    case device_type::cuda: break;
    case device_type::cpu:
      throw invalid_argument(
          "export_ipc: this buffer holds ordinary host memory (cpu); CUDA IPC shares device memory only. Share host "
          "memory with the operating system's shared memory, or copy it into a device buffer first");
    case device_type::cuda_host:
      throw invalid_argument(
          "export_ipc: this buffer holds pinned host memory (cuda_host); CUDA IPC shares device memory only "
          "(cuMemAlloc). "
          "Share host memory with the operating system's shared memory, or copy it into a device buffer first");
    case device_type::cuda_managed:
      throw invalid_argument(
          "export_ipc: this buffer holds managed memory (cuda_managed), which legacy CUDA IPC cannot share; copy it "
          "into "
          "a device buffer allocated with cuMemAlloc (plain_device_resource) first");
  }
  ipc_memory_handle::fields f;
  f.device_id = b.device_id();
  f.exporter = process_id_token();
  if (b.size() == 0) return detail::ipc_handle_factory::make(std::move(f));
  if (!b.get_context()) throw invalid_argument("export_ipc: this device buffer has no context");
  const context& ctx = *b.get_context();
  scoped_context guard(ctx);

  // Memory this process opened from a handle: hand on the original handle
  // (the allocation is still the exporter's), at this buffer's offset.
  if (auto m = mapping_containing(ctx.handle(), b.address())) {
    const std::int64_t offset = static_cast<std::int64_t>(b.address() - m->base);
    if (b.size() > m->range - offset) {
      throw invalid_argument("export_ipc: this buffer of " + std::to_string(b.size()) + " bytes at offset " +
                             std::to_string(offset) + " runs past the IPC mapping it lies in (" +
                             std::to_string(m->range) + " bytes)");
    }
    f.driver_handle = m->key.handle;
    f.offset = offset;
    f.size = b.size();
    f.device_id = m->origin.exporter_device;
    f.exporter = m->origin.exporter;
    f.kind = m->origin.kind;
    f.pool_id = m->origin.pool_id;
    f.keep_alive = b.owner();
    return detail::ipc_handle_factory::make(std::move(f));
  }

  const detail::pointer_attributes a = detail::query_pointer(b.address());
  CUdeviceptr base = 0;
  std::size_t range = 0;
  detail::check(detail::address_range(static_cast<CUdeviceptr>(b.address()), &base, &range), "cuMemGetAddressRange");
  const std::uintptr_t start = static_cast<std::uintptr_t>(base);
  if (b.address() < start || b.address() - start > range ||
      static_cast<std::uint64_t>(b.size()) > range - (b.address() - start)) {
    throw invalid_argument("export_ipc: this buffer (" + b.describe() + ") is not inside one device allocation (" +
                           detail::hex_address(start) + ", " + std::to_string(range) +
                           " bytes), so no handle can describe it");
  }
  // Stream-ordered pool memory: only a shareable pool's can be exported, at
  // the start of its allocation (the address range above).
  if (a.known && a.pool != nullptr) {
    return export_pool_memory(b, std::move(f), base, a.pool);
  }

  CUipcMemHandle h{};
  CUresult r = detail::ipc_get_mem_handle(&h, base);
  if (r != CUDA_SUCCESS) {
    if (a.known && !a.legacy_ipc_capable) {
      throw invalid_argument(
          "export_ipc: this memory cannot be shared with legacy CUDA IPC (cuIpcGetMemHandle answered " +
          detail::describe_result(r) +
          "; the driver reports it is not IPC-capable): only cuMemAlloc memory can, not memory from pools, virtual "
          "memory management (cuMemCreate) or other allocators. Copy it into a buffer allocated with "
          "plain_device_resource (in Python: Context.new_buffer) and export that");
    }
    detail::throw_cuda_error(r, "cuIpcGetMemHandle");
  }
  std::memcpy(f.driver_handle.data(), h.reserved, f.driver_handle.size());
  f.offset = static_cast<std::int64_t>(b.address() - start);
  f.size = b.size();
  f.keep_alive = b.owner();
  return detail::ipc_handle_factory::make(std::move(f));
}

// ---- open -------------------------------------------------------------------------------

namespace {

// The mapping of `key`, opened with `open` (which calls the driver and
// answers the mapped base) unless this process has it open already.  Waits
// while a mapping of the same key is being closed.
template <class Open>
std::shared_ptr<ipc_mapping> find_or_open(const context& ctx, const mapping_key& key, const ipc_memory_handle& handle,
                                          std::shared_ptr<imported_pool::state> pool, const char* close_call,
                                          Open open) {
  std::shared_ptr<ipc_mapping> m;  // declared before the lock: destroyed, if need be, after it is released
  mapping_registry& r = registry();
  std::unique_lock lock(r.mutex);
  for (;;) {
    auto it = r.mappings.find(key);
    if (it == r.mappings.end()) break;
    if ((m = it->second.lock())) return m;
    r.closed.wait(lock);  // its last buffer is going: wait until the driver closed it
  }
  scoped_context guard(ctx);
  const CUdeviceptr mapped = open();
  auto unmap = [&] {
    CUresult res = pool ? detail::pool_free_imported(mapped) : detail::ipc_close_mem_handle(mapped);
    if (res != CUDA_SUCCESS) detail::warn_result(res, close_call);
  };
  CUdeviceptr base = 0;
  std::size_t range = 0;
  CUresult res = detail::address_range(mapped, &base, &range);
  if (res != CUDA_SUCCESS || base != mapped) {
    // Not expected: the driver maps the whole allocation.
    unmap();
    if (res != CUDA_SUCCESS) detail::throw_cuda_error(res, "cuMemGetAddressRange");
    throw error("open_ipc: the driver mapped the allocation at " + detail::hex_address(mapped) +
                ", which is not the start of its address range");
  }
  const mapping_origin origin{handle.device_id(), handle.exporter_token(), handle.kind(), handle.pool_id()};
  try {
    m = std::make_shared<ipc_mapping>(ctx, key, mapped, static_cast<std::int64_t>(range), origin, std::move(pool));
    r.mappings[key] = m;
  } catch (...) {
    if (!m) unmap();
    lock.unlock();
    throw;
  }
  return m;
}

// The buffer of `handle`'s range in mapping `m`.
buffer buffer_in(std::shared_ptr<ipc_mapping> m, buffer::fields f, const ipc_memory_handle& handle) {
  if (handle.offset() > m->range || handle.size() > m->range - handle.offset()) {
    throw invalid_argument("open_ipc: " + handle.describe() + " runs past the exported allocation of " +
                           std::to_string(m->range) + " bytes: the handle is damaged or forged");
  }
  f.address = static_cast<std::uintptr_t>(m->base) + static_cast<std::uintptr_t>(handle.offset());
  f.owner = std::move(m);
  return detail::buffer_factory::make(std::move(f));
}

}  // namespace

buffer open_ipc(const context& ctx, const ipc_memory_handle& handle) {
  buffer::fields f = detail::buffer_factory::fields_of(ctx, device_type::cuda, handle.size());
  if (handle.size() < 0 || handle.offset() < 0) {
    throw invalid_argument("open_ipc: " + handle.describe() + " has a negative size or offset");
  }
  if (handle.size() == 0) return detail::buffer_factory::make(std::move(f));
  if (handle.kind() == ipc_handle_kind::pool) {
    throw invalid_argument("open_ipc: " + handle.describe() +
                           " is a handle of pool memory: import the exporter's pool first (import_pool, with the "
                           "descriptor of its export_pool) and open the handle with open_ipc(pool, handle)");
  }
  if (handle.exported_by_this_process()) {
    throw invalid_argument(
        "open_ipc: this handle was exported by this very process, and CUDA refuses to open it here: IPC handles are "
        "for other processes. Use the exported buffer itself (or a slice of it) in this process");
  }
  detail::collect_deferred_releases();
  const mapping_key key{ctx.handle(), nullptr, handle.driver_handle()};
  auto m = find_or_open(ctx, key, handle, nullptr, "cuIpcCloseMemHandle", [&] {
    CUdeviceptr mapped = 0;
    CUresult res = detail::ipc_open_mem_handle(&mapped, to_driver(handle.driver_handle()));
    // Out of memory (the mapping needs device address space) is what it
    // says, and stays typed as such: no hint about the handle's origin.
    if (res == CUDA_ERROR_OUT_OF_MEMORY) detail::check_alloc(res, "cuIpcOpenMemHandle", handle.size());
    if (res != CUDA_SUCCESS) {
      try {
        detail::throw_cuda_error(res, "cuIpcOpenMemHandle");
      } catch (const cuda_error& e) {
        if (res == CUDA_ERROR_INVALID_CONTEXT) {
          rethrow_with_hint(e,
                            "the driver answers this when the handle was exported by this same process (IPC handles "
                            "are for other processes: use the exported buffer itself), or when no context is usable");
        }
        rethrow_with_hint(e,
                          "the exporting process may have exited or freed the memory, the handle may not be a CUDA "
                          "IPC handle, or it was exported by this process (IPC handles are for other processes)");
      }
    }
    return mapped;
  });
  return buffer_in(std::move(m), std::move(f), handle);
}

buffer open_ipc(const imported_pool& pool, const ipc_memory_handle& handle) {
  const context& ctx = pool.get_context();
  buffer::fields f = detail::buffer_factory::fields_of(ctx, device_type::cuda, handle.size());
  if (handle.size() < 0 || handle.offset() < 0) {
    throw invalid_argument("open_ipc: " + handle.describe() + " has a negative size or offset");
  }
  if (handle.size() == 0) return detail::buffer_factory::make(std::move(f));
  if (handle.kind() != ipc_handle_kind::pool) {
    throw invalid_argument("open_ipc: " + handle.describe() +
                           " is a legacy handle (cuMemAlloc memory), not one of pool memory: open it with "
                           "open_ipc(context, handle), without a pool");
  }
  if (handle.pool_id() != 0 && pool.pool_id() != 0 && handle.pool_id() != pool.pool_id()) {
    char ids[64];
    std::snprintf(ids, sizeof ids, "0x%016llx, not 0x%016llx", static_cast<unsigned long long>(handle.pool_id()),
                  static_cast<unsigned long long>(pool.pool_id()));
    throw invalid_argument("open_ipc: " + handle.describe() + " is memory of pool " + ids +
                           " (the pool imported here): import that pool's descriptor and open it from there");
  }
  detail::collect_deferred_releases();
  const mapping_key key{ctx.handle(), pool.native_handle(), handle.driver_handle()};
  auto m = find_or_open(ctx, key, handle, pool.state_, "cuMemFree (imported pool memory)", [&] {
    CUmemPoolPtrExportData data{};
    std::memcpy(data.reserved, handle.driver_handle().data(), sizeof data.reserved);
    CUdeviceptr mapped = 0;
    CUresult res = detail::pool_import_pointer(&mapped, pool.native_handle(), data);
    if (res == CUDA_ERROR_OUT_OF_MEMORY) detail::check_alloc(res, "cuMemPoolImportPointer", handle.size());
    if (res != CUDA_SUCCESS) {
      try {
        detail::throw_cuda_error(res, "cuMemPoolImportPointer");
      } catch (const cuda_error& e) {
        rethrow_with_hint(e,
                          "the handle may be of memory of another pool than the one imported here, or damaged, or "
                          "the exporter freed the memory");
      }
    }
    return mapped;
  });
  return buffer_in(std::move(m), std::move(f), handle);
}

}  // namespace cuarrow
