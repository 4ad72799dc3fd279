// Arrow IPC record batch bodies (include/cuarrow/ipc/record_batch.hpp):
// header + body -> typed arrays whose buffers are slices of the body, the
// dictionary memo and its deltas, and the body layout Arrow C++'s writer
// makes.
//
// The IPC buffer order per array (Arrow's ArrayLoader / RecordBatchSerializer):
//   null               none
//   fixed width, bool  validity, values
//   binary, utf8 (+large)  validity, offsets, data
//   views              validity, views, then variadic_buffer_counts[k] data buffers
//   list, large_list, map  validity, offsets; child
//   list views         validity, offsets, sizes; child
//   fixed_size_list, struct  validity; children
//   sparse / dense union  (V4: validity,) type ids (, offsets); children
//   run-end encoded    none; run ends, values
//   dictionary         the indices' buffers
// which is cuarrow's layout_of order with the V4 union validity added.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>

#include "arrow/arrow_internal.hpp"
#include "copy_sources.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/ipc/record_batch.hpp"
#include "message_io.hpp"

namespace cuarrow::ipc {

namespace ad = arrow::detail;
using arrow::array_data;
using arrow::data_type;
using arrow::field;
using arrow::type_id;

namespace {

std::string num(std::int64_t v) { return std::to_string(v); }
std::string num(std::size_t v) { return std::to_string(v); }

std::string path_text(const std::vector<int>& path) {
  std::string s = "{";
  for (std::size_t i = 0; i < path.size(); ++i) s += (i ? ", " : "") + std::to_string(path[i]);
  return s + "}";
}

const char* codec_name(compression_codec c) { return c == compression_codec::lz4_frame ? "LZ4_FRAME" : "ZSTD"; }

// The field at `path` (child indices from the schema's fields; a dictionary
// field's children are its values'), or null.
const field* field_at(const arrow::schema& schema, const std::vector<int>& path) {
  if (path.empty() || path[0] < 0 || static_cast<std::size_t>(path[0]) >= schema.fields.size()) return nullptr;
  const field* f = &schema.fields[static_cast<std::size_t>(path[0])];
  for (std::size_t i = 1; i < path.size(); ++i) {
    const data_type& t = f->type.id == type_id::dictionary ? *f->type.value_type : f->type;
    if (path[i] < 0 || static_cast<std::size_t>(path[i]) >= t.children.size()) return nullptr;
    f = &t.children[static_cast<std::size_t>(path[i])];
  }
  return f;
}

bool has_union_validity(metadata_version v) { return v < metadata_version::v5; }

// ---- reading ------------------------------------------------------------------------

// One walk of the schema tree over the header.  The first walk (build =
// false) only checks: node, buffer and variadic counts, node values,
// dictionaries; the second takes the buffers.
struct loader {
  const record_batch_header& h;
  const buffer& body;
  const dictionary_memo& memo;
  const read_options& opt;
  const std::map<std::vector<int>, std::int64_t>& dict_ids;
  bool build = false;
  // False for column_spans, which walks the header alone (no memo).
  bool check_dictionaries = true;

  std::size_t next_node = 0;
  std::size_t next_buffer = 0;
  std::size_t next_variadic = 0;
  std::vector<int> path;

  [[noreturn]] static void fail(const std::string& where, const std::string& reason) {
    throw invalid_message(where, reason);
  }

  field_node take_node(const std::string& where) {
    if (next_node >= h.nodes.size()) {
      fail(where, "no field node left: the header has " + num(h.nodes.size()) +
                      " field nodes, fewer than the schema has arrays");
    }
    const std::size_t i = next_node++;
    const field_node n = h.nodes[i];
    if (n.length >= 0 && n.null_count >= 0 && n.null_count <= n.length) return n;
    const std::string at = "field node " + num(i) + ": ";  // built only for the error
    if (n.length < 0) fail(where, at + "negative length " + num(n.length));
    if (n.null_count < 0) fail(where, at + "negative null count " + num(n.null_count));
    fail(where, at + "null count " + num(n.null_count) + " exceeds the length " + num(n.length));
  }

  buffer take_buffer(const std::string& where, const char* what) {
    if (next_buffer >= h.buffers.size()) {
      fail(where, std::string("no buffer left for the ") + what + " buffer: the header has " + num(h.buffers.size()) +
                      " buffers, fewer than the schema's arrays take");
    }
    const std::size_t i = next_buffer++;
    const body_range r = h.buffers[i];
    if (!build || r.length == 0) return {};
    buffer b = body.slice(r.offset, r.length);  // checked by check_ranges
    if (h.compression) {
      b = opt.decompress(*h.compression, b);
    }
    return b;
  }

  std::int64_t take_variadic_count(const std::string& where) {
    if (next_variadic >= h.variadic_buffer_counts.size()) {
      fail(where, "no variadic buffer count left: the header has " + num(h.variadic_buffer_counts.size()) +
                      ", fewer than the schema has view arrays");
    }
    const std::size_t i = next_variadic++;
    const std::int64_t c = h.variadic_buffer_counts[i];
    if (c < 0) fail(where, "variadic buffer count " + num(i) + " is negative: " + num(c));
    if (c > static_cast<std::int64_t>(h.buffers.size() - next_buffer)) {
      fail(where, "variadic buffer count " + num(i) + " is " + num(c) + ", more than the " +
                      num(h.buffers.size() - next_buffer) + " buffers left in the header");
    }
    return c;
  }

