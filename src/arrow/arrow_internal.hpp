// Internal helpers of the typed-array layer (src/arrow/).
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cuarrow/arrow/array.hpp"
#include "cuarrow/arrow/validate.hpp"
#include "cuarrow/buffer.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow::arrow::detail {

// ---- type parameters (type.cpp), checked by the factories and parse_format ----

// Why a decimal's precision does not fit its bit width (or the width is not
// 32, 64, 128 or 256), or "" when it does.
std::string decimal_problem(std::int32_t precision, int bits);
// Why union type codes are wrong for `n_children` children (count,
// negative, repeated), or "" when they are fine.
std::string union_codes_problem(const std::vector<std::int8_t>& codes, std::size_t n_children);

// ---- paths in error messages --------------------------------------------------

inline std::string column_path(const std::string& name) { return "column \"" + name + "\""; }

// `fields`: the parent's children, which name the child.
inline std::string child_path(const std::string& parent, std::size_t i, const std::vector<field>& fields) {
  std::string s = parent + " \u2192 child " + std::to_string(i);
  if (i < fields.size()) s += " (\"" + fields[i].name + "\")";
  return s;
}

inline std::string child_path(const std::string& parent, std::size_t i, const data_type& parent_type) {
  return child_path(parent, i, parent_type.children);
}

inline std::string dictionary_path(const std::string& parent) { return parent + " \u2192 dictionary"; }

// ---- reading host memory ----------------------------------------------------------

inline bool get_bit(const std::uint8_t* bits, std::int64_t i) { return (bits[i >> 3] >> (i & 7)) & 1; }

// Element `i` of an array of `width`-byte integers at `p` (unaligned-safe).
inline std::int64_t load_int(const std::uint8_t* p, std::int64_t i, int width, bool is_signed) {
  const std::uint8_t* q = p + i * width;
  switch (width) {
    case 1: {
      std::uint8_t v;
      std::memcpy(&v, q, 1);
      return is_signed ? static_cast<std::int8_t>(v) : v;
    }
    case 2: {
      std::uint16_t v;
      std::memcpy(&v, q, 2);
      return is_signed ? static_cast<std::int16_t>(v) : v;
    }
    case 4: {
      std::uint32_t v;
      std::memcpy(&v, q, 4);
      return is_signed ? static_cast<std::int32_t>(v) : static_cast<std::int64_t>(v);
    }
    default: {
      std::uint64_t v;
      std::memcpy(&v, q, 8);
      // uint64 values above INT64_MAX read as negative: callers treat them as out of range.
      return static_cast<std::int64_t>(v);
    }
  }
}

// ---- overflow-checked sizes ---------------------------------------------------------

