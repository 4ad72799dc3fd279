// Validation of arrays from untrusted producers (validate.hpp states the
// contract).  Every read of a value is preceded by the size check that makes
// it safe; cheap validation of device memory runs in two passes around one
// batched read (the first pass queues the reads it needs, the second checks).
#include "cuarrow/arrow/validate.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "arrow_internal.hpp"
#include "cuarrow/error.hpp"
#include "worker_pool.hpp"

namespace cuarrow::arrow {
namespace detail {
namespace {

std::string num(std::int64_t v) { return std::to_string(v); }

std::string values_at(std::int64_t length, std::int64_t offset) {
  return num(length) + (length == 1 ? " value" : " values") + " at offset " + num(offset);
}

bool is_offset_type(type_id id) {
  return id == type_id::binary || id == type_id::utf8 || id == type_id::large_binary || id == type_id::large_utf8 ||
         id == type_id::list || id == type_id::large_list || id == type_id::map;
}

bool is_utf8(type_id id) { return id == type_id::utf8 || id == type_id::large_utf8 || id == type_id::utf8_view; }

// Length of the UTF-8 sequence at p[0..n), or 0 when invalid.
bool valid_utf8(const std::uint8_t* p, std::int64_t n) {
  std::int64_t i = 0;
  while (i < n) {
    const std::uint8_t c = p[i];
    int len;
    std::uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

// ---- value scans ------------------------------------------------------------------------
//
// The checks that read every value are scans over element ranges: each
// returns the first problem of its range as a message ("element 17: ..."),
// so that a large array is scanned in chunks on several threads and the
// first problem in array order is reported, whatever thread found it.

using scan_fn = std::function<std::optional<std::string>(std::int64_t begin, std::int64_t end)>;

struct scan_task {
  std::string path;
  std::int64_t count = 0;  // elements
  scan_fn run;
};

template <class T>
const T* typed(const buffer& b) {
  return reinterpret_cast<const T*>(b.host_data());
}

// Element i of the validity bitmap of `a` (true without a bitmap).
struct validity_view {
  const std::uint8_t* bits = nullptr;
  std::int64_t offset = 0;
  bool valid(std::int64_t i) const { return bits == nullptr || get_bit(bits, offset + i); }
};

validity_view validity_of(const array_data& a) {
  if (!a.has_validity_bitmap()) return {};
  return {reinterpret_cast<const std::uint8_t*>(a.buffers[0].host_data()), a.offset};
}

// Offsets [offset .. offset + length] non-decreasing (the first and last
// were checked against the limit by the cheap pass).  Chunk [b, e) checks
// the pairs (i, i + 1) for i in [b, e), so chunks overlap by one offset.
template <class O>
scan_fn offsets_scan(const O* o, std::int64_t offset) {
  return [o, offset](std::int64_t b, std::int64_t e) -> std::optional<std::string> {
    const O* p = o + offset;
    for (std::int64_t i = b; i < e; ++i) {
      if (p[i + 1] < p[i]) {
        return "offsets decrease at element " + num(i) + ": " + num(static_cast<std::int64_t>(p[i])) + " then " +
               num(static_cast<std::int64_t>(p[i + 1]));
      }
    }
    return std::nullopt;
  };
}

template <class O>
scan_fn list_view_scan(const O* offs, const O* sizes, std::int64_t offset, validity_view v, std::int64_t limit) {
  return [=](std::int64_t b, std::int64_t e) -> std::optional<std::string> {
    for (std::int64_t i = b; i < e; ++i) {
      const std::int64_t off = offs[offset + i];
      const std::int64_t size = sizes[offset + i];
      if ((off < 0 || size < 0 || off > limit || size > limit - off) && v.valid(i)) {
        return "element " + num(i) + ": list view [" + num(off) + ", +" + num(size) + ") is outside the child of " +
               num(limit) + " values";
      }
    }
    return std::nullopt;
  };
}

template <class I>
scan_fn dictionary_scan(const I* idx, std::int64_t offset, validity_view v, std::int64_t n) {
  return [=](std::int64_t b, std::int64_t e) -> std::optional<std::string> {
    for (std::int64_t i = b; i < e; ++i) {
      const auto x = idx[offset + i];
      // Unsigned 64-bit indices above INT64_MAX read as negative: out of range.
      const std::int64_t k = static_cast<std::int64_t>(x);
      if ((k < 0 || k >= n) && v.valid(i)) {
        return "element " + num(i) + ": dictionary index " +
               (std::is_unsigned_v<I> && k < 0 ? std::to_string(static_cast<std::uint64_t>(x)) : num(k)) +
               " is outside the dictionary of " + num(n) + " values";
      }
    }
    return std::nullopt;
  };
}

template <class R>
scan_fn run_ends_scan(const R* ends, std::int64_t offset) {
  return [=](std::int64_t b, std::int64_t e) -> std::optional<std::string> {
    std::int64_t prev = b == 0 ? 0 : static_cast<std::int64_t>(ends[offset + b - 1]);
    for (std::int64_t i = b; i < e; ++i) {
      const std::int64_t cur = ends[offset + i];
      if (cur <= prev) {
        return "run ends must be positive and strictly increasing: run end " + num(i) + " is " + num(cur) + " after " +
               num(prev);
      }
      prev = cur;
    }
    return std::nullopt;
  };
}

// Runs the scans, large ones in chunks on several threads; throws
// invalid_data for the first problem in task (tree) order.
void run_scans(std::vector<scan_task>& tasks) {
  std::int64_t total = 0;
  for (const scan_task& t : tasks) total += t.count;
  struct chunk {
    std::size_t task;
    std::int64_t begin, end;
  };
  constexpr std::int64_t kParallelFrom = 1 << 20;  // elements; below, threads cost more than they save
  const int hardware = cuarrow::detail::host_cores();
  const int threads = std::clamp(hardware, 1, 16);
  const std::int64_t chunk_elements =
      std::max<std::int64_t>(1 << 18, total / std::max<std::int64_t>(1, static_cast<std::int64_t>(threads) * 4));
  std::vector<chunk> chunks;
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    for (std::int64_t b = 0; b < tasks[t].count; b += chunk_elements) {
      chunks.push_back({t, b, std::min(tasks[t].count, b + chunk_elements)});
    }
  }
  std::vector<std::optional<std::string>> found(chunks.size());
  auto run_chunk = [&](std::size_t c) { found[c] = tasks[chunks[c].task].run(chunks[c].begin, chunks[c].end); };
  if (total < kParallelFrom || threads == 1 || chunks.size() == 1) {
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      run_chunk(c);
      if (found[c]) break;
    }
  } else {
    std::atomic<std::size_t> next{0};
    auto worker = [&] {
      for (std::size_t c = next.fetch_add(1); c < chunks.size(); c = next.fetch_add(1)) run_chunk(c);
    };
    std::vector<std::thread> pool;
    const std::size_t n = std::min(chunks.size(), static_cast<std::size_t>(threads)) - 1;
    try {
      for (std::size_t i = 0; i < n; ++i) pool.emplace_back(worker);
    } catch (const std::system_error&) {
      // No more threads to be had: the ones started and this one finish the job.
    }
    worker();
    for (std::thread& t : pool) t.join();
  }
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    if (found[c]) throw invalid_data(tasks[chunks[c].task].path, *found[c]);
  }
}

// How deep a validator goes.
enum class depth {
  cheap,     // structure and sizes (validation_level::cheap)
  readable,  // cheap, plus every value a host reader indexes with (to_host's results)
  full       // readable, plus null counts against the bitmaps (validation_level::full)
};

class validator {
 public:
  // Above cheap the tree is host-accessible and ready; value scans are
  // queued and run by finish().
  validator(probe_cache& cache, depth d, bool utf8) : cache_(cache), depth_(d), utf8_(utf8) {}