  array_data load(const field& f, const std::string& where, int depth) {
    if (depth > opt.max_depth) fail(where, "nested deeper than " + num(static_cast<std::int64_t>(opt.max_depth)));
    const data_type& t = f.type;
    array_data a;
    a.type = t;
    if (t.id == type_id::dictionary && check_dictionaries) {
      const auto it = dict_ids.find(path);
      if (it == dict_ids.end()) {
        fail(where,
             "a dictionary-encoded field without a dictionary id in the schema message (path " + path_text(path) + ")");
      }
      std::shared_ptr<const array_data> d = memo.get(it->second);
      if (!d) {
        fail(where, "dictionary id " + num(it->second) +
                        " has no dictionary (no dictionary batch with this id came before the record batch)");
      }
      if (!(d->type == *t.value_type)) {
        fail(where, "dictionary id " + num(it->second) + " holds " + d->type.to_string() + ", the field's values are " +
                        t.value_type->to_string());
      }
      a.dictionary = std::move(d);
    }
    const field_node n = take_node(where);
    a.length = n.length;
    a.null_count = n.null_count;
    const type_id id = t.id == type_id::dictionary ? t.index_type : t.id;
    if (id == type_id::null) {
      a.null_count = a.length;
    } else if (id == type_id::sparse_union || id == type_id::dense_union || id == type_id::run_end_encoded) {
      if (n.null_count != 0) {
        fail(where, "a " + t.to_string() + " array has no validity bitmap, yet its field node counts " +
                        num(n.null_count) + " nulls");
      }
      if (id != type_id::run_end_encoded && has_union_validity(opt.version)) {
        (void)take_buffer(where, "validity (V4 union)");
      }
    }
    const arrow::type_layout l = arrow::layout_of(t);
    for (const arrow::buffer_spec& spec : l.buffers) {
      buffer b = take_buffer(where, arrow::to_string(spec.role));
      if (spec.role == arrow::buffer_role::validity && n.null_count == 0) b = buffer();
      a.buffers.push_back(std::move(b));
    }
    if (l.variadic) {
      const std::int64_t count = take_variadic_count(where);
      for (std::int64_t i = 0; i < count; ++i) a.buffers.push_back(take_buffer(where, "variadic data"));
    }
    for (std::size_t i = 0; i < t.children.size(); ++i) {
      path.push_back(static_cast<int>(i));
      a.children.push_back(load(t.children[i], ad::child_path(where, i, t), depth + 1));
      path.pop_back();
    }
    return a;
  }
};

void check_ranges(const record_batch_header& h, std::int64_t body_size) {
  for (std::size_t i = 0; i < h.buffers.size(); ++i) {
    const body_range r = h.buffers[i];
    const auto end = ad::checked_add(r.offset, r.length);
    if (r.offset >= 0 && r.length >= 0 && end && *end <= body_size && (r.length == 0 || r.offset % 8 == 0)) continue;
    // Built only for the error (226 batches of 17 columns have 11,000 buffers).
    const std::string where = "record batch header buffers[" + num(i) + "]";
    if (r.offset < 0) loader::fail(where, "negative offset " + num(r.offset));
    if (r.length < 0) loader::fail(where, "negative length " + num(r.length));
    if (!end) loader::fail(where, "offset " + num(r.offset) + " + length " + num(r.length) + " overflows");
    if (*end > body_size) {
      loader::fail(
          where, "bytes " + num(r.offset) + ".." + num(*end) + " lie outside the body of " + num(body_size) + " bytes");
    }
    if (r.length > 0 && r.offset % 8 != 0) {
      loader::fail(where, "offset " + num(r.offset) + " is not a multiple of 8");
    }
  }
}

std::map<std::vector<int>, std::int64_t> dictionary_ids(const schema_message& schema) {
  std::map<std::vector<int>, std::int64_t> ids;
  for (const dictionary_field& d : schema.dictionaries) ids.emplace(d.path, d.id);
  return ids;
}

// The batch of a header over its body, checked against the header and the
// schema; not validated yet (validate_batches).
arrow::record_batch load_batch(const record_batch_header& h, const schema_message& schema, const buffer& body,
                               const dictionary_memo& memo, const read_options& opt,
                               const std::function<std::string(std::size_t)>& column_name) {
  if (h.length < 0) loader::fail("record batch header", "negative length " + num(h.length));
  if (h.compression && !opt.decompress) {
    loader::fail("record batch header", std::string("the body is compressed (") + codec_name(*h.compression) +
                                            "): compressed bodies are read by the file reader, or with a "
                                            "decompress hook (read_options::decompress)");
  }
  check_ranges(h, body.size());
  const auto ids = dictionary_ids(schema);
  const auto& fields = schema.schema.fields;
  std::vector<array_data> columns;
  for (int pass = 0; pass < 2; ++pass) {
    loader ld{h, body, memo, opt, ids, false, true, 0, 0, 0, {}};
    ld.build = pass == 1;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const std::string where = column_name(i);
      ld.path = {static_cast<int>(i)};
      array_data a = ld.load(fields[i], where, 1);
      if (a.length != h.length) {
        loader::fail(where, "length " + num(a.length) + ", the batch's length is " + num(h.length));
      }
      if (ld.build) columns.push_back(std::move(a));
    }
    if (ld.next_node != h.nodes.size()) {
      loader::fail("record batch header", num(h.nodes.size()) + " field nodes, the schema's " + num(fields.size()) +
                                              " columns take " + num(ld.next_node));
    }
    if (ld.next_buffer != h.buffers.size()) {
      loader::fail("record batch header",
                   num(h.buffers.size()) + " buffers, the schema's arrays take " + num(ld.next_buffer));
    }
    if (ld.next_variadic != h.variadic_buffer_counts.size()) {
      loader::fail("record batch header", num(h.variadic_buffer_counts.size()) +
                                              " variadic buffer counts, the schema has " + num(ld.next_variadic) +
                                              " view arrays");
    }
  }
  arrow::record_batch batch;
  batch.schema = schema.schema;
  batch.num_rows = h.length;
  batch.columns = std::move(columns);
  return batch;
}

// Validates loaded batches at opt's level (at least cheaply), all of them
// together: ONE probe cache, so that the offsets every batch's checks read
// from the device travel in one batched copy and one synchronization
// instead of one per batch.
std::vector<ad::validation_root> roots_of(std::span<const arrow::record_batch> batches,
                                          const std::function<std::string(std::size_t)>& column_name) {
  std::vector<ad::validation_root> roots;
  for (const arrow::record_batch& b : batches) {
    for (std::size_t i = 0; i < b.columns.size(); ++i) roots.push_back({&b.columns[i], column_name(i)});
  }
  return roots;
}

// With the reads already in `cache` (supplied by the caller), if any.
void validate_batches(std::span<const arrow::record_batch> batches, const read_options& opt,
                      const std::function<std::string(std::size_t)>& column_name, ad::probe_cache& cache) {
  const arrow::validation_level level =
      opt.validation == arrow::validation_level::full ? arrow::validation_level::full : arrow::validation_level::cheap;
  try {
    ad::validate_roots(roots_of(batches, column_name), level, opt.check_utf8, opt.stream, cache);
  } catch (const arrow::invalid_data& e) {
    throw invalid_message(e.path(), e.reason());
  }
}

void validate_batches(std::span<const arrow::record_batch> batches, const read_options& opt,
                      const std::function<std::string(std::size_t)>& column_name) {
  ad::probe_cache cache;
  validate_batches(batches, opt, column_name, cache);
}

arrow::record_batch read_batch(const record_batch_header& h, const schema_message& schema, const buffer& body,
                               const dictionary_memo& memo, const read_options& opt,
                               const std::function<std::string(std::size_t)>& column_name) {
  arrow::record_batch batch = load_batch(h, schema, body, memo, opt, column_name);
  validate_batches({&batch, 1}, opt, column_name);
  return batch;
}

// ---- writing: the body layout ---------------------------------------------------------

std::int64_t pad8(std::int64_t n) { return (n + 7) / 8 * 8; }
// Arrow's PaddedLength: what its writer compares a buffer's size with to
// decide whether to truncate it (kArrowAlignment, 64 bytes).
std::int64_t pad64(std::int64_t n) { return (n + 63) / 64 * 64; }

// `n` bytes of `b` from `pos` on the host: a view of host-accessible memory,
// else a synchronous copy on `s`.
std::vector<std::uint8_t> host_bytes_of(const buffer& b, std::int64_t pos, std::int64_t n, stream_view s) {
  if (n == 0) return {};
  if (pos < 0 || n < 0 || pos + n > b.size()) {
    throw invalid_argument("reading " + num(n) + " bytes at " + num(pos) + " of a buffer of " + num(b.size()));
  }
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n));
  if (n == 0) return out;
  if (b.is_host_accessible()) {
    std::memcpy(out.data(), b.host_data() + pos, static_cast<std::size_t>(n));
  } else {
    copy_to_host(out.data(), b, pos, n, ad::stream_for_device(s, b.device_id()));
  }
  return out;
}

buffer host_buffer_of(const std::vector<std::uint8_t>& bytes) {
  buffer b = allocate_host(static_cast<std::int64_t>(bytes.size()));
  if (!bytes.empty()) std::memcpy(b.mutable_host_data(), bytes.data(), bytes.size());
  return b;
}

// Element `i` of a `width`-byte integer array (2, 4 or 8 bytes) set to `v`.
void put_int(std::vector<std::uint8_t>& v, std::int64_t i, int width, std::int64_t x) {
  if (width == 2) {
    const auto y = static_cast<std::int16_t>(x);
    std::memcpy(v.data() + i * 2, &y, 2);
  } else if (width == 4) {
    const auto y = static_cast<std::int32_t>(x);
    std::memcpy(v.data() + i * 4, &y, 4);
  } else {
    std::memcpy(v.data() + i * 8, &x, 8);
  }
}

// One pass over the batch: the layout, as far as the offsets fetched so far
// tell it.  Offsets not yet known are requested from `cache`; the pass is
// then incomplete and is made again after a fetch.
// Null counts a pass needs that are not known and whose bitmap is in device
// memory: asked like offsets, read for every batch of a layout_bodies call
// in one batched copy per round (not one synchronized copy each).  Keyed by
// what a count depends on (the bitmap's address, the bit offset and the
// length), as the arrays a pass visits may be slices it made itself.
struct null_count_cache {
  using key = std::tuple<std::uintptr_t, std::int64_t, std::int64_t>;
  std::map<key, std::int64_t> known;
  std::vector<std::pair<key, arrow::array_data>> pending;

  static key key_of(const arrow::array_data& a) { return {a.buffers[0].address(), a.offset, a.length}; }

  // The pending bitmaps' bytes, appended to a round's reads (fetch_round).
  void add_reads(std::vector<ad::host_read>& reads) const {
    for (const auto& [k, a] : pending) {
      const auto [first, bytes] = ad::validity_bytes(a);
      reads.push_back({a.buffers[0], first, bytes});
    }
  }
  // Their bits counted from the round's bytes at `at`; returns past them.
  const std::uint8_t* take(const std::uint8_t* at) {
    for (const auto& [k, a] : pending) {
      known[k] = ad::nulls_in_validity_bytes(a, at);
      at += ad::validity_bytes(a).second;
    }
    pending.clear();
    return at;
  }
};

