// ArrowArray / ArrowDeviceArray export and import (c_data.hpp states the
// ownership rules).
#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "arrow_internal.hpp"
#include "buffer_factory.hpp"
#include "c_internal.hpp"
#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/error.hpp"
#include "runtime/pointer_query.hpp"

namespace cuarrow::arrow {

ArrowDeviceType to_arrow_device_type(device_type t) noexcept {
  switch (t) {
    case device_type::cpu: return ARROW_DEVICE_CPU;
    case device_type::cuda: return ARROW_DEVICE_CUDA;
    case device_type::cuda_host: return ARROW_DEVICE_CUDA_HOST;
    case device_type::cuda_managed: return ARROW_DEVICE_CUDA_MANAGED;
  }
  return ARROW_DEVICE_CPU;
}

namespace {

const char* arrow_device_name(ArrowDeviceType t) {
  switch (t) {
    case ARROW_DEVICE_CPU: return "ARROW_DEVICE_CPU";
    case ARROW_DEVICE_CUDA: return "ARROW_DEVICE_CUDA";
    case ARROW_DEVICE_CUDA_HOST: return "ARROW_DEVICE_CUDA_HOST";
    case ARROW_DEVICE_OPENCL: return "ARROW_DEVICE_OPENCL";
    case ARROW_DEVICE_VULKAN: return "ARROW_DEVICE_VULKAN";
    case ARROW_DEVICE_METAL: return "ARROW_DEVICE_METAL";
    case ARROW_DEVICE_VPI: return "ARROW_DEVICE_VPI";
    case ARROW_DEVICE_ROCM: return "ARROW_DEVICE_ROCM";
    case ARROW_DEVICE_ROCM_HOST: return "ARROW_DEVICE_ROCM_HOST";
    case ARROW_DEVICE_EXT_DEV: return "ARROW_DEVICE_EXT_DEV";
    case ARROW_DEVICE_CUDA_MANAGED: return "ARROW_DEVICE_CUDA_MANAGED";
    case ARROW_DEVICE_ONEAPI: return "ARROW_DEVICE_ONEAPI";
    case ARROW_DEVICE_WEBGPU: return "ARROW_DEVICE_WEBGPU";
    case ARROW_DEVICE_HEXAGON: return "ARROW_DEVICE_HEXAGON";
    default: return "unknown device type";
  }
}

}  // namespace

device_type from_arrow_device_type(ArrowDeviceType t) {
  switch (t) {
    case ARROW_DEVICE_CPU: return device_type::cpu;
    case ARROW_DEVICE_CUDA: return device_type::cuda;
    case ARROW_DEVICE_CUDA_HOST: return device_type::cuda_host;
    case ARROW_DEVICE_CUDA_MANAGED: return device_type::cuda_managed;
    default:
      throw invalid_argument(std::string(arrow_device_name(t)) + " (" + std::to_string(t) +
                             ") memory is not supported: cuarrow handles ARROW_DEVICE_CPU, ARROW_DEVICE_CUDA, "
                             "ARROW_DEVICE_CUDA_HOST and ARROW_DEVICE_CUDA_MANAGED arrays");
  }
}

namespace {

// ============================================================================
// Export
// ============================================================================

// The sync event of an exported device array; sync_event points at `raw`.
struct exported_event {
  event ev;
  CUevent raw = nullptr;
  explicit exported_event(const context& ctx) : ev(ctx, CU_EVENT_DISABLE_TIMING), raw(ev.handle()) {}
};

// Everything an exported ArrowArray points to.  Children live in
// child_storage, each with its own private data (so a child moved out by the
// consumer outlives this node's release).
struct array_private {
  std::vector<buffer> keep;  // the handles that keep the memory alive
  std::vector<const void*> pointers;
  std::vector<std::int64_t> variadic_sizes;
  std::vector<ArrowArray> child_storage;
  std::vector<ArrowArray*> child_pointers;
  std::unique_ptr<ArrowArray> dictionary;
  std::unique_ptr<exported_event> sync;  // the root of a device export

  array_private() = default;
  array_private(const array_private&) = delete;
  array_private& operator=(const array_private&) = delete;
  ~array_private() {
    for (ArrowArray& c : child_storage) {
      if (c.release != nullptr) c.release(&c);
    }
    if (dictionary && dictionary->release != nullptr) dictionary->release(dictionary.get());
  }
};

void release_array(ArrowArray* a) {
  if (a == nullptr || a->release == nullptr) return;
  // Destructors here never throw: buffers release their memory through the
  // core (which reports failures), the event through event's destructor.
  delete static_cast<array_private*>(a->private_data);
  a->release = nullptr;
  a->private_data = nullptr;
}

// Where a node of an exported tree is, rendered only for an error message
// (a batch of a thousand columns would otherwise build a thousand strings).
struct tree_path {
  const tree_path* parent = nullptr;
  const std::vector<field>* parent_fields =
      nullptr;  // the parent's children (their names); null for a root or dictionary
  std::size_t index = 0;
  bool dictionary = false;
  const char* root = "array";

