// Whole device objects shared with another process (include/cuarrow/ipc/share.hpp,
// docs/sharing.md): packed into one cuMemAlloc allocation (or one allocation
// of the device's process-wide ipc_pool_resource) as an IPC stream, shared
// through one CUDA IPC handle, read zero-copy by the importer.
#include "cuarrow/ipc/share.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "cuarrow/copy.hpp"
#include "cuarrow/error.hpp"
#include "cuarrow/ipc/stream.hpp"
#include "cuarrow/memory_resource.hpp"
#include "runtime/runtime.hpp"
#include "wire.hpp"

namespace cuarrow::ipc {

using cuarrow::detail::fnv1a;
using cuarrow::detail::get_le;
using cuarrow::detail::put_le;

namespace detail {

// Fills a shared_object: the class has no public constructor from parts, so
// that only share() makes one that owns an exported allocation.
struct share_access {
  static shared_object make(shared_kind kind, buffer data, ipc_memory_handle handle, bool packed,
                            std::shared_ptr<ipc_pool_resource> pool = nullptr) {
    shared_object o;
    o.kind_ = kind;
    o.memory_ = pool ? share_memory::pool : share_memory::legacy;
    o.pool_ = std::move(pool);
    o.data_ = std::move(data);
    o.handle_ = std::move(handle);
    o.packed_ = packed;
    o.released_ = false;
    return o;
  }
};

}  // namespace detail

namespace {

// Descriptor wire format, version 1 (legacy handle) and 2 (pool handle)
// (docs/sharing.md), little-endian; version 2 is version 1's layout with the
// longer handle, the checksum after it.
constexpr char kMagic[8] = {'C', 'U', 'A', 'R', 'S', 'H', 'R', '\0'};
constexpr std::size_t kVersionAt = 8;
constexpr std::size_t kKindAt = 10;
constexpr std::size_t kReservedAt = 11;
constexpr std::size_t kHandleLengthAt = 12;
constexpr std::size_t kHandleAt = 16;
constexpr std::size_t checksum_at(std::size_t handle_size) { return kHandleAt + handle_size; }
static_assert(checksum_at(ipc_memory_handle::serialized_size) + 8 == shared_object::descriptor_size);
static_assert(checksum_at(ipc_memory_handle::pool_serialized_size) + 8 == shared_object::pool_descriptor_size);

bool is_kind(std::uint8_t k) { return k >= 1 && k <= 5; }

[[noreturn]] void bad_descriptor(std::size_t length, const std::string& what) {
  throw invalid_argument("shared object descriptor of " + std::to_string(length) + " bytes: " + what +
                         " (pass the bytes descriptor() gave, unchanged)");
}

// The batches must be what `kind` says they stand for.
void check_shape(shared_kind kind, std::size_t batches, std::size_t columns, const char* who) {
  auto fail = [&](const std::string& what) {
    throw invalid_argument(std::string(who) + ": a shared " + to_string(kind) + " " + what + ", not " +
                           std::to_string(batches) + " batch(es) of " + std::to_string(columns) + " column(s)");
  };
  switch (kind) {
    case shared_kind::table: break;
    case shared_kind::record_batch:
      if (batches != 1) fail("is one record batch");
      break;
    case shared_kind::array:
      if (batches != 1 || columns != 1) fail("is one batch of one column");
      break;
    case shared_kind::chunked_array:
      if (columns != 1) fail("is batches of one column");
      break;
    case shared_kind::buffer: throw invalid_argument(std::string(who) + ": a buffer is shared with share(buffer)");
  }
}

}  // namespace

const char* to_string(shared_kind k) noexcept {
  switch (k) {
    case shared_kind::table: return "table";
    case shared_kind::record_batch: return "record_batch";
    case shared_kind::array: return "array";
    case shared_kind::chunked_array: return "chunked_array";
    case shared_kind::buffer: return "buffer";
  }
  return "unknown";
}

const char* to_string(share_memory m) noexcept {
  switch (m) {
    case share_memory::legacy: return "legacy";
    case share_memory::pool: return "pool";
  }
  return "unknown";
}

shared_kind shared_kind_of(std::string_view name) {
  for (shared_kind k : {shared_kind::table, shared_kind::record_batch, shared_kind::array, shared_kind::chunked_array,
                        shared_kind::buffer}) {
    if (name == to_string(k)) return k;
  }
  throw invalid_argument("not a kind of shared object: \"" + std::string(name) + "\"");
}

share_memory share_memory_of(std::string_view name) {
  for (share_memory m : {share_memory::legacy, share_memory::pool}) {
    if (name == to_string(m)) return m;
  }
  throw invalid_argument("memory must be \"legacy\" or \"pool\", not \"" + std::string(name) + "\"");
}

// ---- exporter ------------------------------------------------------------------------

std::vector<std::byte> shared_object::descriptor() const {
  if (released_) throw invalid_argument("shared object: released, it has no descriptor any more");
  const std::vector<std::byte> h = handle_.serialize();
  const bool pool = handle_.kind() == ipc_handle_kind::pool;
  const std::size_t expected = pool ? ipc_memory_handle::pool_serialized_size : ipc_memory_handle::serialized_size;
  if (h.size() != expected) {
    throw invalid_argument("shared object: its IPC handle serialized to " + std::to_string(h.size()) + " bytes, not " +
                           std::to_string(expected));  // cannot happen: export_ipc made it
  }
  const std::size_t at = checksum_at(h.size());
  std::vector<std::byte> out(at + 8, std::byte{0});
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  put_le<std::uint16_t>(out.data() + kVersionAt, pool ? pool_wire_version : wire_version);
  out[kKindAt] = static_cast<std::byte>(kind_);
  put_le<std::uint32_t>(out.data() + kHandleLengthAt, static_cast<std::uint32_t>(h.size()));
  std::memcpy(out.data() + kHandleAt, h.data(), h.size());
  put_le<std::uint64_t>(out.data() + at, fnv1a(out.data(), at));
  return out;
}

std::optional<shareable_pool> shared_object::export_pool() const {
  if (released_) throw invalid_argument("shared object: released, there is no pool to export any more");
  if (!pool_) return std::nullopt;
  return cuarrow::export_pool(*pool_);
}

void shared_object::release() noexcept {
  if (released_) return;
  // A packed stream is ours alone: blank its first message's prefix before
  // letting it go, so that a late open finds no stream (on drivers that
  // still map a released allocation) instead of the old data or whatever
  // reuses the memory.  Importers holding batches read bodies, untouched.
  if (packed_ && data_.size() >= 8) {
    try {
      fill(data_, 0, 8, 0);
    } catch (...) {  // NOLINT(bugprone-empty-catch): release cannot fail; the memory is freed either way
    }
  }
  handle_ = ipc_memory_handle();
  data_ = buffer();  // pool memory: freed in stream order
  pool_.reset();
  released_ = true;
}

shared_object::~shared_object() { release(); }

shared_object& shared_object::operator=(shared_object&& other) noexcept {
  if (this != &other) {
    release();
    kind_ = other.kind_;
    memory_ = other.memory_;
    pool_ = std::move(other.pool_);
    data_ = std::move(other.data_);
    handle_ = std::move(other.handle_);
    packed_ = other.packed_;
    released_ = other.released_;
    other.data_ = buffer();
    other.handle_ = ipc_memory_handle();
    other.pool_.reset();
    other.released_ = true;
  }
  return *this;
}

shared_object::shared_object(shared_object&& other) noexcept { *this = std::move(other); }

namespace {

// The pool share() packs into (nullptr: legacy memory).
std::shared_ptr<ipc_pool_resource> pool_for(const context& ctx, const share_options& options) {
  switch (options.memory) {
    case share_memory::legacy: return nullptr;
    case share_memory::pool: return ipc_pool_resource::shared_for(ctx);
  }
  throw invalid_argument("share: share_options::memory is " + std::to_string(static_cast<int>(options.memory)) +
                         ", not share_memory::legacy or share_memory::pool");
}

std::shared_ptr<device_memory_resource> resource_of(const std::shared_ptr<ipc_pool_resource>& pool) {
  if (pool) return pool;
  return plain_device_resource::shared();
}

}  // namespace

shared_object share(const arrow::schema& schema, std::span<const arrow::record_batch> batches, const context& ctx,
                    stream_view s, shared_kind kind, const share_options& options) {
  check_shape(kind, batches.size(), schema.fields.size(), "share");
  std::shared_ptr<ipc_pool_resource> pool = pool_for(ctx, options);
  stream_writer w(schema, ctx, stream_writer::format::stream, s, {}, {}, resource_of(pool));
  // Every batch in one write: their layouts together, and copied as they
  // are laid out (a write per batch would copy the first batch twice).
  w.write(batches);
  buffer packed = w.finish();  // synchronized: complete before any importer reads
  ipc_memory_handle h = export_ipc(packed);
  return detail::share_access::make(kind, std::move(packed), std::move(h), true, std::move(pool));
}

shared_object share(const buffer& b, stream_view s, const share_options& options) {
  if (!b.get_context()) {
    throw invalid_argument("share: " + b.describe() +
                           " is host memory; copy it to a device first (copy_to_device), then share that");
  }
  const context& ctx = *b.get_context();
  std::shared_ptr<ipc_pool_resource> pool = pool_for(ctx, options);
  try {
    ipc_memory_handle h = export_ipc(b);
    const bool as_is = pool ? h.kind() == ipc_handle_kind::pool && h.pool_id() == pool->pool_id()
                            : h.kind() == ipc_handle_kind::legacy;
    if (as_is) return detail::share_access::make(shared_kind::buffer, b, std::move(h), false, std::move(pool));
  } catch (const invalid_argument&) {
    // Not exportable as it is (the default pool, pinned memory ...).
  }
  // Not memory of the kind asked for: share a copy in such memory, one
  // device-to-device copy.
  buffer copy_of = allocate_device(ctx, b.size(), s, resource_of(pool));
  copy(copy_of, 0, b, 0, b.size(), s);  // synchronized: complete before any importer reads
  ipc_memory_handle h = export_ipc(copy_of);
  return detail::share_access::make(shared_kind::buffer, std::move(copy_of), std::move(h), false, std::move(pool));
}

// ---- importer ------------------------------------------------------------------------

shared_descriptor read_shared_descriptor(std::span<const std::byte> bytes) {
  const std::size_t n = bytes.size();
  if (n != shared_object::descriptor_size && n != shared_object::pool_descriptor_size) {
    bad_descriptor(n, "a descriptor is " + std::to_string(shared_object::descriptor_size) +
                          " bytes (legacy memory) or " + std::to_string(shared_object::pool_descriptor_size) +
                          " bytes (pool memory)");
  }
  const std::byte* p = bytes.data();
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0) bad_descriptor(n, "wrong magic, not a cuarrow shared object");
  const auto version = get_le<std::uint16_t>(p + kVersionAt);
  if (version != shared_object::wire_version && version != shared_object::pool_wire_version) {
    bad_descriptor(n, "version " + std::to_string(version) + ", this cuarrow reads versions " +
                          std::to_string(shared_object::wire_version) + " and " +
                          std::to_string(shared_object::pool_wire_version));
  }
  const bool pool = version == shared_object::pool_wire_version;
  const std::size_t size_of_version = pool ? shared_object::pool_descriptor_size : shared_object::descriptor_size;
  if (n != size_of_version) {
    bad_descriptor(
        n, "version " + std::to_string(version) + " descriptors are " + std::to_string(size_of_version) + " bytes");
  }
  const std::size_t handle_size = pool ? ipc_memory_handle::pool_serialized_size : ipc_memory_handle::serialized_size;
  const std::size_t at = checksum_at(handle_size);
  if (get_le<std::uint64_t>(p + at) != fnv1a(p, at)) {
    bad_descriptor(n, "the checksum does not match: the bytes were damaged");
  }
  const auto kind = std::to_integer<std::uint8_t>(p[kKindAt]);
  if (!is_kind(kind)) bad_descriptor(n, "unknown kind " + std::to_string(kind));
  if (p[kReservedAt] != std::byte{0}) bad_descriptor(n, "the reserved byte is not 0");
  const auto handle_length = get_le<std::uint32_t>(p + kHandleLengthAt);
  if (handle_length != handle_size) {
    bad_descriptor(n,
                   "an IPC handle of " + std::to_string(handle_length) + " bytes, not " + std::to_string(handle_size));
  }
  shared_descriptor d;
  d.kind = static_cast<shared_kind>(kind);
  d.memory = pool ? share_memory::pool : share_memory::legacy;
  try {
    d.handle = ipc_memory_handle::deserialize(bytes.subspan(kHandleAt, handle_length));
  } catch (const invalid_argument& e) {
    bad_descriptor(n, std::string("its IPC handle is malformed: ") + e.what());
  }
  const ipc_handle_kind expected = pool ? ipc_handle_kind::pool : ipc_handle_kind::legacy;
  if (d.handle.kind() != expected) {
    bad_descriptor(n, std::string("version ") + std::to_string(version) + " carries a " + (pool ? "pool" : "legacy") +
                          " handle, this one is not");
  }
  return d;
}