// Byte ranges a pass needs on the host to compute what Arrow's writer
// computes for slices (a bitmap shifted to bit 0, offsets rebased to 0, a
// truncated buffer padded with zeros, a list view's offsets and sizes, a
// dense union's type codes and offsets, run ends): asked like offsets,
// read for every batch of a layout_bodies call in the round's one
// read_to_host, not one synchronized copy each.  Ordinary host memory is
// read in place.
struct range_cache {
  using key = std::pair<std::uintptr_t, std::int64_t>;  // first byte's address, bytes
  std::map<key, std::vector<std::uint8_t>> known;
  std::vector<ad::host_read> pending;
  std::set<key> pending_keys;

  // The `n` bytes at `pos` of `b`, or nullopt (and the read queued) while
  // they are unknown.
  std::optional<std::span<const std::uint8_t>> get_or_request(const buffer& b, std::int64_t pos, std::int64_t n) {
    if (n == 0) return std::span<const std::uint8_t>();
    if (pos < 0 || n < 0 || pos + n > b.size()) {
      throw invalid_argument("reading " + num(n) + " bytes at " + num(pos) + " of a buffer of " + num(b.size()));
    }
    if (b.type() == device_type::cpu) {
      return std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(b.host_data()) + pos,
                                           static_cast<std::size_t>(n));
    }
    const key k{b.address() + static_cast<std::uintptr_t>(pos), n};
    if (auto it = known.find(k); it != known.end()) return std::span<const std::uint8_t>(it->second);
    if (pending_keys.insert(k).second) pending.push_back({b, pos, n});
    return std::nullopt;
  }

  // The pending ranges, appended to a round's reads (fetch_round).
  void add_reads(std::vector<ad::host_read>& reads) const { reads.insert(reads.end(), pending.begin(), pending.end()); }
  // Their bytes from the round's bytes at `at`; returns past them.
  const std::uint8_t* take(const std::uint8_t* at) {
    for (const ad::host_read& r : pending) {
      known[{r.buf.address() + static_cast<std::uintptr_t>(r.pos), r.size}].assign(at, at + r.size);
      at += r.size;
    }
    pending.clear();
    pending_keys.clear();
    return at;
  }
};

struct layout_pass {
  ad::probe_cache& cache;
  null_count_cache& null_counts;
  range_cache& ranges;
  stream_view s;
  bool complete = true;
  body_layout out;
  // A walk that only asks for the values the layout needs (offsets, null
  // counts, ranges) and builds nothing: layout_bodies' first walk of every
  // batch, whose layout would be thrown away once a value turned out
  // unknown.
  bool probing = false;
  // Where not null (layout_bodies_each's `assumed`): the offsets of an
  // unsliced array that are not known yet are taken as those of an array
  // that uses all its values (first 0, last the values' count) instead of
  // read, and noted here.
  std::vector<detail::assumed_offset>* assume = nullptr;

  static void check_int_at(const buffer& b, std::int64_t pos, int width, const std::string& where) {
    if (pos < 0 || pos + width > b.size()) {
      throw invalid_argument(where + ": offset at byte " + num(pos) + " lies outside its buffer of " + num(b.size()) +
                             " bytes");
    }
  }

  std::optional<std::int64_t> read_int(const buffer& b, std::int64_t pos, int width, const std::string& where) {
    check_int_at(b, pos, width, where);
    auto v = cache.get_or_request(b, pos, width, true);
    if (!v) complete = false;
    return v;
  }

  // The value at `pos` if known, else `guess`, noted in *assume with the
  // values [low, guess] that lay the array out as `guess` does.
  std::int64_t assumed_int(const buffer& b, std::int64_t pos, int width, std::int64_t guess, std::int64_t low,
                           const std::string& where) {
    check_int_at(b, pos, width, where);
    if (std::optional<std::int64_t> v = cache.get(b, pos, width, true)) return *v;
    assume->push_back({b, pos, width, low, guess});
    return guess;
  }

  // The bytes of `b` at [pos, pos + n) (range_cache), nullopt while unknown:
  // the pass is then incomplete.
  std::optional<std::span<const std::uint8_t>> read_range(const buffer& b, std::int64_t pos, std::int64_t n) {
    auto r = ranges.get_or_request(b, pos, n);
    if (!r) complete = false;
    return r;
  }

  void add(const buffer& src, std::int64_t offset, std::int64_t size) {
    if (probing) return;
    out.header.buffers.push_back({out.body_length, size});
    if (size > 0) out.pieces.push_back({src, offset, size, out.body_length});
    out.body_length += pad8(size);
  }
  void add_empty() { add(buffer(), 0, 0); }
  // Arrow's GetTruncatedBitmap: the bits of [off, off + len) from bit 0.
  void bitmap(const buffer& b, std::int64_t off, std::int64_t len) {
    if (b.size() == 0) return add_empty();
    const std::int64_t bytes = ad::bitmap_bytes(len);
    if (off == 0 && pad64(bytes) >= b.size()) return add(b, 0, b.size());
    if (off % 8 == 0 && len % 8 == 0) return add(b, off / 8, bytes);
    // Computed on the host (placeholders while the bytes are unknown: the
    // pass is made again).
    const std::int64_t first = off / 8;
    const auto src = read_range(b, first, ad::bitmap_bytes(off + len) - first);
    if (!src || probing) return add_empty();
    std::vector<std::uint8_t> dst(static_cast<std::size_t>(bytes), 0);
    for (std::int64_t i = 0; i < len; ++i) {
      if (ad::get_bit(src->data(), i + off % 8)) dst[static_cast<std::size_t>(i / 8)] |= std::uint8_t(1u << (i % 8));
    }
    add(host_buffer_of(dst), 0, bytes);
  }

  // Arrow's fixed-width rule: values from the array's offset, with the
  // padding after them where the buffer has it.
  // Arrow's fixed-width rule: a buffer longer than the values' 64-byte
  // padded length, or of a slice, is cut to the values from the array's
  // offset, with the padding after them (to 8 bytes) where the buffer has it.
  void fixed(const buffer& b, std::int64_t off, std::int64_t len, std::int64_t width) {
    if (b.size() == 0) return add_empty();
    if (off == 0 && pad64(len * width) >= b.size()) return add(b, 0, b.size());
    const std::int64_t start = off * width;
    add(b, start, std::max<std::int64_t>(0, std::min(pad8(len * width), b.size() - start)));
  }

  // Arrow's GetTruncatedBuffer (union type codes and dense union offsets):
  // the same test, but the cut is min(64-byte padded length, buffer size)
  // bytes from the offset, which for a slice near the buffer's end runs past
  // it (Arrow copies whatever its allocation holds there).  The same length
  // is declared here and the bytes past the buffer are zeros, so nothing
  // outside the buffer is read.
  void truncated(const buffer& b, std::int64_t off, std::int64_t len, std::int64_t width) {
    if (b.size() == 0) return add_empty();
    const std::int64_t padded = pad64(len * width);
    if (off == 0 && padded >= b.size()) return add(b, 0, b.size());
    const std::int64_t start = off * width;
    const std::int64_t declared = std::min(padded, b.size());
    const std::int64_t present = std::clamp<std::int64_t>(b.size() - start, 0, declared);
    if (present == declared) return add(b, start, declared);
    // Rare (a slice within 64 bytes of the buffer's end): the bytes there
    // and the zeros after them, one piece as every buffer is.
    const auto src = read_range(b, present > 0 ? start : 0, present);
    if (!src || probing) return add_empty();
    std::vector<std::uint8_t> v(static_cast<std::size_t>(declared), 0);
    if (present > 0) std::memcpy(v.data(), src->data(), static_cast<std::size_t>(present));
    add(host_buffer_of(v), 0, declared);
  }

