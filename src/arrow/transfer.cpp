// Whole-tree transfers (transfer.hpp states the contract): plan every
// buffer's referenced byte range, make ONE allocation, queue every copy on
// the stream, synchronize at most once at the end.
#include "cuarrow/arrow/transfer.hpp"

#include <string>

#include "arrow_internal.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/error.hpp"

namespace cuarrow::arrow {
namespace detail {
namespace {

constexpr std::int64_t kAlignment = 64;

std::int64_t align_up(std::int64_t v) { return (v + kAlignment - 1) / kAlignment * kAlignment; }

// Types whose offset applies only to their own buffers: their copies can
// start at the first referenced element (rounded down to a byte of bitmap).
bool offset_is_local(type_id id) {
  switch (id) {
    case type_id::null:
    case type_id::struct_:
    case type_id::fixed_size_list:
    case type_id::sparse_union:
    case type_id::run_end_encoded: return false;
    default: return true;
  }
}

struct copy_item {
  const buffer* src;
  std::int64_t src_offset;
  std::int64_t size;
  std::int64_t dst_offset;
  buffer* dst;
};

class planner {
 public:
  explicit planner(const probe_cache& cache) : cache_(cache) {}

  void plan(const array_data& a, array_data& o, const std::string& path) {
    o.type = a.type;
    o.length = a.length;
    o.null_count = a.null_count;
    const type_layout l = layout_of(a.type);
    // Validation normally guarantees these; with validation none, refuse
    // what cannot be planned rather than overflow.
    const auto end_opt = checked_add(a.offset, a.length);
    const auto last_opt = end_opt ? checked_add(*end_opt, 1) : std::nullopt;
    if (a.offset < 0 || a.length < 0 || !last_opt) {
      throw invalid_data(path, "offset " + std::to_string(a.offset) + " and length " + std::to_string(a.length) +
                                   " cannot be copied (validate the array)");
    }
    const std::int64_t end = *end_opt;
    const std::int64_t shift = offset_is_local(a.type.id) ? a.offset - a.offset % 8 : 0;
    o.offset = a.offset - shift;
    o.buffers.resize(a.buffers.size());
    for (std::size_t i = 0; i < a.buffers.size(); ++i) {
      const buffer& b = a.buffers[i];
      if (b.size() == 0) continue;
      const buffer_spec spec = i < l.buffers.size() ? l.buffers[i] : buffer_spec{buffer_role::variadic, 0};
      std::int64_t begin = 0;
      std::int64_t stop = 0;
      const std::int64_t w = spec.byte_width;
      std::optional<std::int64_t> product = 0;
      switch (spec.role) {
        case buffer_role::validity:
        case buffer_role::bitmap:
          begin = shift / 8;
          stop = a.length > 0 ? bitmap_bytes(end) : 0;
          break;
        case buffer_role::values:
        case buffer_role::list_offsets:
        case buffer_role::list_sizes:
        case buffer_role::views:
        case buffer_role::type_ids:
        case buffer_role::union_offsets:
          product = checked_mul(end, w);
          begin = product ? shift * w : 0;  // shift <= end: fits when end * w does
          stop = a.length > 0 && product ? *product : 0;
          break;
        case buffer_role::offsets:
          product = checked_mul(end + 1, w);
          begin = product ? shift * w : 0;
          stop = a.length > 0 && product ? *product : 0;
          break;
        case buffer_role::data:
          stop = a.length > 0 ? cached_last_offset(a, cache_).value_or(b.size()) : 0;
          break;
        case buffer_role::variadic: stop = b.size(); break;
      }
      if (!product) {
        throw invalid_data(path, std::string(to_string(spec.role)) + " buffer size overflows (validate the array)");
      }
      if (stop <= begin) continue;
      if (stop > b.size()) {
        throw invalid_data(path, std::string(to_string(spec.role)) + " buffer too small: needs " +
                                     std::to_string(stop) + " bytes for " + std::to_string(a.length) +
                                     " values at offset " + std::to_string(a.offset) + ", has " +
                                     std::to_string(b.size()) + " (validate the array)");
      }
      total_ = align_up(total_);
      items_.push_back(copy_item{&b, begin, stop - begin, total_, &o.buffers[i]});
      total_ += stop - begin;
    }
    o.children.resize(a.children.size());  // sized before recursing: items point into it
    for (std::size_t c = 0; c < a.children.size(); ++c) plan(a.children[c], o.children[c], child_path(path, c, a.type));
    if (a.dictionary) {
      auto d = std::make_shared<array_data>();
      plan(*a.dictionary, *d, dictionary_path(path));
      o.dictionary = std::move(d);
    }
  }