  void run(const array_data& a, const std::string& path) {
    check_type(a.type, path);
    check(a, path);
  }

  // Runs the queued value scans (all trees given to run()).
  void finish() { run_scans(scans_); }

 private:
  [[noreturn]] static void fail(const std::string& path, const std::string& why) { throw invalid_data(path, why); }

  bool reads_values() const { return depth_ != depth::cheap; }

  // ---- the type itself ----------------------------------------------------------
  void check_type(const data_type& t, const std::string& path) {
    const int want = required_children(t.id);
    if (want >= 0 && static_cast<int>(t.children.size()) != want) {
      fail(path, "type " + std::string(to_string(t.id)) + " has " + num(static_cast<std::int64_t>(t.children.size())) +
                     " child fields (expected " + num(want) + ")");
    }
    if (t.id == type_id::sparse_union || t.id == type_id::dense_union) {
      if (t.type_codes.size() != t.children.size()) {
        fail(path, "union type has " + num(static_cast<std::int64_t>(t.type_codes.size())) + " type codes for " +
                       num(static_cast<std::int64_t>(t.children.size())) + " children");
      }
      for (std::size_t i = 0; i < t.type_codes.size(); ++i) {
        if (t.type_codes[i] < 0) fail(path, "union type code " + num(t.type_codes[i]) + " is negative");
        for (std::size_t j = 0; j < i; ++j) {
          if (t.type_codes[i] == t.type_codes[j])
            fail(path, "union type code " + num(t.type_codes[i]) + " appears twice");
        }
      }
    }
    if (t.id == type_id::map) {
      const data_type& e = t.children[0].type;
      if (e.id != type_id::struct_ || e.children.size() != 2) {
        fail(path, "map entries must be a struct of 2 fields (key, value), not " + e.to_string());
      }
    }
    if (t.id == type_id::run_end_encoded) {
      const type_id r = t.children[0].type.id;
      if (r != type_id::int16 && r != type_id::int32 && r != type_id::int64) {
        fail(path, "run ends must be int16, int32 or int64, not " + t.children[0].type.to_string());
      }
    }
    if (t.id == type_id::dictionary) {
      if (!is_integer(t.index_type))
        fail(path, "dictionary indices must be integers, not " + std::string(to_string(t.index_type)));
      if (!t.value_type) fail(path, "dictionary type without a value type");
    }
    if ((t.id == type_id::fixed_size_binary || t.id == type_id::fixed_size_list) && t.fixed_size < 0) {
      fail(path, "negative fixed size " + num(t.fixed_size));
    }
  }

