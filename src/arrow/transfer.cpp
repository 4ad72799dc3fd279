// Whole-tree transfers (transfer.hpp states the contract): plan every
// buffer's referenced byte range, make ONE allocation, queue every copy on
// the stream, synchronize at most once at the end.
#include "cuarrow/arrow/transfer.hpp"

#include <algorithm>
#include <concepts>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "arrow_internal.hpp"
#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/error.hpp"
#include "runtime/runtime.hpp"

namespace cuarrow::arrow {
namespace detail {
namespace {

constexpr std::int64_t kAlignment = 64;

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
  bool checked;  // read by to_host's check (host_check_reads)
};

class planner {
 public:
  explicit planner(const probe_cache& cache) : cache_(cache) {}

  void plan(const array_data& a, array_data& o, const std::string& path, bool run_ends = false) {
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
      if (sized_by_layout(spec.role)) {
        product = layout_bytes(spec, end);
        const bool bits = spec.role == buffer_role::validity || spec.role == buffer_role::bitmap;
        if (product) begin = bits ? shift / 8 : shift * w;  // shift <= end: fits when end * w does
        stop = a.length > 0 && product ? *product : 0;
      } else if (spec.role == buffer_role::data) {
        stop = a.length > 0 ? cached_last_offset(a, cache_).value_or(b.size()) : 0;
      } else {
        stop = b.size();  // variadic
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
      // Sizes come from the producer (a last offset of INT64_MAX is a valid
      // int64): the arena's size is summed with overflow checks.
      const auto placed = checked_add(total_, kAlignment - 1);
      const auto after = placed ? checked_add(*placed / kAlignment * kAlignment, stop - begin) : std::nullopt;
      if (!after) {
        throw invalid_data(path, std::string(to_string(spec.role)) + " buffer of " + std::to_string(stop - begin) +
                                     " bytes makes the array too large to copy");
      }
      total_ = *placed / kAlignment * kAlignment;
      items_.push_back(
          copy_item{&b, begin, stop - begin, total_, &o.buffers[i], host_check_reads(a.type, spec.role, run_ends)});
      total_ = *after;
    }
    o.children.resize(a.children.size());  // sized before recursing: items point into it
    for (std::size_t c = 0; c < a.children.size(); ++c) {
      plan(a.children[c], o.children[c], child_path(path, c, a.type), c == 0 && a.type.id == type_id::run_end_encoded);
    }
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

buffer allocate_arena(destination_kind kind, const context* ctx, std::int64_t bytes, stream_view s) {
  switch (kind) {
    case destination_kind::device: return allocate_device(*ctx, bytes, s);
    case destination_kind::pinned: return allocate_pinned(*ctx, bytes);
    case destination_kind::host: {
      // Pinned memory from the core's result pool when it has room: the
      // DMA engine writes it directly (pageable memory goes through the
      // staging pipeline).
      std::optional<buffer> pinned;
      if (ctx != nullptr) pinned = try_allocate_pinned_pooled(*ctx, bytes);
      return pinned ? *pinned : allocate_host(bytes);
    }
  }
  throw invalid_argument("unknown destination kind");
}

// Below this many bytes of buffers to_host's check reads, the check takes
// less time than an event costs: no split.
constexpr std::int64_t kSplitCheckedFrom = 4 << 20;

// Copies of the trees, group by group: each group (the columns of one
// batch, or one array) gets ONE allocation, and every buffer of every group
// is a piece of ONE batched copy on `s`.  With `checked_done`, when the
// buffers to_host's check reads are large and other buffers follow, they are
// copied first, as a batch of their own, and `checked_done` records their
// end: the check reads them while the rest is still on its way.
std::vector<std::vector<array_data>> copy_groups_async(
    const std::vector<std::vector<const array_data*>>& groups, const std::vector<std::vector<std::string>>& paths,
    destination_kind kind, const context* ctx, stream_view s, const probe_cache& cache,
    std::shared_ptr<cuarrow::detail::runtime_event>* checked_done = nullptr) {
  std::vector<std::vector<array_data>> out(groups.size());
  std::vector<copy_piece> pieces;
  std::vector<bool> checked;  // per piece: read by to_host's check
  for (std::size_t g = 0; g < groups.size(); ++g) {
    planner p(cache);
    out[g].resize(groups[g].size());  // sized before planning: items point into it
    for (std::size_t i = 0; i < groups[g].size(); ++i) p.plan(*groups[g][i], out[g][i], paths[g][i]);
    if (p.total() == 0) continue;
    buffer whole = allocate_arena(kind, ctx, p.total(), s);
    // The padding between a device arena's buffers is read by later copies
    // that merge neighbours into one DMA.  Copies from ordinary host memory
    // write it (their runs cross the gaps, from the gathered or staged
    // block); pieces from device or pinned memory travel one DMA each and
    // leave it unwritten, so such an arena is zeroed first (one memset on
    // the stream: Arrow's padding is then zeros, as its IPC writers make it).
    if (kind == destination_kind::device && p.items().size() > 1 &&
        std::any_of(p.items().begin(), p.items().end(),
                    [](const copy_item& it) { return it.src->type() != device_type::cpu; })) {
      fill_async(whole, 0, whole.size(), 0, s);
    }
    for (const copy_item& it : p.items()) {
      pieces.push_back(copy_piece{whole, it.dst_offset, *it.src, it.src_offset, it.size});
      checked.push_back(it.checked);
      *it.dst = whole.slice(it.dst_offset, it.size);
    }
  }
  // Pageable sources move through the staging pipeline together,
  // neighbours share a DMA across an arena's alignment padding, and one
  // host function keeps the sources alive.
  batch_copy_options batch;
  batch.destination_gaps_writable = true;  // the gaps are the arenas' padding
  std::int64_t first_bytes = 0;
  std::int64_t total_bytes = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (checked[i]) first_bytes += pieces[i].size;
    total_bytes += pieces[i].size;
  }
  if (checked_done == nullptr || first_bytes < kSplitCheckedFrom || first_bytes == total_bytes) {
    copy_batch_async(pieces, s, batch);
    return out;
  }
  std::vector<copy_piece> first, rest;
  for (std::size_t i = 0; i < pieces.size(); ++i) (checked[i] ? first : rest).push_back(std::move(pieces[i]));
  copy_batch_async(first, s, batch);
  scoped_context guard(*ctx);
  auto done = std::make_shared<cuarrow::detail::runtime_event>();
  done->record(s.handle());
  copy_batch_async(rest, s, batch);
  *checked_done = std::move(done);
  return out;
}

}  // namespace

array_data copy_tree_async(const array_data& src, destination_kind kind, const context* ctx, stream_view s,
                           const probe_cache& cache) {
  return std::move(copy_groups_async({{&src}}, {{"array"}}, kind, ctx, s, cache)[0][0]);
}

}  // namespace detail

namespace {

// The stream copies out of `where` run on, given the caller's stream.
stream_view copy_stream(const placement& where, stream_view s) {
  return where.type == device_type::cuda ? detail::stream_for_device(s, where.device_id) : s;
}

// The trees of several arrays or batches: one group per array or batch
// (each gets its own allocation), every tree a validation root.
struct tree_groups {
  std::vector<detail::validation_root> roots;
  std::vector<std::vector<const array_data*>> groups;
  std::vector<std::vector<std::string>> paths;
};

// An item's Arrow value: itself, or what a placed item holds.
const array_data& value_of(const array_data& a) { return a; }
const array_data& value_of(const placed_array& a) { return a.data; }
const record_batch& value_of(const record_batch& b) { return b; }
const record_batch& value_of(const placed_batch& b) { return b.batch; }

template <class T>
concept array_item = std::same_as<std::remove_cvref_t<decltype(value_of(std::declval<const T&>()))>, array_data>;
template <class T>
concept batch_item = std::same_as<std::remove_cvref_t<decltype(value_of(std::declval<const T&>()))>, record_batch>;

template <array_item T>
tree_groups groups_of(std::span<const T> arrays) {
  tree_groups t;
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    std::string path = arrays.size() == 1 ? "array" : "array " + std::to_string(i);
    t.roots.push_back({&value_of(arrays[i]), path});
    t.groups.push_back({&value_of(arrays[i])});
    t.paths.push_back({std::move(path)});
  }
  return t;
}

template <batch_item T>
tree_groups groups_of(std::span<const T> batches) {
  tree_groups t;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    std::vector<detail::validation_root> roots;
    try {
      roots = detail::batch_roots(value_of(batches[b]));
    } catch (const invalid_data& e) {
      if (batches.size() == 1) throw;
      throw invalid_data("batch " + std::to_string(b) + ": " + e.path(), e.reason());
    }
    t.groups.emplace_back();
    t.paths.emplace_back();
    for (detail::validation_root& root : roots) {
      if (batches.size() > 1) root.path = "batch " + std::to_string(b) + ": " + root.path;
      t.groups.back().push_back(root.array);
      t.paths.back().push_back(root.path);
      t.roots.push_back(std::move(root));
    }
  }
  return t;
}

