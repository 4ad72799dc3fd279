// Whole device objects shared with another process (include/cuarrow/ipc/share.hpp,
// docs/sharing.md): packed into one cuMemAlloc allocation as an IPC stream,
// shared through one CUDA IPC handle, read zero-copy by the importer.
#include "cuarrow/ipc/share.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "cuarrow/copy.hpp"
#include "cuarrow/error.hpp"
#include "cuarrow/ipc/stream.hpp"
#include "cuarrow/memory_resource.hpp"

namespace cuarrow::ipc {

namespace detail {

// Fills a shared_object: the class has no public constructor from parts, so
// that only share() makes one that owns an exported allocation.
struct share_access {
  static shared_object make(shared_kind kind, buffer data, ipc_memory_handle handle, bool packed) {
    shared_object o;
    o.kind_ = kind;
    o.data_ = std::move(data);
    o.handle_ = std::move(handle);
    o.packed_ = packed;
    o.released_ = false;
    return o;
  }
};

}  // namespace detail

namespace {

// Descriptor wire format, version 1 (docs/sharing.md), little-endian.
constexpr char kMagic[8] = {'C', 'U', 'A', 'R', 'S', 'H', 'R', '\0'};
constexpr std::size_t kVersionAt = 8;
constexpr std::size_t kKindAt = 10;
constexpr std::size_t kReservedAt = 11;
constexpr std::size_t kHandleLengthAt = 12;
constexpr std::size_t kHandleAt = 16;
constexpr std::size_t kChecksumAt = kHandleAt + ipc_memory_handle::serialized_size;
static_assert(kChecksumAt + 8 == shared_object::descriptor_size);

template <class T>
void put_le(std::byte* p, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    p[i] = static_cast<std::byte>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff);
}

template <class T>
T get_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<std::uint64_t>(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return static_cast<T>(v);
}

// FNV-1a 64: catches damaged descriptors (a truncated copy, flipped bytes),
// not forgeries; a forged descriptor still opens only memory another
// process of this user exported, and the stream in it is checked.
std::uint64_t fnv1a(const std::byte* p, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= std::to_integer<std::uint8_t>(p[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

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

// ---- exporter ------------------------------------------------------------------------

std::vector<std::byte> shared_object::descriptor() const {
  if (released_) throw invalid_argument("shared object: released, it has no descriptor any more");
  std::vector<std::byte> out(descriptor_size, std::byte{0});
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  put_le<std::uint16_t>(out.data() + kVersionAt, wire_version);
  out[kKindAt] = static_cast<std::byte>(kind_);
  put_le<std::uint32_t>(out.data() + kHandleLengthAt, static_cast<std::uint32_t>(ipc_memory_handle::serialized_size));
  const std::vector<std::byte> h = handle_.serialize();
  std::memcpy(out.data() + kHandleAt, h.data(), h.size());
  put_le<std::uint64_t>(out.data() + kChecksumAt, fnv1a(out.data(), kChecksumAt));
  return out;
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
  data_ = buffer();
  released_ = true;
}

shared_object::~shared_object() { release(); }

shared_object& shared_object::operator=(shared_object&& other) noexcept {
  if (this != &other) {
    release();
    kind_ = other.kind_;
    data_ = std::move(other.data_);
    handle_ = std::move(other.handle_);
    packed_ = other.packed_;
    released_ = other.released_;
    other.data_ = buffer();
    other.handle_ = ipc_memory_handle();
    other.released_ = true;
  }
  return *this;
}

shared_object::shared_object(shared_object&& other) noexcept { *this = std::move(other); }

shared_object share(const arrow::schema& schema, std::span<const arrow::record_batch> batches, const context& ctx,
                    stream_view s, shared_kind kind) {
  check_shape(kind, batches.size(), schema.fields.size(), "share");
  stream_writer w(schema, ctx, stream_writer::format::stream, s, {}, {}, plain_device_resource::shared());
  for (const arrow::record_batch& b : batches) w.write(b);
  buffer packed = w.finish();  // synchronized: complete before any importer reads
  ipc_memory_handle h = export_ipc(packed);
  return detail::share_access::make(kind, std::move(packed), std::move(h), true);
}

shared_object share(const buffer& b, stream_view s) {
  if (!b.get_context()) {
    throw invalid_argument("share: " + b.describe() +
                           " is host memory; copy it to a device first (copy_to_device), then share that");
  }
  try {
    ipc_memory_handle h = export_ipc(b);
    return detail::share_access::make(shared_kind::buffer, b, std::move(h), false);
  } catch (const invalid_argument&) {
    // Not exportable as it is (pool memory, pinned memory ...): share a
    // cuMemAlloc copy instead, one device-to-device copy.
  }
  buffer copy_of = allocate_device(*b.get_context(), b.size(), s, plain_device_resource::shared());
  copy(copy_of, 0, b, 0, b.size(), s);
  ipc_memory_handle h = export_ipc(copy_of);
  return detail::share_access::make(shared_kind::buffer, std::move(copy_of), std::move(h), false);
}

// ---- importer ------------------------------------------------------------------------

shared_descriptor read_shared_descriptor(std::span<const std::byte> bytes) {
  const std::size_t n = bytes.size();
  if (n != shared_object::descriptor_size) {
    bad_descriptor(n, "a descriptor is " + std::to_string(shared_object::descriptor_size) + " bytes");
  }
  const std::byte* p = bytes.data();
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0) bad_descriptor(n, "wrong magic, not a cuarrow shared object");
  const auto version = get_le<std::uint16_t>(p + kVersionAt);
  if (version != shared_object::wire_version) {
    bad_descriptor(n, "version " + std::to_string(version) + ", this cuarrow reads version " +
                          std::to_string(shared_object::wire_version));
  }
  if (get_le<std::uint64_t>(p + kChecksumAt) != fnv1a(p, kChecksumAt)) {
    bad_descriptor(n, "the checksum does not match: the bytes were damaged");
  }
  const auto kind = std::to_integer<std::uint8_t>(p[kKindAt]);
  if (!is_kind(kind)) bad_descriptor(n, "unknown kind " + std::to_string(kind));
  if (p[kReservedAt] != std::byte{0}) bad_descriptor(n, "the reserved byte is not 0");
  const auto handle_length = get_le<std::uint32_t>(p + kHandleLengthAt);
  if (handle_length != ipc_memory_handle::serialized_size) {
    bad_descriptor(n, "an IPC handle of " + std::to_string(handle_length) + " bytes, not " +
                          std::to_string(ipc_memory_handle::serialized_size));
  }
  shared_descriptor d;
  d.kind = static_cast<shared_kind>(kind);
  try {
    d.handle = ipc_memory_handle::deserialize(bytes.subspan(kHandleAt, handle_length));
  } catch (const invalid_argument& e) {
    bad_descriptor(n, std::string("its IPC handle is malformed: ") + e.what());
  }
  return d;
}

opened_shared open_shared(const context& ctx, std::span<const std::byte> descriptor, const read_options& options) {
  const shared_descriptor d = read_shared_descriptor(descriptor);
  opened_shared out;
  out.kind = d.kind;
  out.data = open_ipc(ctx, d.handle);
  if (d.kind == shared_kind::buffer) return out;
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
  return out;
}

}  // namespace cuarrow::ipc