  // A read of element `index` (width bytes each) of buffer `i`; nullopt while
  // the value is being fetched.  The caller has checked the size.
  std::optional<std::int64_t> read(const buffer& b, std::int64_t index, int width, bool is_signed) {
    if (reads_values()) {
      return load_int(reinterpret_cast<const std::uint8_t*>(b.host_data()), index, width, is_signed);
    }
    return cache_.get_or_request(b, index * width, width, is_signed);
  }

  static const std::uint8_t* host(const buffer& b) { return reinterpret_cast<const std::uint8_t*>(b.host_data()); }

  void need(const array_data& a, std::size_t i, buffer_role role, std::optional<std::int64_t> bytes, std::int64_t count,
            const std::string& path) {
    if (!bytes) fail(path, std::string(to_string(role)) + " buffer size overflows for " + values_at(count, a.offset));
    const std::int64_t has = a.buffers[i].size();
    if (has < *bytes) {
      fail(path, std::string(to_string(role)) + " buffer too small: needs " + num(*bytes) + " bytes for " +
                     values_at(a.length, a.offset) + ", has " + num(has));
    }
  }

  // ---- one array --------------------------------------------------------------------
  void check(const array_data& a, const std::string& path) {
    const data_type& t = a.type;
    if (a.length < 0) fail(path, "negative length " + num(a.length));
    if (a.offset < 0) fail(path, "negative offset " + num(a.offset));
    const auto end_opt = checked_add(a.offset, a.length);
    if (!end_opt) fail(path, "offset " + num(a.offset) + " + length " + num(a.length) + " overflows");
    const std::int64_t end = *end_opt;
    if (a.null_count < -1 || a.null_count > a.length) {
      fail(path, "null count " + num(a.null_count) + " is outside 0.." + num(a.length) + " (or -1 for unknown)");
    }

    const type_layout l = layout_of(t);
    const std::size_t fixed = l.buffers.size();
    if (l.variadic ? a.buffers.size() < fixed : a.buffers.size() != fixed) {
      fail(path, num(static_cast<std::int64_t>(a.buffers.size())) + " buffers for type " + t.to_string() +
                     " (expected " + (l.variadic ? "at least " : "") + num(static_cast<std::int64_t>(fixed)) + ")");
    }
    if (a.children.size() != t.children.size()) {
      fail(path, num(static_cast<std::int64_t>(a.children.size())) + " children for type " + t.to_string() +
                     " (expected " + num(static_cast<std::int64_t>(t.children.size())) + ")");
    }
    if (t.id == type_id::dictionary) {
      if (!a.dictionary) fail(path, "dictionary array without a dictionary");
      if (!(a.dictionary->type == *t.value_type)) {
        fail(path,
             "dictionary of type " + a.dictionary->type.to_string() + " for value type " + t.value_type->to_string());
      }
    } else if (a.dictionary) {
      fail(path, "a " + t.to_string() + " array must not have a dictionary");
    }

    // Buffer sizes implied by length + offset.
    for (std::size_t i = 0; i < fixed; ++i) {
      const buffer_spec spec = l.buffers[i];
      if (spec.role == buffer_role::validity && a.buffers[i].size() == 0) {
        if (a.null_count > 0) fail(path, "null count " + num(a.null_count) + " but there is no validity buffer");
      } else if (a.length > 0 && sized_by_layout(spec.role)) {
        need(a, i, spec.role, layout_bytes(spec, end), a.length, path);
      }
    }

    // Children long enough for what this array implies without reading values.
    switch (t.id) {
      case type_id::struct_:
      case type_id::sparse_union:
        for (std::size_t c = 0; c < a.children.size(); ++c) {
          if (a.children[c].length < end) {
            fail(child_path(path, c, t), "child has " + num(a.children[c].length) + " values, the parent needs " +
                                             num(end) + " (" + values_at(a.length, a.offset) + ")");
          }
        }
        break;
      case type_id::fixed_size_list: {
        auto n = checked_mul(end, t.fixed_size);
        if (!n) fail(path, "fixed-size list child length overflows");
        if (a.children[0].length < *n) {
          fail(child_path(path, 0, t), "child has " + num(a.children[0].length) + " values, the parent needs " +
                                           num(*n) + " (" + values_at(a.length, a.offset) + " of " + num(t.fixed_size) +
                                           " each)");
        }
        break;
      }
      default: break;
    }

    // Children and dictionary first: checks below may read their buffers.
    for (std::size_t c = 0; c < a.children.size(); ++c) {
      check_type(a.children[c].type, child_path(path, c, t));
      if (!(a.children[c].type == t.children[c].type)) {
        fail(child_path(path, c, t), "child array of type " + a.children[c].type.to_string() + " for field type " +
                                         t.children[c].type.to_string());
      }
      check(a.children[c], child_path(path, c, t));
    }
    if (a.dictionary) {
      check_type(a.dictionary->type, dictionary_path(path));
      check(*a.dictionary, dictionary_path(path));
    }

    // A map's entries and keys are never null (the format says so, and
    // Arrow C++ aborts building a map array that breaks it).  The cheap
    // pass knows only declared null counts; reading passes count the bits.
    if (t.id == type_id::map) check_map(a, path);

    // Values that sizing needs: first and last offsets, last run end.
    if (is_offset_type(t.id) && a.length > 0) {
      const int w = l.buffers[1].byte_width;
      const buffer& offsets = a.buffers[1];
      auto first = read(offsets, a.offset, w, true);
      auto last = read(offsets, end, w, true);
      if (first && last) {
        const bool binary_like = t.id != type_id::list && t.id != type_id::large_list && t.id != type_id::map;
        const std::int64_t limit = binary_like ? a.buffers[2].size() : a.children[0].length;
        const char* what = binary_like ? "data buffer" : "child";
        if (*first < 0) fail(path, "first offset " + num(*first) + " is negative");
        if (*last < *first) fail(path, "last offset " + num(*last) + " is before the first offset " + num(*first));
        if (*last > limit) {
          fail(path, std::string("last offset ") + num(*last) + " is past the end of the " + what + " (" + num(limit) +
                         (binary_like ? " bytes)" : " values)"));
        }
      }
    }
    if (t.id == type_id::run_end_encoded) check_run_ends(a, path, end);

    if (reads_values()) values(a, path, l);
  }