std::vector<std::vector<array_data>> groups_to_device_async(const tree_groups& t, const context& ctx, stream_view s,
                                                            const array_transfer_options& options) {
  detail::probe_cache cache;
  detail::validate_roots(t.roots, options.validation, false, s, cache);
  return detail::copy_groups_async(t.groups, t.paths, detail::destination_kind::device, &ctx, s, cache);
}

// The trees in host memory: those in ordinary memory as they are, those in
// host-accessible device memory (pinned, managed) as they are after `s` is
// synchronized, the others copied in one batch.  Returns them with the
// paths of the trees host code is yet to read and a function that waits for
// all of it (one synchronization per stream involved).
struct host_groups {
  std::vector<std::vector<array_data>> trees;
  std::vector<std::vector<std::string>> checked_paths;  // per tree: its path, or empty when not to be checked
  std::function<void()> wait_checked;                   // until what the check reads is there
  std::function<void()> wait;                           // then until all of it is there
};

host_groups groups_to_host_async(const tree_groups& t, stream_view s, const array_transfer_options& options) {
  detail::probe_cache cache;
  detail::validate_roots(t.roots, options.validation, false, s, cache);
  host_groups h;
  h.trees.resize(t.groups.size());
  h.checked_paths.resize(t.groups.size());
  tree_groups copied;
  std::vector<std::pair<std::size_t, std::size_t>> where_from;  // (group, index) of each copied tree
  std::optional<int> mapped_device;                             // pinned or managed trees: wait for s
  placement common;
  bool any = false;
  const bool check = options.validation != validation_level::none;
  for (std::size_t g = 0; g < t.groups.size(); ++g) {
    h.trees[g].resize(t.groups[g].size());
    h.checked_paths[g].resize(t.groups[g].size());
    bool opened = false;
    for (std::size_t i = 0; i < t.groups[g].size(); ++i) {
      const array_data& a = *t.groups[g][i];
      const placement p = placement_of(a);
      if (p.type == device_type::cpu || is_host_accessible(p.type)) {
        h.trees[g][i] = a;
        if (p.type != device_type::cpu) {
          mapped_device = p.device_id;
          if (check) h.checked_paths[g][i] = t.paths[g][i];
        }
        continue;
      }
      if (any && !(p == common)) {
        throw invalid_data(t.paths[g][i], "lives on " + std::string(to_string(p.type)) + ":" +
                                              std::to_string(p.device_id) + ", other data on " +
                                              to_string(common.type) + ":" + std::to_string(common.device_id) +
                                              "; move the data of each device separately");
      }
      common = p;
      any = true;
      if (!opened) {
        copied.groups.emplace_back();
        copied.paths.emplace_back();
        opened = true;
      }
      copied.groups.back().push_back(&a);
      copied.paths.back().push_back(t.paths[g][i]);
      where_from.emplace_back(g, i);
      if (check) h.checked_paths[g][i] = t.paths[g][i];
    }
  }
  std::optional<std::pair<stream_view, int>> copy_wait;
  std::shared_ptr<cuarrow::detail::runtime_event> checked_done;
  if (any) {
    const stream_view cs = copy_stream(common, s);
    const context ctx = context_of(*copied.groups.front().front()).value();
    std::vector<std::vector<array_data>> moved = detail::copy_groups_async(
        copied.groups, copied.paths, detail::destination_kind::host, &ctx, cs, cache, check ? &checked_done : nullptr);
    copy_wait.emplace(cs, common.device_id);
    std::size_t k = 0;
    for (auto& group : moved) {
      for (auto& a : group) {
        const auto [g, i] = where_from[k++];
        h.trees[g][i] = std::move(a);
      }
    }
  }
  // What the check reads arrives first when copied as a batch of its own;
  // `wait` then waits for the rest.  Otherwise all arrives at once.
  if (checked_done) {
    h.wait_checked = [checked_done, s, mapped_device] {
      checked_done->synchronize();
      if (mapped_device) detail::synchronize(s, *mapped_device);
    };
    h.wait = [copy_wait] { detail::synchronize(copy_wait->first, copy_wait->second); };
  } else {
    h.wait_checked = [copy_wait, s, mapped_device] {
      if (copy_wait) detail::synchronize(copy_wait->first, copy_wait->second);
      if (mapped_device) detail::synchronize(s, *mapped_device);
    };
    h.wait = [] {};
  }
  return h;
}