namespace {

// Reads the stream at `out.data` (opened from `d`) into `out`.
void read_opened(const shared_descriptor& d, opened_shared& out, const read_options& options) {
  if (d.kind == shared_kind::buffer) return;
  std::optional<stream_reader> r;
  try {
    r.emplace(out.data, options);
  } catch (const invalid_message& e) {
    throw invalid_message(
        "shared " + std::string(to_string(d.kind)),
        std::string("no readable stream at the shared memory (did the exporter release it?): ") + e.what());
  }
  out.schema = r->schema().schema;
  out.batches = r->read_all();
  std::size_t columns = out.schema.fields.size();
  try {
    check_shape(d.kind, out.batches.size(), columns, "open_shared");
  } catch (const invalid_argument& e) {
    throw invalid_message("shared " + std::string(to_string(d.kind)), e.what());
  }
}

// Pool handles open in their own process (the driver allows it), legacy ones
// do not: descriptors are for other processes either way.
[[noreturn]] void refuse_own(const shared_descriptor& d) {
  throw invalid_argument("open_shared: this process shared this " + std::string(to_string(d.kind)) +
                         " itself; descriptors are for other processes (use the object you shared)");
}

}  // namespace

opened_shared open_shared(const context& ctx, std::span<const std::byte> descriptor, const read_options& options) {
  const shared_descriptor d = read_shared_descriptor(descriptor);
  if (d.memory == share_memory::pool && d.handle.exported_by_this_process()) refuse_own(d);
  if (d.memory == share_memory::pool) {
    throw invalid_argument("open_shared: the descriptor is of a shared " + std::string(to_string(d.kind)) +
                           " in pool memory (pool " + cuarrow::detail::hex_address(d.handle.pool_id()) +
                           "); it opens with the exporter's pool: pass "
                           "open_shared(ctx, descriptor, import_shared_pool(ctx, fd, pool_id), options), with the fd "
                           "and pool_id of the exporter's shared_object::export_pool()");
  }
  opened_shared out;
  out.kind = d.kind;
  out.data = open_ipc(ctx, d.handle);
  read_opened(d, out, options);
  return out;
}