  // Nulls of the whole child (what Arrow C++ counts), declared or counted.
  std::int64_t nulls_of(const array_data& c) const {
    if (c.null_count >= 0 || !reads_values()) return c.null_count;
    if (!c.has_validity_bitmap()) return 0;
    return c.length - count_set_bits(host(c.buffers[0]), c.offset, c.length);
  }

  void check_map(const array_data& a, const std::string& path) {
    const array_data& entries = a.children[0];
    const std::string entries_path = child_path(path, 0, a.type);
    if (nulls_of(entries) > 0) {
      fail(entries_path, "a map's entries must not be null, and " + num(nulls_of(entries)) + " are");
    }
    if (entries.children.size() == 2) {
      const array_data& keys = entries.children[0];
      if (nulls_of(keys) > 0) {
        fail(child_path(entries_path, 0, entries.type),
             "a map's keys must not be null, and " + num(nulls_of(keys)) + " are");
      }
    }
  }

  void check_run_ends(const array_data& a, const std::string& path, std::int64_t end) {
    const array_data& ends = a.children[0];
    const array_data& vals = a.children[1];
    const std::string ends_path = child_path(path, 0, a.type);
    if (ends.null_count > 0) fail(ends_path, "run ends must not be null");
    if (vals.length < ends.length) {
      fail(child_path(path, 1, a.type),
           "values have " + num(vals.length) + " entries for " + num(ends.length) + " run ends");
    }
    if (a.length == 0) return;
    if (ends.length == 0) fail(ends_path, "no run ends for " + values_at(a.length, a.offset));
    const int w = bit_width(ends.type) / 8;
    auto last = read(ends.buffers[1], ends.offset + ends.length - 1, w, true);
    if (last && *last < end) {
      fail(ends_path, "last run end " + num(*last) + " does not cover " + values_at(a.length, a.offset));
    }
  }