  // Arrow's GetZeroBasedValueOffsets.  Returns the first and last offsets of
  // the array (nullopt while unknown).
  // `all_used`: the last offset of an array that uses all its values
  // (the bytes of its values buffer, the length of its child), what
  // `assume` takes it to be; `padded`: whether a last offset whose 64-byte
  // padded size still covers them lays the array out the same (a string
  // array's values: Arrow cuts them to that size, or to the buffer's end).
  std::optional<std::pair<std::int64_t, std::int64_t>> offsets(const array_data& a, int width, std::int64_t all_used,
                                                               bool padded, const std::string& where) {
    const buffer& b = a.buffers[1];
    if (a.length == 0) {
      // Arrow writes the offsets as they are; no value is written, so the
      // values (or children) are empty from 0 (Arrow would slice them at
      // the first offset, which an empty array need not keep in range).
      // An empty array may come without offsets (the C data interface
      // allows it); Arrow's arrays always hold the one offset 0, so that is
      // what is written.
      if (b.size() >= width) {
        add(b, 0, b.size());
      } else {
        add(host_buffer_of(std::vector<std::uint8_t>(static_cast<std::size_t>(width))), 0, width);
      }
      return std::pair<std::int64_t, std::int64_t>{0, 0};
    }
    // A slice's offsets are read whole in one round, its first and last
    // among them: they are rebased unless every value before the slice is
    // empty, and reading the two first would put the rest a round later.
    std::optional<std::span<const std::uint8_t>> whole;
    std::optional<std::int64_t> first, last;
    if (a.offset > 0) {
      const std::int64_t end = (a.offset + a.length + 1) * width;
      if (end > b.size()) {
        throw invalid_argument(where + ": offset at byte " + num(end - width) + " lies outside its buffer of " +
                               num(b.size()) + " bytes");
      }
      whole = read_range(b, a.offset * width, (a.length + 1) * width);
      if (whole) {
        first = ad::load_int(whole->data(), 0, width, true);
        last = ad::load_int(whole->data(), a.length, width, true);
      }
    } else if (assume != nullptr) {
      first = assumed_int(b, 0, width, 0, 0, where);
      const std::int64_t low = padded && all_used > 0 ? (all_used - 1) / 64 * 64 + 1 : all_used;
      last = assumed_int(b, a.length * width, width, all_used, low, where);
    } else {
      first = read_int(b, 0, width, where);
      last = read_int(b, a.length * width, width, where);
    }
    if (!first || !last) {
      add_empty();  // a placeholder: the pass is made again
      return std::nullopt;
    }
    const std::int64_t required = (a.length + 1) * width;
    if (*first > 0) {
      // Rebased to 0 on the host (an unsliced array's offsets that do not
      // start at 0 are read whole a round later).
      if (!whole) whole = read_range(b, 0, required);
      if (!whole || probing) {
        add_empty();
      } else {
        const std::int64_t base = *first;
        std::vector<std::uint8_t> v(whole->begin(), whole->end());
        for (std::int64_t i = 0; i <= a.length; ++i) {
          const std::int64_t x = ad::load_int(v.data(), i, width, true) - base;
          if (width == 4) {
            const auto y = static_cast<std::int32_t>(x);
            std::memcpy(v.data() + i * 4, &y, 4);
          } else {
            std::memcpy(v.data() + i * 8, &x, 8);
          }
        }
        add(host_buffer_of(v), 0, required);
      }
    } else if (a.offset > 0 || b.size() > required) {
      add(b, a.offset * width, required);
    } else {
      add(b, 0, b.size());
    }
    return std::pair{*first, *last};
  }

  std::int64_t null_count(const array_data& a) {
    if (a.type.id == type_id::null) return a.length;
    if (!arrow::layout_of(a.type).has_validity) return 0;
    if (a.null_count >= 0) return a.null_count;
    if (a.length == 0 || !a.has_validity_bitmap()) return 0;
    if (a.buffers[0].is_host_accessible()) return arrow::compute_null_count(a, s);
    const null_count_cache::key k = null_count_cache::key_of(a);
    if (auto it = null_counts.known.find(k); it != null_counts.known.end()) return it->second;
    null_counts.pending.emplace_back(k, a);
    complete = false;
    return 0;  // a placeholder: the pass is made again once it is known
  }