inline std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Set bits among `n` bits of `bits` from bit `offset` (a byte at a time
// where it can).
inline std::int64_t count_set_bits(const std::uint8_t* bits, std::int64_t offset, std::int64_t n) {
  std::int64_t set = 0;
  std::int64_t i = offset;
  const std::int64_t end = offset + n;
  for (; i < end && (i & 7) != 0; ++i) set += get_bit(bits, i);
  for (; i + 64 <= end; i += 64) {
    std::uint64_t word;
    std::memcpy(&word, bits + (i >> 3), 8);
    set += __builtin_popcountll(word);
  }
  for (; i + 8 <= end; i += 8) set += __builtin_popcount(bits[i >> 3]);
  for (; i < end; ++i) set += get_bit(bits, i);
  return set;
}

// The bytes of `a`'s validity bitmap that hold its bits [offset, offset +
// length): {first byte, byte count}.  invalid_data when the bitmap is too
// small.  For arrays with a non-empty bitmap and length > 0.
std::pair<std::int64_t, std::int64_t> validity_bytes(const array_data& a);
// The nulls among `a`'s bits, given the bytes validity_bytes(a) names.
inline std::int64_t nulls_in_validity_bytes(const array_data& a, const std::uint8_t* bytes) {
  return a.length - count_set_bits(bytes, a.offset - a.offset / 8 * 8, a.length);
}

// Bytes of a bitmap covering `bits` bits.
inline std::int64_t bitmap_bytes(std::int64_t bits) { return bits / 8 + (bits % 8 != 0 ? 1 : 0); }

// Whether a buffer's size follows from its layout and the array's offset +
// length alone: all but data and variadic buffers, whose sizes follow from
// values (the last offset, the views).
inline bool sized_by_layout(buffer_role role) { return role != buffer_role::data && role != buffer_role::variadic; }

// The bytes a buffer sized by its layout needs for slots [0, end) (an array's
// offset + length): bitmap_bytes(end) for validity and boolean bitmaps,
// end + 1 offsets, else end elements of spec.byte_width; nullopt when that
// overflows.  0 for data and variadic buffers.
inline std::optional<std::int64_t> layout_bytes(const buffer_spec& spec, std::int64_t end) {
  switch (spec.role) {
    case buffer_role::validity:
    case buffer_role::bitmap: return bitmap_bytes(end);
    case buffer_role::offsets: {
      const auto n = checked_add(end, 1);
      return n ? checked_mul(*n, spec.byte_width) : std::nullopt;
    }
    case buffer_role::values:
    case buffer_role::list_offsets:
    case buffer_role::list_sizes:
    case buffer_role::views:
    case buffer_role::type_ids:
    case buffer_role::union_offsets: return checked_mul(end, spec.byte_width);
    case buffer_role::data:
    case buffer_role::variadic: return 0;
  }
  return 0;
}

// ---- batched small reads ------------------------------------------------------------

// A range of bytes to read to the host: `size` bytes at byte `pos` of `buf`
// (the caller has checked that it lies within).
struct host_read {
  buffer buf;
  std::int64_t pos = 0;
  std::int64_t size = 0;
};

// Every range's bytes in one host-accessible buffer, one after another
// (range k at the sum of the sizes before it).  Device memory is read in
// ONE copy_batch per stream read on (stream_for_device), synchronized,
// into pinned memory from the pool where it can be had (a device-to-host
// copy into pageable memory returns only once it has run, a round trip
// each), with no host function to keep buffers alive (`reads` holds the
// sources, the result the destination); pinned and managed memory is read
// directly after its stream has caught up, ordinary host memory at once.
// The one mechanism for the small reads of layouts and checks: offsets
// (probe_cache), bitmaps to count nulls in, buffers a writer recomputes.
buffer read_to_host(std::span<const host_read> reads, stream_view s);

// The same reads for a caller that queues them with copies of its own (one
// batched copy, one launch of the gather kernel where it runs) and waits
// for them all once: `pieces` copy every range into `bytes`, one pinned
// block from the pool, laid out as read_to_host lays its result.  nullopt
// where read_to_host is needed instead: a range outside device memory of
// `ctx`, or no pinned memory to be had.  `bytes` is readable once the
// caller's copies have run.
struct queued_reads {
  buffer bytes;
  std::vector<copy_piece> pieces;
};
std::optional<queued_reads> reads_into_pinned(std::span<const host_read> reads, const context& ctx);

// Small integer reads (offsets, run ends, variadic sizes) of an array tree,
// gathered so that memory outside ordinary host memory is read in ONE batch:
// every pending read of device memory is one piece of ONE copy_batch (per
// stream read on) into one host scratch buffer, synchronized once, with no
// host function to keep its buffers alive (the caller holds them); reads of
// pinned or managed memory happen directly after that same synchronization.
// Reads of ordinary host memory are direct and never pending.
class probe_cache {
 public:
  // A value to read: `width` bytes at byte `pos` of `buf`.
  struct request {
    buffer buf;
    std::int64_t pos;
    int width;
  };
  // The value, if ordinary host memory or already fetched.
  std::optional<std::int64_t> get(const buffer& b, std::int64_t byte_pos, int width, bool is_signed) const;
  // get(), or queue the read and return nullopt.  The caller has checked
  // that [byte_pos, byte_pos + width) lies within `b`.
  std::optional<std::int64_t> get_or_request(const buffer& b, std::int64_t byte_pos, int width, bool is_signed);
  std::size_t pending() const noexcept { return pending_.size(); }
  // Read every pending request in one batch on `s` (see above).
  void fetch(stream_view s);
  // The pending requests appended to `reads` (a caller's round of reads
  // that read_to_host makes together with others of its own), and then
  // their values taken from the bytes read for them at `at`; returns past
  // them.  fetch() is these two around one read_to_host.
  void add_reads(std::vector<host_read>& reads) const;
  const std::uint8_t* take(const std::uint8_t* at);
  // The pending requests, handed to a caller that reads them another way
  // (the file reader takes them from the staging slots that fill the
  // device) and supply()s what it read; the next pass asks again for any
  // it does not supply.
  std::vector<request> take_pending() {
    pending_keys_.clear();
    return std::exchange(pending_, {});
  }
  // The value of `r`, `raw` its little-endian bytes, read by the caller
  // from the bytes the device got.
  void supply(const request& r, std::uint64_t raw);

 private:
  // (address, width): what a request or a value is known by.
  struct key_hash {
    std::size_t operator()(const std::pair<std::uintptr_t, int>& k) const noexcept {
      return std::hash<std::uintptr_t>()(k.first * 8 + static_cast<std::uintptr_t>(k.second));
    }
  };
  std::vector<request> pending_;
  std::unordered_set<std::pair<std::uintptr_t, int>, key_hash> pending_keys_;           // pending_'s keys
  std::unordered_map<std::pair<std::uintptr_t, int>, std::uint64_t, key_hash> values_;  // raw little-endian bytes
};

// The primary context to work on data of device `device_id` in (a
// placement's device_id); device 0's for host data (device id -1), which no
// device owns.
context device_context(int device_id);

// Synchronize `s`.  A default stream acts on the current context, so it is
// synchronized with device_context(device) pushed.
void synchronize(stream_view s, int device);

// The stream to read memory of device `device` on, given the caller's
// stream `s` (which orders the data): `s` itself when it can be used there;
// otherwise `s` is synchronized and the device's legacy default stream used.
stream_view stream_for_device(stream_view s, int device);

// ---- validation, shared by validate(), the transfers and the importers --------------

struct validation_root {
  const array_data* array;
  std::string path;  // "array", `column "x"`, ...
};

// The columns of a batch as validation roots, after checking the batch's
// shape (one column per field, of its type and of num_rows rows).  Throws
// invalid_data naming the column.
std::vector<validation_root> batch_roots(const record_batch& batch);

// The check to_host makes of its results before it hands them to host
// code: on top of the cheap checks, every value a host reader indexes with
// (offsets, list view ranges, union type ids and offsets, view lengths and
// buffer indexes, dictionary indices, run ends, map entries and keys
// without nulls), read in place.  The trees must be host-accessible and
// ready.  Throws invalid_data naming the path and the element.
void check_host_readable(const std::vector<validation_root>& roots);

// Whether check_host_readable may read a buffer of role `role` of an array
// of type `t` (`run_ends`: the array is the run ends child of a run-end
// encoded array).  It leaves unread only the payload host readers index
// into, never with: fixed-width values (other than dictionary indices and
// run ends), the bytes of binary and utf8 arrays, boolean bits.  to_host
// copies the buffers it reads first, so the check overlaps the rest.
bool host_check_reads(const data_type& t, buffer_role role, bool run_ends);

// Validate several trees (the columns of a batch) with the reads cached in
// `cache`: a cheap validation of device memory fetches at most once for all
// of them; a full one copies the device-resident trees to the host in one
// batch.  Each tree must live in one place (placement_of).
void validate_roots(const std::vector<validation_root>& roots, validation_level level, bool check_utf8, stream_view s,
                    probe_cache& cache);

// The first pass of validate_roots' cheap checks, reading nothing: what
// they need from device memory is queued in `cache` (for a caller that can
// read it more cheaply than fetch(), then supply()s it).  Throws
// invalid_data for what the trees' shapes alone show wrong.
void request_cheap_reads(const std::vector<validation_root>& roots, probe_cache& cache);

// The value of the last offset of an offset-based array (binary, lists, map)
// from the cache (or host memory), when known.
std::optional<std::int64_t> cached_last_offset(const array_data& a, const probe_cache& cache);

// ---- transfers --------------------------------------------------------------------------

enum class destination_kind { device, host, pinned };

// Copy the tree (already validated) into one allocation of `kind`; every
// copy queued on `s`, nothing synchronized.  `cache` supplies last offsets
// to cut data buffers.
array_data copy_tree_async(const array_data& src, destination_kind kind, const context* ctx, stream_view s,
                           const probe_cache& cache);

}  // namespace cuarrow::arrow::detail