  std::string render() const {
    if (parent == nullptr) return root;
    const std::string up = parent->render();
    return dictionary ? detail::dictionary_path(up) : detail::child_path(up, index, *parent_fields);
  }
};

// Where an export's memory lives, for the zeroed offsets it may have to
// supply (see fill_array): one small buffer per export, made at the first
// need, in the tree's memory (a device one filled on `s`), of its context.
class export_target {
 public:
  export_target(const array_data* tree, placement where, stream_view s) : tree_(tree), where_(where), s_(s) {}

  // A buffer of at least 8 zero bytes where the tree lives, and its address.
  const void* zeros(std::vector<buffer>& keep) {
    // Host memory of any kind will do for host readers.
    alignas(64) static constexpr std::uint8_t kZeros[64] = {};
    if (where_.type == device_type::cpu) return kZeros;
    if (!zeros_) {
      const context ctx = context_of(*tree_, where_).value();
      if (where_.type == device_type::cuda) {
        zeros_ = allocate_device(ctx, 8, s_);
        fill_async(*zeros_, 0, 8, 0, s_);
      } else {
        // cuda_host and cuda_managed memory is read by host and device code:
        // pinned memory (mapped, zeroed) serves both.
        zeros_ = allocate_pinned(ctx, 8);
      }
    }
    keep.push_back(*zeros_);
    return reinterpret_cast<const void*>(zeros_->address());
  }