  void visit(const array_data& a, const std::string& where) {
    const std::int64_t nulls = null_count(a);
    if (!probing) out.header.nodes.push_back({a.length, nulls});
    const arrow::type_layout l = arrow::layout_of(a.type);
    if (l.buffers.size() > a.buffers.size() || a.children.size() != a.type.children.size()) {
      throw invalid_argument(where + ": " + num(a.buffers.size()) + " buffers and " + num(a.children.size()) +
                             " children for a " + a.type.to_string() + " array");
    }
    if (l.has_validity) {
      if (nulls > 0) {
        bitmap(a.buffers[0], a.offset, a.length);
      } else {
        add_empty();
      }
    }
    const type_id id = a.type.id == type_id::dictionary ? a.type.index_type : a.type.id;
    auto child = [&](std::size_t i) -> std::string { return ad::child_path(where, i, a.type); };
    switch (id) {
      case type_id::null: return;
      case type_id::boolean: return bitmap(a.buffers[1], a.offset, a.length);
      case type_id::binary:
      case type_id::utf8:
      case type_id::large_binary:
      case type_id::large_utf8: {
        const int width = l.buffers[1].byte_width;
        const buffer& data = a.buffers[2];
        auto range = offsets(a, width, data.size(), true, where);
        if (!range) return add_empty();
        const std::int64_t total = a.length == 0 ? 0 : range->second - range->first;
        if (data.size() > 0 && (a.offset != 0 || total < data.size())) {
          const std::int64_t start = a.length == 0 ? 0 : range->first;
          return add(data, start, std::max<std::int64_t>(0, std::min(pad64(total), data.size() - start)));
        }
        return add(data, 0, data.size());
      }
      case type_id::binary_view:
      case type_id::utf8_view: {
        add(a.buffers[1], a.offset * 16, a.length * 16);
        if (!probing) out.header.variadic_buffer_counts.push_back(static_cast<std::int64_t>(a.buffers.size() - 2));
        for (std::size_t i = 2; i < a.buffers.size(); ++i) add(a.buffers[i], 0, a.buffers[i].size());
        return;
      }
      case type_id::list:
      case type_id::large_list:
      case type_id::map: {
        auto range = offsets(a, l.buffers[1].byte_width, a.children[0].length, false, where);
        if (!range) return;
        const std::int64_t first = range->first, n = range->second - range->first;
        const array_data& c = a.children[0];
        if (a.offset != 0 || n < c.length) return visit(c.slice(first, n), child(0));
        return visit(c, child(0));
      }
      case type_id::list_view:
      case type_id::large_list_view: {
        const int w = l.buffers[1].byte_width;
        const array_data& c = a.children[0];
        if (a.offset == 0) {
          for (std::size_t i = 1; i <= 2; ++i) add(a.buffers[i], 0, std::min(a.buffers[i].size(), a.length * w));
          return visit(c, child(0));
        }
        // Arrow's GetZeroBasedListViewOffsets: offsets less the smallest, the
        // values from there (computed on the host).
        const auto offs = read_range(a.buffers[1], a.offset * w, a.length * w);
        const auto sizes = read_range(a.buffers[2], a.offset * w, a.length * w);
        if (!offs || !sizes) return;
        std::int64_t lo = a.length > 0 ? std::numeric_limits<std::int64_t>::max() : 0, hi = 0;
        for (std::int64_t i = 0; i < a.length; ++i) {
          const std::int64_t o = ad::load_int(offs->data(), i, w, true);
          lo = std::min(lo, o);
          hi = std::max(hi, o + ad::load_int(sizes->data(), i, w, true));
        }
        std::vector<std::uint8_t> rebased(offs->size());
        for (std::int64_t i = 0; i < a.length; ++i) put_int(rebased, i, w, ad::load_int(offs->data(), i, w, true) - lo);
        add(host_buffer_of(rebased), 0, a.length * w);
        add(a.buffers[2], a.offset * w, a.length * w);
        if (lo != 0 || hi < c.length) {
          if (lo < 0 || lo > c.length) throw invalid_argument(where + ": list view offsets outside the values");
          return visit(c.slice(lo, std::min(hi, c.length - lo)), child(0));
        }
        return visit(c, child(0));
      }
      case type_id::fixed_size_list: {
        const std::int64_t size = a.type.fixed_size;
        return visit(a.children[0].slice(a.offset * size, a.length * size), child(0));
      }
      case type_id::struct_:
      case type_id::sparse_union: {
        if (id == type_id::sparse_union) truncated(a.buffers[0], a.offset, a.length, 1);
        for (std::size_t i = 0; i < a.children.size(); ++i) {
          const array_data& c = a.children[i];
          visit(a.offset != 0 || c.length != a.length ? c.slice(a.offset, a.length) : c, child(i));
        }
        return;
      }
      case type_id::dense_union: {
        truncated(a.buffers[0], a.offset, a.length, 1);
        if (a.offset == 0) {
          truncated(a.buffers[1], 0, a.length, 4);
          for (std::size_t i = 0; i < a.children.size(); ++i) visit(a.children[i], child(i));
          return;
        }
        // Arrow's rule for a sliced dense union: each child's offsets less
        // the first one seen for it, each child sliced from there to the
        // largest offset used (computed on the host).
        const auto codes = read_range(a.buffers[0], a.offset, a.length);
        const auto offs = read_range(a.buffers[1], a.offset * 4, a.length * 4);
        if (!codes || !offs) return;
        std::vector<std::int64_t> first(128, -1), used(128, 0);
        std::vector<std::uint8_t> shifted(offs->size());
        for (std::int64_t i = 0; i < a.length; ++i) {
          const std::size_t code = (*codes)[static_cast<std::size_t>(i)] & 0x7f;
          const std::int64_t o = ad::load_int(offs->data(), i, 4, true);
          if (first[code] < 0) first[code] = o;
          put_int(shifted, i, 4, o - first[code]);
          used[code] = std::max(used[code], o - first[code] + 1);
        }
        add(host_buffer_of(shifted), 0, a.length * 4);
        for (std::size_t i = 0; i < a.children.size(); ++i) {
          const std::size_t code = static_cast<std::size_t>(a.type.type_codes[i]) & 0x7f;
          const array_data& c = a.children[i];
          const std::int64_t from = std::max<std::int64_t>(first[code], 0), n = used[code];
          if (from > c.length || n > c.length - from) {
            throw invalid_argument(child(i) + ": dense union offsets outside the child");
          }
          if (from > 0 || n < c.length) {
            visit(c.slice(from, n), child(i));
          } else {
            visit(c, child(i));
          }
        }
        return;
      }
      case type_id::run_end_encoded: {
        const array_data& ends = a.children[0];
        const array_data& values = a.children[1];
        const int width = arrow::bit_width(ends.type) / 8;
        if (a.length == 0 || ends.length == 0) {
          if (a.length != 0) throw invalid_argument(where + ": a run-end encoded array without runs");
          visit(ends.slice(0, 0), child(0));
          return visit(values.slice(0, 0), child(1));
        }
        // Unsliced (the last run ends at the length): as it is.  A slice's
        // ends are read whole at once, not its last end first.
        if (a.offset == 0) {
          auto last = read_int(ends.buffers[1], (ends.offset + ends.length - 1) * width, width, where);
          if (!last) return;
          if (*last == a.length) {
            visit(ends, child(0));
            return visit(values.length > ends.length ? values.slice(0, ends.length) : values, child(1));
          }
        } else if ((ends.offset + ends.length) * width > ends.buffers[1].size()) {
          throw invalid_argument(where + ": run ends outside their buffer of " + num(ends.buffers[1].size()) +
                                 " bytes");
        }
        // Arrow's LogicalRunEnds / LogicalValues: the runs that cover the
        // array, their ends less its offset and clipped to its length
        // (computed on the host from the run ends).
        const auto raw = read_range(ends.buffers[1], ends.offset * width, ends.length * width);
        if (!raw) return;
        auto end_at = [&](std::int64_t i) { return ad::load_int(raw->data(), i, width, true); };
        std::int64_t first = 0, count = ends.length;  // the first run that ends after the offset
        while (count > 0) {
          const std::int64_t half = count / 2;
          if (end_at(first + half) <= a.offset) {
            first += half + 1;
            count -= half + 1;
          } else {
            count = half;
          }
        }
        std::int64_t stop = first;
        while (stop < ends.length && end_at(stop) < a.offset + a.length) ++stop;
        if (stop == ends.length) throw invalid_argument(where + ": the run ends stop before the array's end");
        ++stop;
        const std::int64_t runs = stop - first;
        if (a.offset == 0 && end_at(stop - 1) == a.length) {
          visit(ends.slice(0, runs), child(0));
        } else {
          std::vector<std::uint8_t> rebased(static_cast<std::size_t>(runs * width));
          for (std::int64_t i = 0; i < runs; ++i) {
            put_int(rebased, i, width, std::min(end_at(first + i) - a.offset, a.length));
          }
          out.header.nodes.push_back({runs, 0});
          add_empty();
          add(host_buffer_of(rebased), 0, runs * width);
        }
        return visit(values.slice(first, runs), child(1));
      }
      default: return fixed(a.buffers[1], a.offset, a.length, l.buffers[1].byte_width);
    }
  }
};

// The validation path of each column of `schema`'s batches: column "name".
// Built once a call, not once a batch and column (a read of many batches
// asks for each several times).
std::function<std::string(std::size_t)> column_names(const schema_message& schema) {
  auto paths = std::make_shared<std::vector<std::string>>();
  paths->reserve(schema.schema.fields.size());
  for (const field& f : schema.schema.fields) paths->push_back(ad::column_path(f.name));
  return [paths = std::move(paths)](std::size_t i) { return (*paths)[i]; };
}

}  // namespace

arrow::record_batch read_record_batch(const record_batch_header& header, const schema_message& schema,
                                      const buffer& body, const dictionary_memo& dictionaries,
                                      const read_options& options) {
  return read_batch(header, schema, body, dictionaries, options, column_names(schema));
}

namespace detail {

std::vector<arrow::record_batch> read_record_batches(std::span<const batch_body> batches, const schema_message& schema,
                                                     const dictionary_memo& dictionaries) {
  std::vector<arrow::record_batch> out = load_record_batches(batches, schema, dictionaries);
  if (!batches.empty()) validate_batches(out, batches.front().options, column_names(schema));
  return out;
}

std::vector<arrow::record_batch> load_record_batches(std::span<const batch_body> batches, const schema_message& schema,
                                                     const dictionary_memo& dictionaries) {
  const auto name = column_names(schema);
  std::vector<arrow::record_batch> out(batches.size());
  for_each_index(
      batches.size(),
      [&](std::size_t k) {
        const batch_body& b = batches[k];
        out[k] = load_batch(*b.header, schema, b.body, dictionaries, b.options, name);
      },
      batches_per_thread(schema));
  return out;
}

std::size_t batches_per_thread(const schema_message& schema) {
  const std::size_t columns = std::max<std::size_t>(schema.schema.fields.size(), 1);
  return std::max<std::size_t>(8, 128 / columns);
}

void request_validation_reads(std::span<const arrow::record_batch> batches, const schema_message& schema,
                              ad::probe_cache& cache) {
  try {
    ad::request_cheap_reads(roots_of(batches, column_names(schema)), cache);
  } catch (const arrow::invalid_data& e) {
    throw invalid_message(e.path(), e.reason());
  }
}

void validate_record_batches(std::span<const arrow::record_batch> batches, const read_options& options,
                             const schema_message& schema, ad::probe_cache& cache) {
  validate_batches(batches, options, column_names(schema), cache);
}

std::vector<column_span> column_spans(const record_batch_header& h, const schema_message& schema, metadata_version v) {
  const buffer no_body;
  const dictionary_memo no_memo;
  read_options opt;
  opt.version = v;
  const std::map<std::vector<int>, std::int64_t> no_ids;
  loader ld{h, no_body, no_memo, opt, no_ids, false, false, 0, 0, 0, {}};
  std::vector<column_span> out;
  const auto& fields = schema.schema.fields;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    column_span c{ld.next_node, 0, ld.next_buffer, 0, ld.next_variadic, 0};
    ld.path = {static_cast<int>(i)};
    (void)ld.load(fields[i], ad::column_path(fields[i].name), 1);
    c.end_node = ld.next_node;
    c.end_buffer = ld.next_buffer;
    c.end_variadic = ld.next_variadic;
    out.push_back(c);
  }
  return out;
}

void check_body_ranges(const record_batch_header& h, std::int64_t body_size) { check_ranges(h, body_size); }

}  // namespace detail

// ---- the dictionary memo ------------------------------------------------------------