// What to_host checks before host code reads its results (transfer.hpp).
void check_readable(const std::vector<const array_data*>& trees, const std::vector<const std::string*>& paths) {
  std::vector<detail::validation_root> roots;
  for (std::size_t i = 0; i < trees.size(); ++i) {
    if (!paths[i]->empty()) roots.push_back({trees[i], *paths[i]});
  }
  if (!roots.empty()) detail::check_host_readable(roots);
}

// Waits for what the check reads, checks it while the rest of the copy is
// on its way, then waits for the rest (also when the check throws: the
// results' memory must not be released under a copy).
void check_while_copying(const std::function<void()>& wait_checked, const std::function<void()>& wait,
                         const std::vector<const array_data*>& trees, const std::vector<const std::string*>& paths) {
  try {
    wait_checked();
    check_readable(trees, paths);
  } catch (...) {
    try {
      wait();
    } catch (...) {
      // The first error is the one to report.
    }
    throw;
  }
  wait();
}

record_batch with_columns(const record_batch& src, std::vector<array_data> columns) {
  record_batch out;
  out.schema = src.schema;
  out.num_rows = src.num_rows;
  out.columns = std::move(columns);
  return out;
}

std::vector<array_data> firsts(std::vector<std::vector<array_data>> groups) {
  std::vector<array_data> out;
  out.reserve(groups.size());
  for (auto& g : groups) out.push_back(std::move(g[0]));
  return out;
}