 private:
  const array_data* tree_;  // null for host exports
  placement where_;
  stream_view s_;
  std::optional<buffer> zeros_;
};

std::unique_ptr<array_private> fill_array(const array_data& a, ArrowArray* out, const tree_path& path,
                                          export_target& to);

// Exports `children` (described by `fields`) into `p`'s child storage.
void fill_children(std::span<const array_data> children, const std::vector<field>& fields, array_private& p,
                   const tree_path& path, export_target& to) {
  p.child_storage.resize(children.size());
  for (ArrowArray& c : p.child_storage) c.release = nullptr;
  for (std::size_t i = 0; i < children.size(); ++i) {
    const tree_path cp{&path, &fields, i, false, ""};
    ArrowArray& c = p.child_storage[i];
    std::unique_ptr<array_private> cpriv = fill_array(children[i], &c, cp, to);
    c.private_data = cpriv.release();
    c.release = release_array;
  }
  p.child_pointers.reserve(children.size());
  for (ArrowArray& c : p.child_storage) p.child_pointers.push_back(&c);
}

void set_children(const array_private& p, ArrowArray* out) {
  out->n_children = static_cast<std::int64_t>(p.child_pointers.size());
  out->children = p.child_pointers.empty() ? nullptr : const_cast<ArrowArray**>(p.child_pointers.data());
}

// Fills `out` completely, or throws leaving it untouched.
//
// What Arrow C++ (pyarrow) imports: an empty array is exported at offset 0
// with no nulls (a cut array keeps the offset of its slice over empty
// buffers, which a consumer measures against offset + length), and the
// offsets buffer of an empty binary / list / map array, which the model may
// keep empty, as one zero offset rather than NULL ("null data pointer for a
// buffer with non-zero computed size").
std::unique_ptr<array_private> fill_array(const array_data& a, ArrowArray* out, const tree_path& path,
                                          export_target& to) {
  const type_layout l = layout_of(a.type);
  const std::size_t fixed = l.buffers.size();
  if (l.variadic ? a.buffers.size() < fixed : a.buffers.size() != fixed) {
    throw invalid_data(path.render(), std::to_string(a.buffers.size()) + " buffers for type " + a.type.to_string() +
                                          " (expected " + (l.variadic ? "at least " : "") + std::to_string(fixed) +
                                          ")");
  }
  if (a.children.size() != a.type.children.size()) {
    throw invalid_data(path.render(), std::to_string(a.children.size()) + " children for type " + a.type.to_string() +
                                          " (expected " + std::to_string(a.type.children.size()) + ")");
  }
  if ((a.type.id == type_id::dictionary) != static_cast<bool>(a.dictionary)) {
    throw invalid_data(path.render(), a.dictionary ? "a " + a.type.to_string() + " array must not have a dictionary"
                                                   : std::string("dictionary array without a dictionary"));
  }

  const std::int64_t offset = a.length == 0 ? 0 : a.offset;
  auto p = std::make_unique<array_private>();
  p->keep = a.buffers;
  p->pointers.reserve(a.buffers.size() + (l.variadic ? 1 : 0));
  for (std::size_t i = 0; i < a.buffers.size(); ++i) {
    const buffer& b = a.buffers[i];
    const void* ptr = b.size() > 0 ? reinterpret_cast<const void*>(b.address()) : nullptr;
    if (i < fixed && l.buffers[i].role == buffer_role::offsets) {
      const std::int64_t need = (offset + a.length + 1) * l.buffers[i].byte_width;
      if (b.size() < need) {
        if (a.length != 0) {
          throw invalid_data(path.render(), "offsets buffer of " + std::to_string(b.size()) + " bytes for " +
                                                std::to_string(a.length) + " values");
        }
        ptr = to.zeros(p->keep);
      }
    }
    p->pointers.push_back(ptr);
  }
  if (l.variadic) {
    for (std::size_t i = fixed; i < a.buffers.size(); ++i) p->variadic_sizes.push_back(a.buffers[i].size());
    p->pointers.push_back(p->variadic_sizes.empty() ? nullptr : p->variadic_sizes.data());
  }

  fill_children(a.children, a.type.children, *p, path, to);
  if (a.dictionary) {
    auto d = std::make_unique<ArrowArray>();
    d->release = nullptr;
    const tree_path dp{&path, nullptr, 0, true, ""};
    std::unique_ptr<array_private> dpriv = fill_array(*a.dictionary, d.get(), dp, to);
    d->private_data = dpriv.release();
    d->release = release_array;
    p->dictionary = std::move(d);
  }

  out->length = a.length;
  out->null_count = a.length == 0 ? 0 : a.null_count;
  out->offset = offset;
  out->n_buffers = a.type.id == type_id::null ? 0 : static_cast<std::int64_t>(p->pointers.size());
  set_children(*p, out);
  out->buffers = p->pointers.empty() || a.type.id == type_id::null ? nullptr : p->pointers.data();
  out->dictionary = p->dictionary.get();
  out->release = nullptr;  // set by the caller together with private_data
  out->private_data = nullptr;
  return p;
}

// A record batch as the struct array the C Data Interface carries, built
// from its columns in place (record_batch::to_struct would copy them and
// the schema's fields first).
void fill_batch_root(const record_batch& batch, ArrowArray* out, export_target& to) {
  if (batch.columns.size() != batch.schema.fields.size()) {
    throw invalid_data("record batch", std::to_string(batch.columns.size()) + " columns for " +
                                           std::to_string(batch.schema.fields.size()) + " fields");
  }
  const tree_path root{nullptr, nullptr, 0, false, "record batch"};
  auto p = std::make_unique<array_private>();
  p->keep.emplace_back();
  p->pointers.push_back(nullptr);  // no validity bitmap: a batch has no null rows
  fill_children(batch.columns, batch.schema.fields, *p, root, to);
  ArrowArray tmp{};
  tmp.length = batch.num_rows;
  tmp.null_count = 0;
  tmp.offset = 0;
  tmp.n_buffers = 1;
  tmp.buffers = p->pointers.data();
  set_children(*p, &tmp);
  tmp.dictionary = nullptr;
  tmp.private_data = p.release();
  tmp.release = release_array;
  *out = tmp;
}

void fill_root(const array_data& a, ArrowArray* out, export_target& to) {
  ArrowArray tmp{};
  std::unique_ptr<array_private> p = fill_array(a, &tmp, tree_path{}, to);
  tmp.private_data = p.release();
  tmp.release = release_array;
  *out = tmp;
}

}  // namespace

bool detail::has_any_buffer(const array_data& a) {
  for (const buffer& b : a.buffers) {
    if (b.size() > 0) return true;
  }
  for (const array_data& c : a.children) {
    if (has_any_buffer(c)) return true;
  }
  return a.dictionary && has_any_buffer(*a.dictionary);
}

void export_array(const array_data& array, ArrowArray* out, ArrowSchema* out_schema) {
  if (out == nullptr) throw invalid_argument("export_array: null output ArrowArray");
  const placement where = placement_of(array);
  if (where.type == device_type::cuda) {
    throw host_access_error("export_array: the array is in device memory of device " + std::to_string(where.device_id) +
                            "; the C Data Interface carries host memory only (use export_device_array, or to_host "
                            "first)");
  }
  owned_schema schema;
  if (out_schema != nullptr) export_type(array.type, schema.get());
  export_target to(nullptr, placement{}, stream_view());
  fill_root(array, out, to);
  if (out_schema != nullptr) {
    *out_schema = *schema.get();
    schema->release = nullptr;
  }
}

bool importer_reads_values(const data_type& type) {
  switch (type.id) {
    case type_id::binary:
    case type_id::large_binary:
    case type_id::utf8:
    case type_id::large_utf8:
    case type_id::binary_view:
    case type_id::utf8_view:
    case type_id::list_view:
    case type_id::large_list_view:
    case type_id::sparse_union:
    case type_id::dense_union:
    case type_id::run_end_encoded:
    case type_id::map: return true;
    case type_id::dictionary: return type.value_type == nullptr || importer_reads_values(*type.value_type);
    default:
      for (const field& c : type.children) {
        if (importer_reads_values(c.type)) return true;
      }
      return false;
  }
}

bool importer_reads_values(const arrow::schema& s) {
  return std::ranges::any_of(s.fields, [](const field& f) { return importer_reads_values(f.type); });
}

void export_record_batch(const record_batch& batch, ArrowArray* out, ArrowSchema* out_schema) {
  if (out == nullptr) throw invalid_argument("export_record_batch: null output ArrowArray");
  for (const array_data& column : batch.columns) {
    const placement where = placement_of(column);
    if (where.type == device_type::cuda) {
      throw host_access_error("export_record_batch: the batch is in device memory of device " +
                              std::to_string(where.device_id) +
                              "; the C Data Interface carries host memory only (use export_device_record_batch, "
                              "or to_host first)");
    }
  }
  owned_schema schema;
  if (out_schema != nullptr) export_schema(batch.schema, schema.get());
  export_target to(nullptr, placement{}, stream_view());
  fill_batch_root(batch, out, to);
  if (out_schema != nullptr) {
    *out_schema = *schema.get();
    schema->release = nullptr;
  }
}

void export_device_array(const array_data& array, stream_view s, ArrowDeviceArray* out, ArrowSchema* out_schema,
                         const export_options& options) {
  if (out == nullptr) throw invalid_argument("export_device_array: null output ArrowDeviceArray");
  const placement where = placement_of(array, options.if_no_buffers);

  owned_schema schema;
  if (out_schema != nullptr) export_type(array.type, schema.get());

  // The tree first: zeroed offsets it supplies are filled on `s`, before
  // the event is recorded (or the stream synchronized).
  export_target to(&array, where, s);
  owned_array root;
  fill_root(array, root.get(), to);
  std::unique_ptr<exported_event> sync;
  if (where.type != device_type::cpu) {
    if (options.synchronize) {
      detail::synchronize(s, where.device_id);
    } else {
      sync = std::make_unique<exported_event>(context_of(array, where).value());
      sync->ev.record(s);
    }
  }
  ArrowDeviceArray tmp{};
  tmp.sync_event = sync ? static_cast<void*>(&sync->raw) : nullptr;
  static_cast<array_private*>(root->private_data)->sync = std::move(sync);
  tmp.array = *root.get();
  root->release = nullptr;
  tmp.device_id = placement::of(where.type, where.device_id).device_id;
  tmp.device_type = to_arrow_device_type(where.type);
  *out = tmp;
  if (out_schema != nullptr) {
    *out_schema = *schema.get();
    schema->release = nullptr;
  }
}

void export_device_record_batch(const record_batch& batch, stream_view s, ArrowDeviceArray* out,
                                ArrowSchema* out_schema, const export_options& options) {
  owned_schema schema;
  if (out_schema != nullptr) export_schema(batch.schema, schema.get());
  export_device_array(batch.to_struct(), s, out, nullptr, options);
  if (out_schema != nullptr) {
    *out_schema = *schema.get();
    schema->release = nullptr;
  }
}

// ============================================================================
// Import
// ============================================================================

namespace {

// The moved-in struct; its release runs when the last imported buffer goes.
struct imported_struct {
  ArrowArray array{};
  imported_struct() = default;
  imported_struct(const imported_struct&) = delete;
  imported_struct& operator=(const imported_struct&) = delete;
  ~imported_struct() {
    if (array.release != nullptr) array.release(&array);
  }
};

// Takes ownership of *in (a bitwise move; the source is marked released).
std::shared_ptr<imported_struct> take(ArrowArray* in) {
  auto owner = std::make_shared<imported_struct>();
  owner->array = *in;
  in->release = nullptr;
  return owner;
}

class importer {
 public:
  importer(std::shared_ptr<const void> owner, device_type type, int device_id)
      : owner_(std::move(owner)), type_(type), device_id_(device_id) {
    if (type_ != device_type::cpu) ctx_ = detail::device_context(device_id_);
  }