dictionary_memo::dictionary_memo(const schema_message& schema) {
  for (const dictionary_field& d : schema.dictionaries) {
    const std::string where = "schema dictionary id " + num(d.id);
    const field* f = field_at(schema.schema, d.path);
    if (!f) loader::fail(where, "path " + path_text(d.path) + " names no field of the schema");
    if (f->type.id != type_id::dictionary) {
      loader::fail(where, "path " + path_text(d.path) + " names field \"" + f->name + "\" of type " +
                              f->type.to_string() + ", which is not dictionary-encoded");
    }
    if (f->type.value_type->id == type_id::dictionary) {
      loader::fail(where, "the values of field \"" + f->name + "\" are dictionary-encoded themselves (" +
                              f->type.to_string() + "), which IPC cannot carry");
    }
    entry e;
    e.path = d.path;
    e.values.schema.fields.emplace_back("dictionary", *f->type.value_type, true);
    for (const dictionary_field& inner : schema.dictionaries) {
      if (inner.path.size() > d.path.size() && std::equal(d.path.begin(), d.path.end(), inner.path.begin())) {
        dictionary_field moved{inner.id, {0}};
        moved.path.insert(moved.path.end(), inner.path.begin() + static_cast<std::ptrdiff_t>(d.path.size()),
                          inner.path.end());
        e.values.dictionaries.push_back(std::move(moved));
      }
    }
    if (!entries_.emplace(d.id, std::move(e)).second) loader::fail(where, "the id is used by two fields");
  }
}

bool dictionary_memo::knows(std::int64_t id) const noexcept { return entries_.count(id) != 0; }

const dictionary_memo::entry& dictionary_memo::find(std::int64_t id) const {
  const auto it = entries_.find(id);
  if (it == entries_.end()) {
    loader::fail("dictionary id " + num(id), "the schema has no dictionary field with this id");
  }
  return it->second;
}

const data_type& dictionary_memo::value_type(std::int64_t id) const { return find(id).values.schema.fields[0].type; }

const schema_message& dictionary_memo::dictionary_schema(std::int64_t id) const { return find(id).values; }

std::vector<dictionary_field> dictionary_memo::fields() const {
  std::vector<dictionary_field> out;
  out.reserve(entries_.size());
  for (const auto& [id, e] : entries_) out.push_back(dictionary_field{id, e.path});
  return out;
}

std::shared_ptr<const array_data> dictionary_memo::get(std::int64_t id) const {
  const auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second.dictionary;
}

void dictionary_memo::set(std::int64_t id, array_data dictionary) {
  const entry& e = find(id);
  if (!(dictionary.type == e.values.schema.fields[0].type)) {
    throw invalid_argument("dictionary id " + num(id) + " holds " + e.values.schema.fields[0].type.to_string() +
                           ", not " + dictionary.type.to_string());
  }
  entries_.at(id).dictionary = std::make_shared<const array_data>(std::move(dictionary));
}

void dictionary_memo::read(const dictionary_batch_header& header, const buffer& body, const read_options& options) {
  const entry& e = find(header.id);
  const std::string name = "dictionary " + num(header.id);
  arrow::record_batch b = read_batch(header.data, e.values, body, *this, options, [&](std::size_t) { return name; });
  if (header.is_delta) {
    if (!e.dictionary) loader::fail(name, "a delta for a dictionary that has not been sent");
    append(header.id, b.columns[0], options.stream);
  } else {
    set(header.id, std::move(b.columns[0]));
  }
}

namespace {

// A dictionary and its delta joined into new buffers in the first one's
// memory: the byte ranges move with one batched copy; what must be computed
// (bitmaps joined at a bit offset, the delta's offsets moved past the
// first's values) is computed on the host and travels in the same batch.
struct concatenation {
  std::optional<context> ctx;
  stream_view s;
  std::string where;
  std::vector<copy_piece> pieces;

  buffer allocate(std::int64_t n) const { return ctx ? allocate_device(*ctx, n, s) : allocate_host(n); }
  void copy(const buffer& dst, std::int64_t at, const buffer& src, std::int64_t pos, std::int64_t n) {
    if (n > 0) pieces.push_back({dst, at, src, pos, n});
  }
  buffer upload(const std::vector<std::uint8_t>& bytes) {
    const auto n = static_cast<std::int64_t>(bytes.size());
    buffer d = allocate(n);
    copy(d, 0, host_buffer_of(bytes), 0, n);
    return d;
  }

  // Bits [off, off + len) of `b` (all set when `b` is absent) into `out` from bit `at`.
  void put_bits(std::vector<std::uint8_t>& out, std::int64_t at, const buffer& b, std::int64_t off,
                std::int64_t len) const {
    if (len == 0) return;
    std::vector<std::uint8_t> src;
    const std::int64_t first = off / 8;
    if (b.size() > 0) src = host_bytes_of(b, first, ad::bitmap_bytes(off + len) - first, s);
    for (std::int64_t i = 0; i < len; ++i) {
      const bool set = b.size() == 0 || ad::get_bit(src.data(), off % 8 + i);
      if (set) out[static_cast<std::size_t>((at + i) / 8)] |= std::uint8_t(1u << ((at + i) % 8));
    }
  }
  buffer join_bits(const array_data& a, std::size_t ia, const array_data& b, std::size_t ib) {
    std::vector<std::uint8_t> bits(static_cast<std::size_t>(ad::bitmap_bytes(a.length + b.length)), 0);
    put_bits(bits, 0, a.buffers[ia], a.offset, a.length);
    put_bits(bits, a.length, b.buffers[ib], b.offset, b.length);
    return upload(bits);
  }

  // The offsets of `x` (length + 1 of them from its offset) on the host.
  std::vector<std::int64_t> offsets_of(const array_data& x, int width) const {
    std::vector<std::int64_t> o(static_cast<std::size_t>(x.length + 1), 0);
    if (x.length == 0 && x.buffers[1].size() == 0) return o;
    const std::vector<std::uint8_t> raw = host_bytes_of(x.buffers[1], x.offset * width, (x.length + 1) * width, s);
    for (std::size_t i = 0; i < o.size(); ++i)
      o[i] = ad::load_int(raw.data(), static_cast<std::int64_t>(i), width, true);
    return o;
  }
  // New offsets for a then b, from 0; the value ranges of each.
  buffer join_offsets(const std::vector<std::int64_t>& oa, const std::vector<std::int64_t>& ob, int width) {
    std::vector<std::uint8_t> out((oa.size() + ob.size() - 1) * static_cast<std::size_t>(width));
    std::size_t k = 0;
    auto put = [&](std::int64_t v) {
      if (width == 4) {
        if (v > std::numeric_limits<std::int32_t>::max()) {
          loader::fail(where, "the dictionary and its delta hold more than 2^31 - 1 bytes or values");
        }
        const auto y = static_cast<std::int32_t>(v);
        std::memcpy(out.data() + k * 4, &y, 4);
      } else {
        std::memcpy(out.data() + k * 8, &v, 8);
      }
      ++k;
    };
    for (std::int64_t v : oa) put(v - oa.front());
    const std::int64_t base = oa.back() - oa.front();
    for (std::size_t i = 1; i < ob.size(); ++i) put(base + ob[i] - ob.front());
    return upload(out);
  }