template <batch_item T>
std::vector<record_batch> as_batches(std::span<const T> src, std::vector<std::vector<array_data>> groups) {
  std::vector<record_batch> out;
  out.reserve(src.size());
  for (std::size_t b = 0; b < src.size(); ++b) out.push_back(with_columns(value_of(src[b]), std::move(groups[b])));
  return out;
}

// The results of a transfer under their sources' fields, declared where
// they were copied to.
std::vector<placed_array> placed(std::span<const placed_array> src, std::vector<array_data> moved, placement where) {
  std::vector<placed_array> out;
  out.reserve(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) out.push_back({src[i].field, std::move(moved[i]), where});
  return out;
}

std::vector<placed_batch> placed(std::span<const placed_batch>, std::vector<record_batch> moved, placement where) {
  std::vector<placed_batch> out;
  out.reserve(moved.size());
  for (record_batch& b : moved) out.push_back({std::move(b), where});
  return out;
}

}  // namespace

std::vector<array_data> to_device_async(std::span<const array_data> src, const context& ctx, stream_view s,
                                        const array_transfer_options& options) {
  return firsts(groups_to_device_async(groups_of(src), ctx, s, options));
}

std::vector<array_data> to_device(std::span<const array_data> src, const context& ctx, stream_view s,
                                  const array_transfer_options& options) {
  std::vector<array_data> out = to_device_async(src, ctx, s, options);
  detail::synchronize(s, ctx.device_number());
  return out;
}

std::vector<record_batch> to_device_async(std::span<const record_batch> src, const context& ctx, stream_view s,
                                          const array_transfer_options& options) {
  return as_batches(src, groups_to_device_async(groups_of(src), ctx, s, options));
}

std::vector<record_batch> to_device(std::span<const record_batch> src, const context& ctx, stream_view s,
                                    const array_transfer_options& options) {
  std::vector<record_batch> out = to_device_async(src, ctx, s, options);
  detail::synchronize(s, ctx.device_number());
  return out;
}

std::vector<placed_array> to_device(std::span<const placed_array> src, const context& ctx, stream_view s,
                                    const array_transfer_options& options) {
  std::vector<array_data> out = firsts(groups_to_device_async(groups_of(src), ctx, s, options));
  detail::synchronize(s, ctx.device_number());
  return placed(src, std::move(out), {device_type::cuda, ctx.device_number()});
}

std::vector<placed_batch> to_device(std::span<const placed_batch> src, const context& ctx, stream_view s,
                                    const array_transfer_options& options) {
  std::vector<record_batch> out = as_batches(src, groups_to_device_async(groups_of(src), ctx, s, options));
  detail::synchronize(s, ctx.device_number());
  return placed(src, std::move(out), {device_type::cuda, ctx.device_number()});
}

array_data to_device_async(const array_data& src, const context& ctx, stream_view s,
                           const array_transfer_options& options) {
  return std::move(to_device_async(std::span<const array_data>(&src, 1), ctx, s, options)[0]);
}

array_data to_device(const array_data& src, const context& ctx, stream_view s, const array_transfer_options& options) {
  array_data out = to_device_async(src, ctx, s, options);
  detail::synchronize(s, ctx.device_number());
  return out;
}

record_batch to_device_async(const record_batch& src, const context& ctx, stream_view s,
                             const array_transfer_options& options) {
  return std::move(to_device_async(std::span<const record_batch>(&src, 1), ctx, s, options)[0]);
}