  // Builds `o` from `c` (of type `t`).  `column_names`: name the root's
  // children as batch columns.
  void build(const ArrowArray* c, const data_type& t, const std::string& path, array_data& o, int depth,
             bool columns = false) {
    auto fail = [&](const std::string& why) { throw invalid_data(path, why); };
    path_ = path;
    if (c == nullptr) fail("null ArrowArray pointer");
    if (c->release == nullptr) fail("the ArrowArray is released (release == NULL)");
    if (depth > 64) fail("array nested more than 64 levels deep");
    if (c->length < 0) fail("negative length " + std::to_string(c->length));
    if (c->offset < 0) fail("negative offset " + std::to_string(c->offset));
    if (c->null_count < -1 || c->null_count > c->length) {
      fail("null count " + std::to_string(c->null_count) + " is outside 0.." + std::to_string(c->length) +
           " (or -1 for unknown)");
    }
    const auto end_opt = detail::checked_add(c->offset, c->length);
    if (!end_opt) fail("offset + length overflows");
    const std::int64_t end = *end_opt;
    const std::int64_t len = c->length;

    const type_layout l = layout_of(t);
    const std::int64_t fixed = static_cast<std::int64_t>(l.buffers.size());
    std::int64_t n_variadic = 0;
    if (t.id == type_id::null) {
      if (c->n_buffers != 0 && !(c->n_buffers == 1 && c->buffers != nullptr && c->buffers[0] == nullptr)) {
        fail("n_buffers is " + std::to_string(c->n_buffers) + " for type null (expected 0)");
      }
    } else if (l.variadic) {
      if (c->n_buffers < fixed + 1) {
        fail("n_buffers is " + std::to_string(c->n_buffers) + " for type " + t.to_string() + " (expected at least " +
             std::to_string(fixed + 1) + ": validity, views, data buffers, variadic sizes)");
      }
      n_variadic = c->n_buffers - fixed - 1;
    } else if (c->n_buffers != fixed) {
      fail("n_buffers is " + std::to_string(c->n_buffers) + " for type " + t.to_string() + " (expected " +
           std::to_string(fixed) + ")");
    }
    if (c->n_buffers > 0 && c->buffers == nullptr)
      fail("n_buffers is " + std::to_string(c->n_buffers) + " but buffers is NULL");
    if (c->n_children != static_cast<std::int64_t>(t.children.size())) {
      fail("n_children is " + std::to_string(c->n_children) + " for type " + t.to_string() + " (expected " +
           std::to_string(t.children.size()) + ")");
    }
    if (c->n_children > 0 && c->children == nullptr)
      fail("n_children is " + std::to_string(c->n_children) + " but children is NULL");
    if (t.id == type_id::dictionary && c->dictionary == nullptr) fail("dictionary-encoded array without a dictionary");
    if (t.id != type_id::dictionary && c->dictionary != nullptr)
      fail("a " + t.to_string() + " array must not have a dictionary");

    o.type = t;
    o.length = len;
    o.offset = c->offset;
    o.null_count = c->null_count;
    o.buffers.assign(static_cast<std::size_t>(fixed + n_variadic), buffer());

    for (std::int64_t i = 0; i < fixed; ++i) {
      const buffer_spec spec = l.buffers[static_cast<std::size_t>(i)];
      const void* ptr = c->buffers[i];
      std::optional<std::int64_t> size = 0;
      switch (spec.role) {
        case buffer_role::validity:
          if (ptr == nullptr) {
            if (c->null_count > 0) {
              fail("null count " + std::to_string(c->null_count) + " but the validity buffer is NULL");
            }
            o.null_count = 0;
            continue;
          }
          size = len > 0 ? detail::bitmap_bytes(end) : 0;
          break;
        case buffer_role::bitmap: size = len > 0 ? detail::bitmap_bytes(end) : 0; break;
        case buffer_role::offsets: size = len > 0 ? detail::checked_mul(end + 1, spec.byte_width) : 0; break;
        case buffer_role::data: continue;  // sized from the last offset, below
        default: size = len > 0 ? detail::checked_mul(end, spec.byte_width) : 0; break;
      }
      if (!size) fail(std::string(to_string(spec.role)) + " buffer size overflows");
      if (*size > 0 && ptr == nullptr) {
        fail(std::string(to_string(spec.role)) + " buffer is NULL for " + std::to_string(len) + " values");
      }
      if (*size > 0) o.buffers[static_cast<std::size_t>(i)] = wrap(ptr, *size, to_string(spec.role));
    }

    // Offset-based arrays: the first and last offsets, for sizing the data
    // and for validation, all in the one batched read.
    const bool offsets_based = t.id == type_id::binary || t.id == type_id::utf8 || t.id == type_id::large_binary ||
                               t.id == type_id::large_utf8 || t.id == type_id::list || t.id == type_id::large_list ||
                               t.id == type_id::map;
    if (offsets_based && len > 0) {
      const int w = l.buffers[1].byte_width;
      cache_.get_or_request(o.buffers[1], c->offset * w, w, true);
      cache_.get_or_request(o.buffers[1], end * w, w, true);
      if (l.buffers.size() > 2 && l.buffers[2].role == buffer_role::data) {
        data_.push_back(pending_data{&o, 2, c->buffers[2], o.buffers[1], end * w, w, path});
      }
    }
    if (n_variadic > 0) {
      const void* sizes_ptr = c->buffers[c->n_buffers - 1];
      if (sizes_ptr == nullptr)
        fail("the variadic buffer sizes buffer is NULL for " + std::to_string(n_variadic) + " data buffers");
      pending_variadic v{&o, static_cast<std::size_t>(fixed), {}, wrap_sizes(sizes_ptr, n_variadic * 8), path};
      for (std::int64_t k = 0; k < n_variadic; ++k) {
        v.pointers.push_back(c->buffers[fixed + k]);
        cache_.get_or_request(v.sizes, k * 8, 8, true);
      }
      variadic_.push_back(std::move(v));
    }

    o.children.resize(static_cast<std::size_t>(c->n_children));
    for (std::int64_t i = 0; i < c->n_children; ++i) {
      const std::size_t ui = static_cast<std::size_t>(i);
      const std::string cp = columns ? detail::column_path(t.children[ui].name) : detail::child_path(path, ui, t);
      build(c->children[i], t.children[ui].type, cp, o.children[ui], depth + 1);
    }
    if (t.id == type_id::dictionary) {
      auto d = std::make_shared<array_data>();
      build(c->dictionary, *t.value_type, detail::dictionary_path(path), *d, depth + 1);
      o.dictionary = std::move(d);
    }
    if (t.id == type_id::run_end_encoded && len > 0) {
      const array_data& ends = o.children[0];
      const int w = bit_width(ends.type) / 8;
      if (ends.length > 0 && ends.buffers.size() > 1 && ends.buffers[1].size() >= (ends.offset + ends.length) * w) {
        cache_.get_or_request(ends.buffers[1], (ends.offset + ends.length - 1) * w, w, true);
      }
    }
  }