  array_data join(const array_data& a, const array_data& b, const std::string& at) {
    array_data r;
    r.type = a.type;
    r.length = a.length + b.length;
    const arrow::type_layout l = arrow::layout_of(a.type);
    const type_id id = a.type.id;
    if (id == type_id::null) {
      r.null_count = r.length;
      return r;
    }
    r.null_count = 0;
    if (l.has_validity) {
      const std::int64_t na = arrow::compute_null_count(a, s), nb = arrow::compute_null_count(b, s);
      r.null_count = na + nb;
      r.buffers.push_back(r.null_count == 0 ? buffer() : join_bits(a, 0, b, 0));
    }
    auto child = [&](std::size_t i) { return ad::child_path(at, i, a.type); };
    switch (id) {
      case type_id::boolean: r.buffers.push_back(join_bits(a, 1, b, 1)); return r;
      case type_id::binary:
      case type_id::utf8:
      case type_id::large_binary:
      case type_id::large_utf8:
      case type_id::list:
      case type_id::large_list:
      case type_id::map: {
        const int width = l.buffers[1].byte_width;
        const auto oa = offsets_of(a, width), ob = offsets_of(b, width);
        r.buffers.push_back(join_offsets(oa, ob, width));
        const std::int64_t na = oa.back() - oa.front(), nb = ob.back() - ob.front();
        if (l.buffers.size() == 3) {
          buffer data = allocate(na + nb);
          copy(data, 0, a.buffers[2], oa.front(), na);
          copy(data, na, b.buffers[2], ob.front(), nb);
          r.buffers.push_back(std::move(data));
        } else {
          r.children.push_back(
              join(a.children[0].slice(oa.front(), na), b.children[0].slice(ob.front(), nb), child(0)));
        }
        return r;
      }
      case type_id::fixed_size_list: {
        const std::int64_t k = a.type.fixed_size;
        r.children.push_back(join(a.children[0].slice(a.offset * k, a.length * k),
                                  b.children[0].slice(b.offset * k, b.length * k), child(0)));
        return r;
      }
      case type_id::struct_:
        for (std::size_t i = 0; i < a.children.size(); ++i) {
          r.children.push_back(
              join(a.children[i].slice(a.offset, a.length), b.children[i].slice(b.offset, b.length), child(i)));
        }
        return r;
      default: break;
    }
    if (l.buffers.size() == 2 && l.buffers[1].role == arrow::buffer_role::values && id != type_id::dictionary) {
      const std::int64_t w = l.buffers[1].byte_width;
      buffer values = allocate((a.length + b.length) * w);
      copy(values, 0, a.buffers[1], a.offset * w, a.length * w);
      copy(values, a.length * w, b.buffers[1], b.offset * w, b.length * w);
      r.buffers.push_back(std::move(values));
      return r;
    }
    loader::fail(at, "a delta of " + a.type.to_string() +
                         " values cannot be appended yet (not supported: views, list views, unions, run-end "
                         "encoded and dictionary-encoded values)");
  }
};

}  // namespace

void dictionary_memo::append(std::int64_t id, const array_data& delta, stream_view s) {
  const entry& e = find(id);
  const std::string where = "dictionary " + num(id);
  if (!e.dictionary) loader::fail(where, "a delta for a dictionary that has not been sent");
  if (!(delta.type == e.values.schema.fields[0].type)) {
    throw invalid_argument(where + ": the delta holds " + delta.type.to_string() + ", the dictionary " +
                           e.values.schema.fields[0].type.to_string());
  }
  const array_data& old = *e.dictionary;
  const arrow::placement p = arrow::placement_of(old, arrow::placement_of(delta));
  concatenation c;
  if (p.type == device_type::cuda) c.ctx = arrow::context_of(old, p);
  c.s = c.ctx ? ad::stream_for_device(s, c.ctx->device_number()) : s;
  c.where = where;
  if (old.length > std::numeric_limits<std::int64_t>::max() - delta.length) loader::fail(where, "too long");
  array_data joined = c.join(old, delta, where);
  copy_batch(c.pieces, c.s);
  entries_.at(id).dictionary = std::make_shared<const array_data>(std::move(joined));
}

// ---- writing ------------------------------------------------------------------------

namespace {

// One round of the reads the layout passes asked for: offsets and run ends
// (probe_cache), the bitmaps of unknown null counts, whole ranges, all in
// ONE read_to_host (one batched copy, one synchronization).
void fetch_round(ad::probe_cache& cache, null_count_cache& nulls, range_cache& ranges, stream_view s) {
  std::vector<ad::host_read> reads;
  reads.reserve(cache.pending() + nulls.pending.size() + ranges.pending.size());
  cache.add_reads(reads);
  nulls.add_reads(reads);
  ranges.add_reads(reads);
  if (reads.empty()) return;
  const buffer bytes = ad::read_to_host(reads, s);
  ranges.take(nulls.take(cache.take(reinterpret_cast<const std::uint8_t*>(bytes.host_data()))));
}

}  // namespace

namespace detail {

std::vector<const arrow::record_batch*> refs_of(std::span<const arrow::record_batch> batches) {
  std::vector<const arrow::record_batch*> out;
  out.reserve(batches.size());
  for (const arrow::record_batch& b : batches) out.push_back(&b);
  return out;
}

void layout_bodies_each(batch_refs batches, stream_view s, const layout_ready& ready,
                        std::vector<assumed_offset>* assumed) {
  for (const arrow::record_batch* const b : batches) {
    const arrow::record_batch& batch = *b;
    if (batch.columns.size() != batch.schema.fields.size()) {
      throw invalid_argument("record batch: " + num(batch.columns.size()) + " columns for " +
                             num(batch.schema.fields.size()) + " fields");
    }
  }
  // One probe cache for every batch: the offsets that their passes ask for
  // are read in ONE batched copy per round (per level of nesting), not one
  // synchronized read per batch (227 batches of a table were 227 reads).
  ad::probe_cache cache;
  null_count_cache nulls;
  range_cache ranges;
  // The columns' paths (for messages) made once, not per column of every
  // batch and pass: the batches of a call share their field names.
  std::vector<std::pair<std::string, std::string>> paths;  // name, path
  auto path_of = [&](const arrow::record_batch& batch, std::size_t i) -> const std::string& {
    const std::string& name = batch.schema.fields[i].name;
    if (paths.size() <= i) paths.resize(i + 1);
    if (paths[i].second.empty() || paths[i].first != name) paths[i] = {name, ad::column_path(name)};
    return paths[i].second;
  };
  // First every batch walked for the values its layout needs only, which
  // are then read in one batched copy: a layout built before they were
  // known was built twice.
  // Assuming offsets, the passes themselves ask for what they still need.
  if (assumed == nullptr) {
    for (const arrow::record_batch* const b : batches) {
      const arrow::record_batch& batch = *b;
      layout_pass probe{cache, nulls, ranges, s, true, {}, true};
      for (std::size_t i = 0; i < batch.columns.size(); ++i) probe.visit(batch.columns[i], path_of(batch, i));
    }
    fetch_round(cache, nulls, ranges, s);
  }
  // A layout is handed over as soon as it and every one before it are
  // complete: in the first round after the read, for batches whose
  // offsets need no further round (no nesting under a sliced list).
  // (A layout handed over stays engaged, moved from, as the mark of a
  // complete batch.)
  std::vector<std::optional<body_layout>> done(batches.size());
  std::size_t left = batches.size(), next = 0;
  for (;;) {
    for (std::size_t b = 0; b < batches.size(); ++b) {
      if (done[b]) continue;
      const arrow::record_batch& batch = *batches[b];
      std::vector<assumed_offset> guesses;  // this pass's, kept if it completes
      layout_pass pass{cache, nulls, ranges, s, true, {}};
      if (assumed != nullptr) pass.assume = &guesses;
      pass.out.header.length = batch.num_rows;
      for (std::size_t i = 0; i < batch.columns.size(); ++i) {
        pass.visit(batch.columns[i], path_of(batch, i));
      }
      if (!pass.complete) continue;
      if (assumed != nullptr) {
        assumed->insert(assumed->end(), std::make_move_iterator(guesses.begin()),
                        std::make_move_iterator(guesses.end()));
      }
      done[b] = std::move(pass.out);
      --left;
      for (; next < batches.size() && done[next]; ++next) ready(next, std::move(*done[next]));
    }
    if (left == 0) break;
    if (cache.pending() == 0 && nulls.pending.empty() && ranges.pending.empty()) {
      throw error("layout_body: offsets still unknown after they were read");
    }
    // What the passes asked for in device memory (offsets, null counts,
    // ranges): one batched read, then the incomplete layouts again.
    fetch_round(cache, nulls, ranges, s);
  }
}

namespace {

void add_bound(const array_data& a, bool sliced, group_bound& b) {
  sliced = sliced || a.offset != 0;
  // The node, its buffers (with those a layout makes for an array that
  // has none: the offsets of an empty one), a variadic count, and a second
  // node (a sliced run-end encoded array's run ends).
  b.entries += 2 + static_cast<std::int64_t>(std::max<std::size_t>(a.buffers.size(), 3)) + 1;
  // What a layout takes of a buffer, or computes from it, is at most the
  // buffer (a slice, a shifted bitmap, rebased offsets, clipped run ends),
  // padded to 8; plus what it makes for an array that has no buffer there.
  std::int64_t own = 24;
  for (const buffer& x : a.buffers) own += pad8(x.size()) + 8;
  (sliced ? b.loose : b.bytes) += own;
  for (const array_data& c : a.children) add_bound(c, sliced, b);
}

}  // namespace

std::vector<ad::host_read> assumed_reads(std::span<const assumed_offset> assumed) {
  std::vector<ad::host_read> reads;
  reads.reserve(assumed.size());
  for (const assumed_offset& a : assumed) reads.push_back({a.buf, a.pos, a.width});
  return reads;
}

bool assumptions_hold(std::span<const assumed_offset> assumed, const buffer& read) {
  const auto* at = reinterpret_cast<const std::uint8_t*>(read.host_data());
  for (const assumed_offset& a : assumed) {
    const std::int64_t v = ad::load_int(at, 0, a.width, true);
    if (v < a.low || v > a.high) return false;
    at += a.width;
  }
  return true;
}

bool assumptions_hold(std::span<const assumed_offset> assumed, stream_view s) {
  if (assumed.empty()) return true;
  return assumptions_hold(assumed, ad::read_to_host(assumed_reads(assumed), s));
}

std::vector<body_layout> layout_bodies(batch_refs batches, stream_view s) {
  std::vector<body_layout> out;
  out.reserve(batches.size());
  layout_bodies_each(batches, s, [&](std::size_t, body_layout&& l) { out.push_back(std::move(l)); });
  return out;
}

group_bound body_bound(batch_refs batches) {
  group_bound b;
  for (const arrow::record_batch* const batch : batches) {
    for (const array_data& c : batch->columns) add_bound(c, false, b);
  }
  return b;
}

}  // namespace detail