  void scan(const std::string& path, std::int64_t count, scan_fn fn) {
    if (count > 0) scans_.push_back(scan_task{path, count, std::move(fn)});
  }

  // ---- reading every value -----------------------------------------------------------
  void values(const array_data& a, const std::string& path, const type_layout& l) {
    const data_type& t = a.type;
    const validity_view v = validity_of(a);
    if (depth_ == depth::full && a.null_count >= 0 && a.has_validity_bitmap()) {
      const std::int64_t nulls = a.length - count_set_bits(host(a.buffers[0]), a.offset, a.length);
      if (nulls != a.null_count) {
        fail(path, "null count " + num(a.null_count) + " but the validity bitmap has " + num(nulls) + " nulls");
      }
    }
    if (is_offset_type(t.id) && a.length > 0) {
      if (l.buffers[1].byte_width == 4) {
        scan(path, a.length, offsets_scan(typed<std::int32_t>(a.buffers[1]), a.offset));
      } else {
        scan(path, a.length, offsets_scan(typed<std::int64_t>(a.buffers[1]), a.offset));
      }
      if (depth_ == depth::full && utf8_ && is_utf8(t.id)) {
        const int w = l.buffers[1].byte_width;
        const std::uint8_t* o = host(a.buffers[1]);
        const std::uint8_t* data = a.buffers[2].size() > 0 ? host(a.buffers[2]) : nullptr;
        const std::int64_t off = a.offset;
        // After the offsets scan (tasks run in order per chunk set): an
        // element's range is checked here before its bytes are read.
        const std::int64_t limit = a.buffers[2].size();
        scan(path, a.length, [=](std::int64_t b, std::int64_t e) -> std::optional<std::string> {
          for (std::int64_t i = b; i < e; ++i) {
            if (!v.valid(i)) continue;
            const std::int64_t s0 = load_int(o, off + i, w, true), e0 = load_int(o, off + i + 1, w, true);
            if (s0 < 0 || e0 < s0 || e0 > limit) return "element " + num(i) + ": offsets out of range";
            if (e0 > s0 && !valid_utf8(data + s0, e0 - s0)) return "element " + num(i) + " is not valid UTF-8";
          }
          return std::nullopt;
        });
      }
    }
    switch (t.id) {
      case type_id::list_view:
      case type_id::large_list_view: {
        const std::int64_t limit = a.children[0].length;
        if (l.buffers[1].byte_width == 4) {
          scan(
              path, a.length,
              list_view_scan(typed<std::int32_t>(a.buffers[1]), typed<std::int32_t>(a.buffers[2]), a.offset, v, limit));
        } else {
          scan(
              path, a.length,
              list_view_scan(typed<std::int64_t>(a.buffers[1]), typed<std::int64_t>(a.buffers[2]), a.offset, v, limit));
        }
        break;
      }
      case type_id::sparse_union:
      case type_id::dense_union: {
        // type code -> child index (-1: not a code of this union)
        std::array<std::int16_t, 256> child_of;
        child_of.fill(-1);
        for (std::size_t k = 0; k < t.type_codes.size(); ++k) {
          child_of[static_cast<std::uint8_t>(t.type_codes[k])] = static_cast<std::int16_t>(k);
        }
        std::vector<std::int64_t> lengths;
        for (const array_data& c : a.children) lengths.push_back(c.length);
        const auto* ids = typed<std::int8_t>(a.buffers[0]);
        const std::int32_t* dense = t.id == type_id::dense_union ? typed<std::int32_t>(a.buffers[1]) : nullptr;
        const std::int64_t off = a.offset;
        scan(path, a.length, [=](std::int64_t b, std::int64_t e) -> std::optional<std::string> {
          for (std::int64_t i = b; i < e; ++i) {
            const std::int8_t code = ids[off + i];
            const std::int16_t c = child_of[static_cast<std::uint8_t>(code)];
            if (c < 0) return "element " + num(i) + ": type id " + num(code) + " is not one of the union's type codes";
            if (dense != nullptr) {
              const std::int64_t o = dense[off + i];
              if (o < 0 || o >= lengths[static_cast<std::size_t>(c)]) {
                return "element " + num(i) + ": offset " + num(o) + " is outside child " + num(c) + " of " +
                       num(lengths[static_cast<std::size_t>(c)]) + " values";
              }
            }
          }
          return std::nullopt;
        });
        break;
      }
      case type_id::run_end_encoded: {
        const array_data& ends = a.children[0];
        const std::string ends_path = child_path(path, 0, t);
        switch (bit_width(ends.type)) {
          case 16:
            scan(ends_path, ends.length, run_ends_scan(typed<std::int16_t>(ends.buffers[1]), ends.offset));
            break;
          case 32:
            scan(ends_path, ends.length, run_ends_scan(typed<std::int32_t>(ends.buffers[1]), ends.offset));
            break;
          default:
            scan(ends_path, ends.length, run_ends_scan(typed<std::int64_t>(ends.buffers[1]), ends.offset));
            break;
        }
        break;
      }
      case type_id::binary_view:
      case type_id::utf8_view: {
        const std::uint8_t* views = host(a.buffers[1]);
        std::vector<std::pair<const std::uint8_t*, std::int64_t>> data;  // each variadic buffer's bytes and size
        for (std::size_t k = 2; k < a.buffers.size(); ++k) {
          data.emplace_back(a.buffers[k].size() > 0 ? host(a.buffers[k]) : nullptr, a.buffers[k].size());
        }
        const bool utf8 = depth_ == depth::full && utf8_ && t.id == type_id::utf8_view;
        const std::int64_t off = a.offset;
        scan(path, a.length, [=](std::int64_t b, std::int64_t e) -> std::optional<std::string> {
          const std::int64_t n_data = static_cast<std::int64_t>(data.size());
          for (std::int64_t i = b; i < e; ++i) {
            if (!v.valid(i)) continue;
            const std::uint8_t* view = views + (off + i) * 16;
            const std::int64_t len = load_int(view, 0, 4, true);
            if (len < 0) return "element " + num(i) + ": negative view length " + num(len);
            const std::uint8_t* bytes = view + 4;
            if (len > 12) {
              const std::int64_t index = load_int(view + 8, 0, 4, true);
              const std::int64_t o = load_int(view + 12, 0, 4, true);
              if (index < 0 || index >= n_data) {
                return "element " + num(i) + ": view refers to data buffer " + num(index) + " of " + num(n_data);
              }
              const auto& [d, size] = data[static_cast<std::size_t>(index)];
              if (o < 0 || o > size || len > size - o) {
                return "element " + num(i) + ": view [" + num(o) + ", +" + num(len) + ") overruns data buffer " +
                       num(index) + " of " + num(size) + " bytes";
              }
              bytes = d + o;
              if (std::memcmp(bytes, view + 4, 4) != 0)
                return "element " + num(i) + ": view prefix does not match its data";
            }
            if (utf8 && !valid_utf8(bytes, len)) return "element " + num(i) + " is not valid UTF-8";
          }
          return std::nullopt;
        });
        break;
      }
      case type_id::dictionary: {
        const std::int64_t n = a.dictionary->length;
        const buffer& idx = a.buffers[1];
        switch (t.index_type) {
          case type_id::int8: scan(path, a.length, dictionary_scan(typed<std::int8_t>(idx), a.offset, v, n)); break;
          case type_id::uint8: scan(path, a.length, dictionary_scan(typed<std::uint8_t>(idx), a.offset, v, n)); break;
          case type_id::int16: scan(path, a.length, dictionary_scan(typed<std::int16_t>(idx), a.offset, v, n)); break;
          case type_id::uint16: scan(path, a.length, dictionary_scan(typed<std::uint16_t>(idx), a.offset, v, n)); break;
          case type_id::int32: scan(path, a.length, dictionary_scan(typed<std::int32_t>(idx), a.offset, v, n)); break;
          case type_id::uint32: scan(path, a.length, dictionary_scan(typed<std::uint32_t>(idx), a.offset, v, n)); break;
          case type_id::int64: scan(path, a.length, dictionary_scan(typed<std::int64_t>(idx), a.offset, v, n)); break;
          default: scan(path, a.length, dictionary_scan(typed<std::uint64_t>(idx), a.offset, v, n)); break;
        }
        break;
      }
      default: break;
    }
  }