  // One batched read for the whole tree, then the sizes that depended on it.
  void resolve(stream_view s) {
    cache_.fetch(type_ == device_type::cuda ? detail::stream_for_device(s, device_id_) : s);
    for (const pending_data& p : data_) {
      const std::int64_t last = cache_.get(p.offsets, p.pos, p.width, true).value_or(-1);
      if (last < 0) throw invalid_data(p.path, "last offset " + std::to_string(last) + " is negative");
      if (last > 0 && p.pointer == nullptr) {
        throw invalid_data(p.path, "data buffer is NULL but the offsets reach " + std::to_string(last) + " bytes");
      }
      path_ = p.path;
      if (last > 0) p.array->buffers[p.index] = wrap(p.pointer, last, "data");
    }
    for (const pending_variadic& v : variadic_) {
      for (std::size_t k = 0; k < v.pointers.size(); ++k) {
        const std::int64_t size = cache_.get(v.sizes, static_cast<std::int64_t>(k) * 8, 8, true).value_or(-1);
        if (size < 0) {
          throw invalid_data(v.path,
                             "variadic buffer " + std::to_string(k) + " has negative size " + std::to_string(size));
        }
        if (size > 0 && v.pointers[k] == nullptr) {
          throw invalid_data(
              v.path, "variadic buffer " + std::to_string(k) + " is NULL but has " + std::to_string(size) + " bytes");
        }
        path_ = v.path;
        if (size > 0) v.array->buffers[v.first + k] = wrap(v.pointers[k], size, "variadic data");
      }
    }
  }