std::vector<body_layout> layout_bodies(std::span<const arrow::record_batch> batches, stream_view s) {
  return detail::layout_bodies(detail::refs_of(batches), s);
}

body_layout layout_body(const arrow::record_batch& batch, stream_view s) {
  return std::move(layout_bodies(std::span<const arrow::record_batch>(&batch, 1), s).front());
}

buffer write_body(const body_layout& layout, const context& ctx, stream_view s) {
  buffer body = allocate_device(ctx, layout.body_length, s);
  if (layout.body_length == 0) return body;
  std::int64_t covered = 0;
  for (const body_piece& p : layout.pieces) covered += p.size;
  // The padding between the buffers is zero, as Arrow writes it: one memset
  // of the body where there is any, then the pieces over it.
  if (covered != layout.body_length) fill_async(body, 0, layout.body_length, 0, s);
  std::vector<copy_piece> pieces;
  pieces.reserve(layout.pieces.size());
  for (const body_piece& p : layout.pieces) pieces.push_back({body, p.body_offset, p.source, p.source_offset, p.size});
  copy_batch_async(pieces, s);
  return body;
}

buffer write_body(const arrow::record_batch& batch, const context& ctx, stream_view s) {
  return write_body(layout_body(batch, s), ctx, s);
}

}  // namespace cuarrow::ipc

namespace cuarrow::ipc {

std::vector<body_layout> compress_bodies(std::span<const body_layout> layouts, compression_codec codec,
                                         const compress_options& options, int threads, stream_view s) {
  return detail::compress_bodies(layouts, codec, options, threads, s, nullptr);
}

std::vector<body_layout> detail::compress_bodies(std::span<const body_layout> layouts, compression_codec codec,
                                                 const compress_options& options, int threads, stream_view s,
                                                 std::atomic<std::int64_t>* copy_ns) {
  (void)max_framed_size(codec, 0);  // the codec is checked before anything is copied
  std::optional<cuarrow::detail::timed> copying(copy_ns);
  // The bytes to compress: host memory where it is; device (and managed)
  // memory of every layout copied into one host block, pinned where the
  // pool has room.
  std::int64_t to_copy = 0;
  const context* ctx = nullptr;
  for (const body_layout& layout : layouts) {
    for (const body_piece& p : layout.pieces) {
      if (p.source.type() == device_type::cpu || p.source.type() == device_type::cuda_host) continue;
      to_copy += p.size;
      if (ctx == nullptr && p.source.get_context()) ctx = &*p.source.get_context();
    }
  }
  buffer block;
  if (to_copy > 0) {
    std::optional<buffer> pinned = ctx != nullptr ? try_allocate_pinned_pooled(*ctx, to_copy) : std::nullopt;
    block = pinned ? *pinned : allocate_host(to_copy);
  }
  // Every piece of every layout is one job of one compress_all call, so
  // the host threads share the buffers of all the bodies (a body of a few
  // large buffers alone would keep only a few threads busy).
  std::vector<copy_piece> copies;
  std::vector<compress_job> jobs;
  std::vector<std::int64_t> out_at;
  std::int64_t copied = 0, most = 0;
  for (const body_layout& layout : layouts) {
    for (const body_piece& p : layout.pieces) {
      out_at.push_back(most);
      most += max_framed_size(codec, p.size);
      compress_job j;
      if (p.source.type() == device_type::cpu || p.source.type() == device_type::cuda_host) {
        j.in = std::span<const std::byte>(p.source.host_data() + p.source_offset, static_cast<std::size_t>(p.size));
      } else {
        copies.push_back({block, copied, p.source, p.source_offset, p.size});
        j.in = std::span<const std::byte>(block.host_data() + copied, static_cast<std::size_t>(p.size));
        copied += p.size;
      }
      jobs.push_back(j);
    }
  }
  // One batched copy, synchronized: host memory is also read only after the
  // work queued on `s` (a copy into pinned memory) is done.
  if (!copies.empty()) {
    copy_batch(copies, s);
  } else {
    bool synchronized = false;
    for (const body_layout& layout : layouts) {
      for (const body_piece& p : layout.pieces) {
        if (p.source.get_context()) {
          s.synchronize(*p.source.get_context());
          synchronized = true;
          break;
        }
      }
      if (synchronized) break;
    }
  }
  copying.reset();
  // The framed buffers: reused, already-touched memory from the pinned
  // pool where it has room, as the host copy above.  A fresh allocation of
  // a group's worth (about 1 GiB) takes a page fault every 4 KiB in the
  // compressing threads, and an unmap after.
  std::optional<buffer> reused = ctx != nullptr ? try_allocate_pinned_pooled(*ctx, most) : std::nullopt;
  const buffer framed = reused ? std::move(*reused) : allocate_host(most);
  {
    std::size_t k = 0;
    for (const body_layout& layout : layouts) {
      for (const body_piece& p : layout.pieces) {
        jobs[k].out = std::span<std::byte>(framed.mutable_host_data() + out_at[k],
                                           static_cast<std::size_t>(max_framed_size(codec, p.size)));
        ++k;
      }
    }
  }
  compress_all(codec, jobs, options, threads);

  // The new ranges: each non-empty buffer is one piece of the layout, in
  // order (layout_body); each framed buffer padded to 8 bytes, as Arrow
  // C++ lays a compressed body out.
  std::vector<body_layout> result;
  result.reserve(layouts.size());
  std::size_t job = 0;
  for (const body_layout& layout : layouts) {
    body_layout out;
    out.header = layout.header;
    out.header.compression = codec;
    std::size_t k = 0;
    std::int64_t at = 0;
    for (body_range& r : out.header.buffers) {
      if (r.length == 0) {
        r = {at, 0};
        continue;
      }
      if (k >= layout.pieces.size() || layout.pieces[k].body_offset != r.offset || layout.pieces[k].size != r.length) {
        throw invalid_argument(
            "compress_body: the layout's pieces do not match its buffers (lay the body out with "
            "layout_body)");
      }
      const std::size_t jk = job + k;
      r = {at, jobs[jk].written};
      out.pieces.push_back({framed, out_at[jk], jobs[jk].written, at});
      at += pad8(jobs[jk].written);
      ++k;
    }
    if (k != layout.pieces.size()) {
      throw invalid_argument(
          "compress_body: the layout has more pieces than non-empty buffers (lay the body out "
          "with layout_body)");
    }
    out.body_length = at;
    job += k;
    result.push_back(std::move(out));
  }
  return result;
}

body_layout compress_body(const body_layout& layout, compression_codec codec, const compress_options& options,
                          int threads, stream_view s) {
  return std::move(compress_bodies(std::span<const body_layout>(&layout, 1), codec, options, threads, s).front());
}

}  // namespace cuarrow::ipc