record_batch to_device(const record_batch& src, const context& ctx, stream_view s,
                       const array_transfer_options& options) {
  record_batch out = to_device_async(src, ctx, s, options);
  detail::synchronize(s, ctx.device_number());
  return out;
}

namespace {

template <array_item T>
host_transfer<std::vector<array_data>> arrays_to_host_async(std::span<const T> src, stream_view s,
                                                            const array_transfer_options& options) {
  host_groups h = groups_to_host_async(groups_of(src), s, options);
  std::vector<std::string> paths;
  for (auto& g : h.checked_paths) paths.push_back(std::move(g[0]));
  std::function<void()> wait = std::move(h.wait);
  std::function<void()> wait_checked = std::move(h.wait_checked);
  return {firsts(std::move(h.trees)), [wait, wait_checked, paths](const std::vector<array_data>& arrays) {
            std::vector<const array_data*> trees;
            std::vector<const std::string*> names;
            for (std::size_t i = 0; i < arrays.size(); ++i) {
              trees.push_back(&arrays[i]);
              names.push_back(&paths[i]);
            }
            check_while_copying(wait_checked, wait, trees, names);
          }};
}

template <batch_item T>
host_transfer<std::vector<record_batch>> batches_to_host_async(std::span<const T> src, stream_view s,
                                                               const array_transfer_options& options) {
  host_groups h = groups_to_host_async(groups_of(src), s, options);
  std::vector<std::vector<std::string>> paths = std::move(h.checked_paths);
  std::function<void()> wait = std::move(h.wait);
  std::function<void()> wait_checked = std::move(h.wait_checked);
  return {as_batches(src, std::move(h.trees)), [wait, wait_checked, paths](const std::vector<record_batch>& batches) {
            std::vector<const array_data*> trees;
            std::vector<const std::string*> names;
            for (std::size_t b = 0; b < batches.size(); ++b) {
              for (std::size_t i = 0; i < batches[b].columns.size(); ++i) {
                trees.push_back(&batches[b].columns[i]);
                names.push_back(&paths[b][i]);
              }
            }
            check_while_copying(wait_checked, wait, trees, names);
          }};
}

// Whether Arrow C++'s importer reads the bytes of an item's export.
bool read_by_importer(const array_data& a) { return importer_reads_values(a.type); }
bool read_by_importer(const record_batch& b) { return importer_reads_values(b.schema); }

// to_host_for_export: waits at once when the importer reads the bytes of
// any item.
template <class T>
auto for_export(std::span<const T> src, stream_view s, const array_transfer_options& options) {
  auto t = [&] {
    if constexpr (array_item<T>) {
      return arrays_to_host_async(src, s, options);
    } else {
      return batches_to_host_async(src, s, options);
    }
  }();
  if (std::ranges::any_of(src, [](const T& x) { return read_by_importer(value_of(x)); })) t.wait();
  return t;
}

}  // namespace

host_transfer<std::vector<array_data>> to_host_async(std::span<const array_data> src, stream_view s,
                                                     const array_transfer_options& options) {
  return arrays_to_host_async(src, s, options);
}

host_transfer<std::vector<record_batch>> to_host_async(std::span<const record_batch> src, stream_view s,
                                                       const array_transfer_options& options) {
  return batches_to_host_async(src, s, options);
}

host_transfer<std::vector<array_data>> to_host_for_export(std::span<const array_data> src, stream_view s,
                                                          const array_transfer_options& options) {
  return for_export(src, s, options);
}

host_transfer<std::vector<record_batch>> to_host_for_export(std::span<const record_batch> src, stream_view s,
                                                            const array_transfer_options& options) {
  return for_export(src, s, options);
}

host_transfer<std::vector<array_data>> to_host_for_export(std::span<const placed_array> src, stream_view s,
                                                          const array_transfer_options& options) {
  return for_export(src, s, options);
}

host_transfer<std::vector<record_batch>> to_host_for_export(std::span<const placed_batch> src, stream_view s,
                                                            const array_transfer_options& options) {
  return for_export(src, s, options);
}

std::vector<array_data> to_host(std::span<const array_data> src, stream_view s, const array_transfer_options& options) {
  return to_host_async(src, s, options).get();
}

std::vector<record_batch> to_host(std::span<const record_batch> src, stream_view s,
                                  const array_transfer_options& options) {
  return to_host_async(src, s, options).get();
}

array_data to_host(const array_data& src, stream_view s, const array_transfer_options& options) {
  return std::move(to_host(std::span<const array_data>(&src, 1), s, options)[0]);
}

record_batch to_host(const record_batch& src, stream_view s, const array_transfer_options& options) {
  return std::move(to_host(std::span<const record_batch>(&src, 1), s, options)[0]);
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