  detail::probe_cache& cache() noexcept { return cache_; }

 private:
  struct pending_data {
    array_data* array;
    std::size_t index;
    const void* pointer;
    buffer offsets;
    std::int64_t pos;
    int width;
    std::string path;
  };
  struct pending_variadic {
    array_data* array;
    std::size_t first;
    std::vector<const void*> pointers;
    buffer sizes;
    std::string path;
  };

  // Buffer `p` of the node being built: `role` names it in errors ("the
  // validity buffer of <path>").
  buffer wrap(const void* p, std::int64_t size, const char* role) const {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    switch (type_) {
      case device_type::cpu: return wrap_host(p, size, owner_, false);
      case device_type::cuda_host:
        check_host_readable_label(address, size, role);
        return wrap_host(p, size, owner_, false, ctx_);
      case device_type::cuda:
        return cuarrow::detail::wrap_device_as(path_.c_str(), *ctx_, address, size, owner_, false, role);
      case device_type::cuda_managed: {
        check_host_readable_label(address, size, role);
        buffer::fields f = cuarrow::detail::buffer_factory::fields_of(*ctx_, device_type::cuda_managed, size);
        f.address = address;
        f.is_mutable = false;
        f.owner = owner_;
        return cuarrow::detail::buffer_factory::make(std::move(f));
      }
    }
    return buffer();
  }

  // CUDA_HOST and CUDA_MANAGED memory is read by host code (null counts,
  // to_host returns it as it is): before any such read, the label is held
  // against what the driver knows of the pointer, and the buffer's bytes
  // against the memory it knows there.  Device memory labelled host
  // memory, or a buffer longer than the memory, would crash the reader.
  // (CPU labels are trusted: the C Data Interface gives host pointers, and
  // asking the driver about each would cost a call per buffer of every
  // host import.)
  void check_host_readable_label(std::uintptr_t address, std::int64_t size, const char* role) const {
    const cuarrow::detail::pointer_attributes a = cuarrow::detail::query_pointer(address);
    if (a.is_device()) {
      throw invalid_data(path_, std::string("the array is labelled ") +
                                    (type_ == device_type::cuda_host ? "ARROW_DEVICE_CUDA_HOST (pinned host memory)"
                                                                     : "ARROW_DEVICE_CUDA_MANAGED (managed memory)") +
                                    " but the driver knows this buffer as device memory of device " +
                                    std::to_string(a.device) +
                                    ", which host code cannot read; the producer must label it ARROW_DEVICE_CUDA");
    }
    cuarrow::detail::check_known_span(a, address, size, path_.c_str(), role);
  }