  std::int64_t total() const noexcept { return total_; }
  const std::vector<copy_item>& items() const noexcept { return items_; }

 private:
  const probe_cache& cache_;
  std::vector<copy_item> items_;
  std::int64_t total_ = 0;
};

std::vector<array_data> copy_trees_async(const std::vector<const array_data*>& srcs, const std::vector<std::string>& paths,
                                         destination_kind kind, const context* ctx, stream_view s,
                                         const probe_cache& cache) {
  planner p(cache);
  std::vector<array_data> out(srcs.size());  // sized before planning: items point into it
  for (std::size_t i = 0; i < srcs.size(); ++i) p.plan(*srcs[i], out[i], paths[i]);
  if (p.total() == 0) return out;

  buffer whole;
  switch (kind) {
    case destination_kind::device: whole = allocate_device(*ctx, p.total(), s); break;
    case destination_kind::pinned: whole = allocate_pinned(*ctx, p.total()); break;
    case destination_kind::host: {
      // Pinned memory from the core's result pool when it has room: the
      // DMA engine writes it directly (pageable memory would be staged, one
      // blocking copy per large buffer).
      std::optional<buffer> pinned;
      if (ctx != nullptr) pinned = try_allocate_pinned_pooled(*ctx, p.total());
      whole = pinned ? *pinned : allocate_host(p.total());
      break;
    }
  }
  for (const copy_item& it : p.items()) {
    copy_async(whole, it.dst_offset, *it.src, it.src_offset, it.size, s);
    *it.dst = whole.slice(it.dst_offset, it.size);
  }
  return out;
}

}  // namespace

array_data copy_tree_async(const array_data& src, destination_kind kind, const context* ctx, stream_view s,
                           const probe_cache& cache) {
  return std::move(copy_trees_async({&src}, {"array"}, kind, ctx, s, cache)[0]);
}

}  // namespace detail

namespace {

// The stream copies out of `where` run on, given the caller's stream.
stream_view copy_stream(const placement& where, stream_view s) {
  return where.type == device_type::cuda ? detail::stream_for_device(s, where.device_id) : s;
}

struct batch_roots {
  std::vector<detail::validation_root> roots;
  std::vector<const array_data*> arrays;
  std::vector<std::string> paths;
};

batch_roots roots_of(const record_batch& b) {
  batch_roots r;
  r.roots = detail::batch_roots(b);
  for (const detail::validation_root& root : r.roots) {
    r.arrays.push_back(root.array);
    r.paths.push_back(root.path);
  }
  return r;
}

placement common_placement(const std::vector<const array_data*>& arrays) {
  placement found;
  bool any = false;
  for (const array_data* a : arrays) {
    placement p = placement_of(*a);
    if (p.type == device_type::cpu) continue;
    if (any && !(p == found)) {
      throw invalid_data("record batch", "columns live on different devices; move each column separately");
    }
    found = p;
    any = true;
  }
  return found;
}

}  // namespace

array_data to_device_async(const array_data& src, const context& ctx, stream_view s, const array_transfer_options& options) {
  detail::probe_cache cache;
  detail::validate_roots({{&src, "array"}}, options.validation, false, s, cache);
  return detail::copy_tree_async(src, detail::destination_kind::device, &ctx, s, cache);
}

array_data to_device(const array_data& src, const context& ctx, stream_view s, const array_transfer_options& options) {
  array_data out = to_device_async(src, ctx, s, options);
  detail::synchronize(s, ctx.device_number());
  return out;
}

record_batch to_device_async(const record_batch& src, const context& ctx, stream_view s,
                             const array_transfer_options& options) {
  batch_roots r = roots_of(src);
  detail::probe_cache cache;
  detail::validate_roots(r.roots, options.validation, false, s, cache);
  record_batch out;
  out.schema = src.schema;
  out.num_rows = src.num_rows;
  out.columns = detail::copy_trees_async(r.arrays, r.paths, detail::destination_kind::device, &ctx, s, cache);
  return out;
}

record_batch to_device(const record_batch& src, const context& ctx, stream_view s, const array_transfer_options& options) {
  record_batch out = to_device_async(src, ctx, s, options);
  detail::synchronize(s, ctx.device_number());
  return out;
}

array_data to_host(const array_data& src, stream_view s, const array_transfer_options& options) {
  detail::probe_cache cache;
  detail::validate_roots({{&src, "array"}}, options.validation, false, s, cache);
  const placement where = placement_of(src);
  if (where.type == device_type::cpu) return src;
  if (is_host_accessible(where.type)) {
    detail::synchronize(s, where.device_id);
    return src;
  }
  const stream_view cs = copy_stream(where, s);
  const context ctx = context::get(where.device_id);
  array_data out = detail::copy_tree_async(src, detail::destination_kind::host, &ctx, cs, cache);
  detail::synchronize(cs, where.device_id);
  return out;
}

record_batch to_host(const record_batch& src, stream_view s, const array_transfer_options& options) {
  batch_roots r = roots_of(src);
  detail::probe_cache cache;
  detail::validate_roots(r.roots, options.validation, false, s, cache);
  // Columns in host-accessible memory stay as they are; the others are
  // copied in one batch.
  batch_roots copied;
  std::vector<std::size_t> copied_index;
  std::optional<int> mapped_device;  // pinned or managed columns: wait for s
  for (std::size_t i = 0; i < r.arrays.size(); ++i) {
    const placement p = placement_of(*r.arrays[i]);
    if (p.type == device_type::cpu) continue;
    if (is_host_accessible(p.type)) {
      mapped_device = p.device_id;
      continue;
    }
    copied.arrays.push_back(r.arrays[i]);
    copied.paths.push_back(r.paths[i]);
    copied_index.push_back(i);
  }
  record_batch out = src;
  if (!copied.arrays.empty()) {
    const placement where = common_placement(copied.arrays);
    const stream_view cs = copy_stream(where, s);
    const context ctx = context::get(where.device_id);
    std::vector<array_data> columns = detail::copy_trees_async(copied.arrays, copied.paths,
                                                               detail::destination_kind::host, &ctx, cs, cache);
    detail::synchronize(cs, where.device_id);
    for (std::size_t k = 0; k < columns.size(); ++k) out.columns[copied_index[k]] = std::move(columns[k]);
  }
  if (mapped_device) detail::synchronize(s, *mapped_device);
  return out;
}

array_data to_pinned(const array_data& src, const context& ctx, stream_view s, const array_transfer_options& options) {
  detail::probe_cache cache;
  detail::validate_roots({{&src, "array"}}, options.validation, false, s, cache);
  const placement where = placement_of(src);
  const stream_view cs = copy_stream(where, s);
  array_data out = detail::copy_tree_async(src, detail::destination_kind::pinned, &ctx, cs, cache);
  detail::synchronize(cs, where.type == device_type::cuda ? where.device_id : ctx.device_number());
  return out;
}

}  // namespace cuarrow::arrow