  probe_cache& cache_;
  depth depth_;
  bool utf8_;
  std::vector<scan_task> scans_;
};

}  // namespace

std::optional<std::int64_t> cached_last_offset(const array_data& a, const probe_cache& cache) {
  if (!is_offset_type(a.type.id) || a.length <= 0 || a.buffers.size() < 2) return std::nullopt;
  const int w = layout_of(a.type).buffers[1].byte_width;
  const std::int64_t pos = (a.offset + a.length) * w;
  if (a.buffers[1].size() < pos + w) return std::nullopt;
  return cache.get(a.buffers[1], pos, w, true);
}

void validate_roots(const std::vector<validation_root>& roots, validation_level level, bool check_utf8, stream_view s,
                    probe_cache& cache) {
  if (level == validation_level::none || roots.empty()) return;
  std::vector<placement> where;
  std::optional<int> device;  // of the first tree in device memory
  for (const validation_root& r : roots) {
    try {
      where.push_back(placement_of(*r.array));
    } catch (const invalid_data& e) {
      throw invalid_data(r.path, e.reason());
    }
    if (where.back().type == device_type::cuda && !device) device = where.back().device_id;
  }

  for (const validation_root& r : roots) validator(cache, depth::cheap, false).run(*r.array, r.path);
  if (cache.pending() > 0) {
    cache.fetch(device ? stream_for_device(s, *device) : s);
    for (const validation_root& r : roots) validator(cache, depth::cheap, false).run(*r.array, r.path);
  }
  if (level != validation_level::full) return;

  // Full: every value, read on the host.  Device trees are copied in one batch.
  std::vector<array_data> copies(roots.size());
  std::vector<std::pair<stream_view, int>> to_sync;
  auto note = [&](stream_view v, int dev) {
    for (const auto& x : to_sync) {
      if (x.first == v && (!v.is_default() || x.second == dev)) return;
    }
    to_sync.emplace_back(v, dev);
  };
  for (std::size_t i = 0; i < roots.size(); ++i) {
    if (where[i].type == device_type::cpu) continue;
    if (where[i].type != device_type::cuda) {
      note(s, where[i].device_id);
      continue;
    }
    const stream_view rs = stream_for_device(s, where[i].device_id);
    note(rs, where[i].device_id);
    const context ctx = context_of(*roots[i].array).value();
    copies[i] = copy_tree_async(*roots[i].array, destination_kind::host, &ctx, rs, cache);
  }
  for (const auto& [v, dev] : to_sync) synchronize(v, dev);
  validator full(cache, depth::full, check_utf8);
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const array_data& a = where[i].type == device_type::cuda ? copies[i] : *roots[i].array;
    full.run(a, roots[i].path);
  }
  full.finish();
}