opened_shared open_shared(const context& ctx, std::span<const std::byte> descriptor, const imported_pool& pool,
                          const read_options& options) {
  const shared_descriptor d = read_shared_descriptor(descriptor);
  if (d.memory == share_memory::legacy) return open_shared(ctx, descriptor, options);  // the pool is not needed
  if (d.handle.exported_by_this_process()) refuse_own(d);
  if (pool.get_context() != ctx) {
    throw device_mismatch("open_shared: the pool was imported into the context of device " +
                          std::to_string(pool.get_context().device_number()) + ", the descriptor is opened on device " +
                          std::to_string(ctx.device_number()) +
                          "; import the pool into the context you open on (import_shared_pool(ctx, fd, pool_id))");
  }
  opened_shared out;
  out.kind = d.kind;
  out.data = open_ipc(pool, d.handle);
  read_opened(d, out, options);
  return out;
}

imported_pool import_shared_pool(const context& ctx, int fd, std::uint64_t pool_id) {
  if (pool_id == 0) {
    throw invalid_argument(
        "import_shared_pool: pool_id 0 names no pool; pass the pool_id of the exporter's shared_object::export_pool()");
  }
  struct registry {
    std::mutex mutex;
    std::map<std::pair<CUcontext, std::uint64_t>, imported_pool> pools;
  };
  static auto* r = new registry;  // never destroyed: imports are kept for the process
  const std::lock_guard<std::mutex> lock(r->mutex);
  const auto key = std::make_pair(ctx.handle(), pool_id);
  auto it = r->pools.find(key);
  if (it != r->pools.end()) return it->second;
  imported_pool p = import_pool(ctx, fd, pool_id);  // throws for a negative fd
  r->pools.emplace(key, p);
  return p;
}

}  // namespace cuarrow::ipc