  // The variadic sizes buffer: host memory by convention (Arrow C++ exports
  // it so even for device arrays), but device memory is accepted too.
  buffer wrap_sizes(const void* p, std::int64_t size) const {
    if (type_ != device_type::cuda) return wrap(p, size, "variadic sizes");
    if (cuarrow::detail::query_pointer(reinterpret_cast<std::uintptr_t>(p)).is_device()) {
      return wrap(p, size, "variadic sizes");
    }
    return wrap_host(p, size, owner_, false);
  }

  std::shared_ptr<const void> owner_;
  device_type type_;
  int device_id_;
  std::string path_;  // of the node being built, for wrap()'s messages
  std::optional<context> ctx_;
  detail::probe_cache cache_;
  std::vector<pending_data> data_;
  std::vector<pending_variadic> variadic_;
};

// Make the consumer's stream wait for the producer's event.
void wait_for(void* sync_event, device_type type, int device_id, stream_view s) {
  if (sync_event == nullptr || type == device_type::cpu) return;
  CUevent ev = *static_cast<CUevent*>(sync_event);
  if (ev == nullptr) return;
  const context ctx = detail::device_context(device_id);
  scoped_context guard(ctx);  // a default stream acts on the current context
  s.wait(ev);
}

struct device_in {
  std::shared_ptr<imported_struct> owner;
  device_type type;
  int device_id;
  void* sync_event;
};

device_in take_device(ArrowDeviceArray* in, const char* what) {
  if (in == nullptr) throw invalid_argument(std::string(what) + ": null ArrowDeviceArray pointer");
  if (in->array.release == nullptr) {
    throw invalid_data("array",
                       "the ArrowDeviceArray is released (array.release == NULL); it was already "
                       "imported or released");
  }
  device_in d{take(&in->array), device_type::cpu, -1, in->sync_event};
  d.type = from_arrow_device_type(in->device_type);  // owner releases on failure
  if (d.type != device_type::cpu) {
    // An int64 in the struct; a device ordinal is a small int (2^32 + 1
    // must not become device 1).
    if (in->device_id < 0 || in->device_id > std::numeric_limits<int>::max()) {
      throw invalid_data("array", "device_id " + std::to_string(in->device_id) + " is not a device ordinal");
    }
    d.device_id = static_cast<int>(in->device_id);
  }
  return d;
}

// take_device(in, what) and `import_schema()` (which consumes the schema),
// the schema imported and so released even when `in` is refused; `in`'s
// error comes first.
template <class ImportSchema>
auto take_device_and_schema(ArrowDeviceArray* in, const char* what, ImportSchema import_schema)
    -> std::pair<device_in, decltype(import_schema())> {
  std::optional<device_in> d;
  std::exception_ptr early;
  try {
    d = take_device(in, what);
  } catch (...) {
    early = std::current_exception();
  }
  auto imported = import_schema();
  if (early) std::rethrow_exception(early);
  return {std::move(*d), std::move(imported)};
}

array_data import_one(const std::shared_ptr<imported_struct>& owner, device_type type, int device_id,
                      const data_type& t, stream_view s, const import_options& options) {
  importer imp(owner, type, device_id);
  array_data root;
  imp.build(&owner->array, t, "array", root, 0);
  imp.resolve(s);
  detail::validate_roots({{&root, "array"}}, options.validation, false, s, imp.cache());
  return root;
}

record_batch import_batch(const std::shared_ptr<imported_struct>& owner, device_type type, int device_id,
                          const arrow::schema& schema, stream_view s, const import_options& options) {
  importer imp(owner, type, device_id);
  array_data root;
  imp.build(&owner->array, struct_(schema.fields), "record batch", root, 0, true);
  imp.resolve(s);
  record_batch batch = record_batch::from_struct(std::move(root), schema.metadata);
  if (options.validation != validation_level::none) {
    std::vector<detail::validation_root> roots;
    for (std::size_t i = 0; i < batch.columns.size(); ++i) {
      roots.push_back({&batch.columns[i], detail::column_path(schema.fields[i].name)});
    }
    detail::validate_roots(roots, options.validation, false, s, imp.cache());
  }
  return batch;
}

}  // namespace

array_data import_array(ArrowArray* in, const data_type& type, const import_options& options) {
  if (in == nullptr) throw invalid_argument("import_array: null ArrowArray pointer");
  if (in->release == nullptr) {
    throw invalid_data("array", "the ArrowArray is released (release == NULL); it was already imported or released");
  }
  return import_one(take(in), device_type::cpu, -1, type, stream_view(), options);
}

record_batch import_record_batch(ArrowArray* in, const arrow::schema& schema, const import_options& options) {
  if (in == nullptr) throw invalid_argument("import_record_batch: null ArrowArray pointer");
  if (in->release == nullptr) {
    throw invalid_data("record batch", "the ArrowArray is released (release == NULL)");
  }
  return import_batch(take(in), device_type::cpu, -1, schema, stream_view(), options);
}

namespace {

// A host array or batch with the field or schema `meta()` gives (imported
// from, or read in, its C schema): `in` is consumed whatever happens next,
// and a null or released `in` is reported after `meta()` has run.
template <class Meta>
std::pair<field, array_data> host_array_with(ArrowArray* in, Meta meta, const import_options& options) {
  std::shared_ptr<imported_struct> owner;
  if (in != nullptr && in->release != nullptr) owner = take(in);
  field f = meta();
  if (!owner) return {f, import_array(in, f.type, options)};  // throws for the null / released input
  array_data a = import_one(owner, device_type::cpu, -1, f.type, stream_view(), options);
  return {std::move(f), std::move(a)};
}

template <class Meta>
record_batch host_batch_with(ArrowArray* in, Meta meta, const import_options& options) {
  std::shared_ptr<imported_struct> owner;
  if (in != nullptr && in->release != nullptr) owner = take(in);
  arrow::schema sc = meta();
  if (!owner) return import_record_batch(in, sc, options);  // throws for the null / released input
  return import_batch(owner, device_type::cpu, -1, sc, stream_view(), options);
}

}  // namespace

array_data import_array(ArrowArray* in, ArrowSchema* schema, const import_options& options) {
  return host_array_with(
             in, [&] { return import_field(schema); }, options)
      .second;
}

record_batch import_record_batch(ArrowArray* in, ArrowSchema* schema, const import_options& options) {
  return host_batch_with(
      in, [&] { return import_schema(schema); }, options);
}

array_data import_device_array(ArrowDeviceArray* in, const data_type& type, stream_view s,
                               const import_options& options) {
  device_in d = take_device(in, "import_device_array");
  wait_for(d.sync_event, d.type, d.device_id, s);
  return import_one(d.owner, d.type, d.device_id, type, s, options);
}

array_data import_device_array(ArrowDeviceArray* in, ArrowSchema* schema, stream_view s,
                               const import_options& options) {
  auto [d, f] = take_device_and_schema(in, "import_device_array", [&] { return import_field(schema); });
  wait_for(d.sync_event, d.type, d.device_id, s);
  return import_one(d.owner, d.type, d.device_id, f.type, s, options);
}

record_batch import_device_record_batch(ArrowDeviceArray* in, const arrow::schema& schema, stream_view s,
                                        const import_options& options) {
  device_in d = take_device(in, "import_device_record_batch");
  wait_for(d.sync_event, d.type, d.device_id, s);
  return import_batch(d.owner, d.type, d.device_id, schema, s, options);
}

record_batch import_device_record_batch(ArrowDeviceArray* in, ArrowSchema* schema, stream_view s,
                                        const import_options& options) {
  auto [d, sc] = take_device_and_schema(in, "import_device_record_batch", [&] { return import_schema(schema); });
  wait_for(d.sync_event, d.type, d.device_id, s);
  return import_batch(d.owner, d.type, d.device_id, sc, s, options);
}

placed_array import_placed_array(ArrowArray* in, const ArrowSchema& schema, const import_options& options) {
  auto [f, a] = host_array_with(
      in, [&] { return read_field(schema); }, options);
  return {std::move(f), std::move(a), {}};
}

placed_batch import_placed_batch(ArrowArray* in, const ArrowSchema& schema, const import_options& options) {
  return {host_batch_with(
              in, [&] { return read_schema(schema); }, options),
          {}};
}

placed_array import_placed_device_array(ArrowDeviceArray* in, const ArrowSchema& schema, stream_view s,
                                        const import_options& options) {
  auto [d, f] = take_device_and_schema(in, "import_device_array", [&] { return read_field(schema); });
  wait_for(d.sync_event, d.type, d.device_id, s);
  array_data a = import_one(d.owner, d.type, d.device_id, f.type, s, options);
  return {std::move(f), std::move(a), placement::of(d.type, d.device_id)};
}

placed_batch import_placed_device_batch(ArrowDeviceArray* in, const ArrowSchema& schema, stream_view s,
                                        const import_options& options) {
  auto [d, sc] = take_device_and_schema(in, "import_device_record_batch", [&] { return read_schema(schema); });
  wait_for(d.sync_event, d.type, d.device_id, s);
  return {import_batch(d.owner, d.type, d.device_id, sc, s, options), placement::of(d.type, d.device_id)};
}

void export_device_array(const placed_array& array, stream_view s, ArrowDeviceArray* out, ArrowSchema* out_schema) {
  owned_schema schema;
  if (out_schema != nullptr) export_field(array.field, schema.get());
  export_options o;
  o.if_no_buffers = array.declared;
  export_device_array(array.data, s, out, nullptr, o);
  if (out_schema != nullptr) {
    *out_schema = *schema.get();
    schema->release = nullptr;
  }
}

void export_device_array(const placed_batch& batch, stream_view s, ArrowDeviceArray* out, ArrowSchema* out_schema) {
  export_options o;
  o.if_no_buffers = batch.declared;
  export_device_record_batch(batch.batch, s, out, out_schema, o);
}

}  // namespace cuarrow::arrow