void request_cheap_reads(const std::vector<validation_root>& roots, probe_cache& cache) {
  for (const validation_root& r : roots) validator(cache, depth::cheap, false).run(*r.array, r.path);
}

bool host_check_reads(const data_type& t, buffer_role role, bool run_ends) {
  switch (role) {
    case buffer_role::data:    // utf8 is checked by full validation only
    case buffer_role::bitmap:  // boolean values
      return false;
    case buffer_role::values: return run_ends || t.id == type_id::dictionary;
    default: return true;  // validity, offsets, list views, views and their data, union ids and offsets
  }
}

void check_host_readable(const std::vector<validation_root>& roots) {
  probe_cache cache;  // unused: every value is read in place
  validator v(cache, depth::readable, false);
  for (const validation_root& r : roots) v.run(*r.array, r.path);
  v.finish();
}

}  // namespace detail

void validate(const array_data& array, const validate_options& options, stream_view s) {
  detail::probe_cache cache;
  detail::validate_roots({{&array, std::string(options.root)}}, options.level, options.check_utf8, s, cache);
}

namespace detail {

std::vector<validation_root> batch_roots(const record_batch& batch) {
  if (batch.columns.size() != batch.schema.fields.size()) {
    throw invalid_data("record batch", std::to_string(batch.columns.size()) + " columns for " +
                                           std::to_string(batch.schema.fields.size()) + " fields");
  }
  if (batch.num_rows < 0) throw invalid_data("record batch", "negative row count " + std::to_string(batch.num_rows));
  std::vector<validation_root> roots;
  for (std::size_t i = 0; i < batch.columns.size(); ++i) {
    const std::string path = column_path(batch.schema.fields[i].name);
    if (!(batch.columns[i].type == batch.schema.fields[i].type)) {
      throw invalid_data(path, "column of type " + batch.columns[i].type.to_string() + " for field type " +
                                   batch.schema.fields[i].type.to_string());
    }
    if (batch.columns[i].length != batch.num_rows) {
      throw invalid_data(path, "column has " + std::to_string(batch.columns[i].length) + " rows, the batch " +
                                   std::to_string(batch.num_rows));
    }
    roots.push_back({&batch.columns[i], path});
  }
  return roots;
}

}  // namespace detail

void validate(const record_batch& batch, const validate_options& options, stream_view s) {
  const std::vector<detail::validation_root> roots = detail::batch_roots(batch);
  detail::probe_cache cache;
  detail::validate_roots(roots, options.level, options.check_utf8, s, cache);
}

}  // namespace cuarrow::arrow
