// ArrowArrayStream / ArrowDeviceArrayStream export, import and the
// host <-> device stream adapters.
#include <cerrno>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "c_internal.hpp"
#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/error.hpp"

namespace cuarrow::arrow {
namespace {

// ---- export ------------------------------------------------------------------------

// Common state of an exported stream.  `produce` fills the out struct for
// the next item or returns false at the end.  get_schema gives `root` for a
// stream of arrays, `schema` (a struct) for one of record batches.
template <class Out>
struct stream_private {
  arrow::schema schema;
  std::optional<field> root;
  std::function<bool(Out*)> produce;
  std::string last_error;
  // Anything the stream must keep alive (an adapter's reader and stream).
  std::shared_ptr<void> keep;
};

// A released stream has no private data any more: its callbacks refuse
// (EINVAL) instead of reading freed memory, though calling them is the
// consumer's error (the C stream interface's rules).
constexpr const char* kReleased = "the stream was released: its callbacks may not be called any more";

template <class Stream, class Out>
int get_schema_cb(Stream* st, ArrowSchema* out) {
  if (st == nullptr || st->private_data == nullptr || out == nullptr) return EINVAL;
  auto* p = static_cast<stream_private<Out>*>(st->private_data);
  try {
    if (p->root) {
      export_field(*p->root, out);
    } else {
      export_schema(p->schema, out);
    }
    return 0;
  } catch (...) {
    return detail::errno_for_current_exception(p->last_error);
  }
}

template <class Stream, class Out>
int get_next_cb(Stream* st, Out* out) {
  if (st == nullptr || st->private_data == nullptr || out == nullptr) return EINVAL;
  auto* p = static_cast<stream_private<Out>*>(st->private_data);
  try {
    if (!p->produce(out)) {
      // End of stream: a released array.
      if constexpr (std::is_same_v<Out, ArrowDeviceArray>) {
        *out = ArrowDeviceArray{};
        out->array.release = nullptr;
      } else {
        *out = ArrowArray{};
        out->release = nullptr;
      }
    }
    return 0;
  } catch (...) {
    return detail::errno_for_current_exception(p->last_error);
  }
}

template <class Stream, class Out>
const char* get_last_error_cb(Stream* st) {
  if (st == nullptr || st->private_data == nullptr) return kReleased;
  auto* p = static_cast<stream_private<Out>*>(st->private_data);
  return p->last_error.empty() ? nullptr : p->last_error.c_str();
}

template <class Stream, class Out>
void release_cb(Stream* st) {
  if (st == nullptr || st->release == nullptr) return;
  delete static_cast<stream_private<Out>*>(st->private_data);
  st->private_data = nullptr;
  st->release = nullptr;
}

void fill_host_stream(std::unique_ptr<stream_private<ArrowArray>> p, ArrowArrayStream* out) {
  out->get_schema = get_schema_cb<ArrowArrayStream, ArrowArray>;
  out->get_next = get_next_cb<ArrowArrayStream, ArrowArray>;
  out->get_last_error = get_last_error_cb<ArrowArrayStream, ArrowArray>;
  out->release = release_cb<ArrowArrayStream, ArrowArray>;
  out->private_data = p.release();
}

void fill_device_stream(std::unique_ptr<stream_private<ArrowDeviceArray>> p, device_type type,
                        ArrowDeviceArrayStream* out) {
  out->device_type = to_arrow_device_type(type);
  out->get_schema = get_schema_cb<ArrowDeviceArrayStream, ArrowDeviceArray>;
  out->get_next = get_next_cb<ArrowDeviceArrayStream, ArrowDeviceArray>;
  out->get_last_error = get_last_error_cb<ArrowDeviceArrayStream, ArrowDeviceArray>;
  out->release = release_cb<ArrowDeviceArrayStream, ArrowDeviceArray>;
  out->private_data = p.release();
}

// Exports a device array (a batch as its struct array) declared to be in
// `where` memory; one without any buffer is labelled `where`.
void export_declared(const array_data& root, const char* noun, const placement& where, stream_view s,
                     ArrowDeviceArray* out) {
  const placement got = placement_of(root, where);
  if (got.type != where.type) {
    throw invalid_argument(std::string("the stream carries ") + to_string(where.type) + " arrays but this " + noun +
                           " is in " + to_string(got.type) + " memory");
  }
  export_options o;
  o.if_no_buffers = where;
  export_device_array(root, s, out, nullptr, o);
}

// The placement a stream of `type` labels items without buffers with: the
// producer's device (device 0 for the default stream).
placement stream_placement(device_type type, stream_view producer) {
  if (type == device_type::cpu) return placement{};
  return placement{type, producer.device_number() >= 0 ? producer.device_number() : 0};
}

constexpr const char* errno_name(int code) {
  return code == EINVAL ? ", EINVAL" : code == ENOMEM ? ", ENOMEM" : code == EIO ? ", EIO" : "";
}

template <class Stream>
error stream_failure(const Stream& st, const char* what, int code) {
  const char* message = st.get_last_error != nullptr ? st.get_last_error(const_cast<Stream*>(&st)) : nullptr;
  return error(std::string(what) + " failed (errno " + std::to_string(code) + errno_name(code) +
               "): " + (message != nullptr ? message : "the producer gave no message"));
}

}  // namespace

namespace {

template <class T>
std::function<std::optional<T>()> items_in_order(std::vector<T> items) {
  auto state = std::make_shared<std::pair<std::vector<T>, std::size_t>>(std::move(items), 0);
  return [state]() -> std::optional<T> {
    if (state->second == state->first.size()) return std::nullopt;
    return std::move(state->first[state->second++]);
  };
}

}  // namespace

batch_source source_of(std::vector<record_batch> items) { return items_in_order(std::move(items)); }
array_source source_of(std::vector<array_data> items) { return items_in_order(std::move(items)); }

batch_source source_of(std::vector<placed_batch> items) {
  std::vector<record_batch> batches;
  batches.reserve(items.size());
  for (placed_batch& b : items) batches.push_back(std::move(b.batch));
  return source_of(std::move(batches));
}

array_source source_of(std::vector<placed_array> items) {
  std::vector<array_data> arrays;
  arrays.reserve(items.size());
  for (placed_array& a : items) arrays.push_back(std::move(a.data));
  return source_of(std::move(arrays));
}

void export_array_stream(arrow::schema s, batch_source next, ArrowArrayStream* out) {
  if (out == nullptr) throw invalid_argument("export_array_stream: null output ArrowArrayStream");
  if (!next) throw invalid_argument("export_array_stream: no batch source");
  auto p = std::make_unique<stream_private<ArrowArray>>();
  p->schema = std::move(s);
  p->produce = [next = std::move(next)](ArrowArray* o) {
    std::optional<record_batch> b = next();
    if (!b) return false;
    export_record_batch(*b, o);
    return true;
  };
  fill_host_stream(std::move(p), out);
}

void export_array_stream(field f, array_source next, ArrowArrayStream* out) {
  if (out == nullptr) throw invalid_argument("export_array_stream: null output ArrowArrayStream");
  if (!next) throw invalid_argument("export_array_stream: no array source");
  auto p = std::make_unique<stream_private<ArrowArray>>();
  p->root = std::move(f);
  p->produce = [next = std::move(next)](ArrowArray* o) {
    std::optional<array_data> a = next();
    if (!a) return false;
    export_array(*a, o);
    return true;
  };
  fill_host_stream(std::move(p), out);
}

void export_device_array_stream(arrow::schema s, batch_source next, const placement& where, stream_view producer,
                                ArrowDeviceArrayStream* out) {
  if (out == nullptr) throw invalid_argument("export_device_array_stream: null output ArrowDeviceArrayStream");
  if (!next) throw invalid_argument("export_device_array_stream: no batch source");
  auto p = std::make_unique<stream_private<ArrowDeviceArray>>();
  p->schema = std::move(s);
  p->produce = [next = std::move(next), where, producer](ArrowDeviceArray* o) {
    std::optional<record_batch> b = next();
    if (!b) return false;
    export_declared(b->to_struct(), "batch", where, producer, o);
    return true;
  };
  fill_device_stream(std::move(p), where.type, out);
}

void export_device_array_stream(arrow::schema s, batch_source next, device_type type, stream_view producer,
                                ArrowDeviceArrayStream* out) {
  export_device_array_stream(std::move(s), std::move(next), stream_placement(type, producer), producer, out);
}

void export_device_array_stream(field f, array_source next, const placement& where, stream_view producer,
                                ArrowDeviceArrayStream* out) {
  if (out == nullptr) throw invalid_argument("export_device_array_stream: null output ArrowDeviceArrayStream");
  if (!next) throw invalid_argument("export_device_array_stream: no array source");
  auto p = std::make_unique<stream_private<ArrowDeviceArray>>();
  p->root = std::move(f);
  p->produce = [next = std::move(next), where, producer](ArrowDeviceArray* o) {
    std::optional<array_data> a = next();
    if (!a) return false;
    export_declared(*a, "array", where, producer, o);
    return true;
  };
  fill_device_stream(std::move(p), where.type, out);
}

// ---- import ------------------------------------------------------------------------------
//
// Streams come from outside: their callbacks and everything they give are
// checked before use (NULL callbacks, a released schema, a failing call
// with or without a message, items of another memory than declared).

namespace {

// The stream's schema, read once: as record batches' schema or as the
// arrays' field (a wide schema costs a microsecond or more per column).
// `st` has been taken over by the caller (released by it on failure).
template <class Stream>
void read_stream_schema(Stream& st, const char* what, stream_items items, owned_schema& c_schema, bool& batches,
                        arrow::schema& schema, field& root) {
  if (st.get_schema == nullptr || st.get_next == nullptr) {
    throw invalid_data(what, "the stream has a NULL get_schema or get_next callback");
  }
  const int rc = st.get_schema(&st, c_schema.get());
  if (rc != 0) throw stream_failure(st, (std::string(what) + ".get_schema").c_str(), rc);
  if (c_schema.is_released()) throw invalid_data(what, "get_schema returned a released ArrowSchema");
  const bool is_struct = is_struct_schema(*c_schema.get());
  batches = items == stream_items::batches || (items == stream_items::by_schema && is_struct);
  if (batches && is_struct) {
    schema = read_schema(*c_schema.get());
    return;
  }
  root = read_field(*c_schema.get());
  if (batches) {
    throw invalid_data(what, "a stream of record batches needs a struct schema, got " + root.type.to_string());
  }
}

template <class State>
State& live(const std::unique_ptr<State>& s, const char* what) {
  if (!s) throw invalid_argument(std::string(what) + ": the reader was moved from");
  return *s;
}

}  // namespace

struct array_stream_reader::state {
  ArrowArrayStream stream{};
  owned_schema c_schema;
  bool batches = true;
  arrow::schema schema;
  field root;
  import_options options;
  ~state() {
    if (stream.release != nullptr) stream.release(&stream);
  }
};

array_stream_reader::array_stream_reader(ArrowArrayStream* in, const import_options& options, stream_items items)
    : state_(std::make_unique<state>()) {
  if (in == nullptr) throw invalid_argument("array_stream_reader: null ArrowArrayStream pointer");
  if (in->release == nullptr) throw invalid_data("stream", "the ArrowArrayStream is released (release == NULL)");
  state_->stream = *in;
  in->release = nullptr;
  state_->options = options;
  read_stream_schema(state_->stream, "ArrowArrayStream", items, state_->c_schema, state_->batches, state_->schema,
                     state_->root);
}

array_stream_reader::~array_stream_reader() = default;
array_stream_reader::array_stream_reader(array_stream_reader&&) noexcept = default;
array_stream_reader& array_stream_reader::operator=(array_stream_reader&&) noexcept = default;

bool array_stream_reader::reads_batches() const noexcept { return state_->batches; }
const arrow::schema& array_stream_reader::schema() const noexcept { return state_->schema; }
const field& array_stream_reader::root_field() const noexcept { return state_->root; }
owned_schema array_stream_reader::take_c_schema() { return std::move(live(state_, "take_c_schema").c_schema); }

namespace {

// The next item of a host stream, or a released struct at the end.
bool next_host(ArrowArrayStream& st, owned_array& a) {
  const int rc = st.get_next(&st, a.get());
  if (rc != 0) throw stream_failure(st, "ArrowArrayStream.get_next", rc);
  return !a.is_released();
}

}  // namespace

std::optional<record_batch> array_stream_reader::next() {
  state& st = live(state_, "array_stream_reader::next");
  if (!st.batches) throw invalid_argument("array_stream_reader::next: the stream is read as arrays (next_array)");
  owned_array a;
  if (!next_host(st.stream, a)) return std::nullopt;
  return import_record_batch(a.get(), st.schema, st.options);
}

std::optional<array_data> array_stream_reader::next_array() {
  state& st = live(state_, "array_stream_reader::next_array");
  if (st.batches)
    throw invalid_argument("array_stream_reader::next_array: the stream is read as record batches (next)");
  owned_array a;
  if (!next_host(st.stream, a)) return std::nullopt;
  return import_array(a.get(), st.root.type, st.options);
}

stream_contents array_stream_reader::read_all() {
  stream_contents out;
  // A host stream's items are host memory: cpu, no device.
  if (live(state_, "array_stream_reader::read_all").batches) {
    while (std::optional<record_batch> b = next()) out.batches.push_back({std::move(*b), placement{}});
  } else {
    while (std::optional<array_data> a = next_array()) out.arrays.push_back({state_->root, std::move(*a), placement{}});
  }
  return out;
}

struct device_array_stream_reader::state {
  ArrowDeviceArrayStream stream{};
  owned_schema c_schema;
  bool batches = true;
  arrow::schema schema;
  field root;
  device_type type = device_type::cpu;
  import_options options;
  ~state() {
    if (stream.release != nullptr) stream.release(&stream);
  }

  // The next device array, checked against the declared type, and its
  // placement; false at the end.
  bool next(owned_device_array& a, placement* where) {
    const int rc = stream.get_next(&stream, a.get());
    if (rc != 0) throw stream_failure(stream, "ArrowDeviceArrayStream.get_next", rc);
    if (a.is_released()) return false;
    const device_type got = from_arrow_device_type(a->device_type);
    if (got != type) {
      throw invalid_data("stream", std::string("the stream declared ") + to_string(type) + " arrays but produced a " +
                                       to_string(got) + " array");
    }
    // (The import checks device_id before anything is read.)
    if (where != nullptr) *where = placement::of(got, static_cast<int>(a->device_id));
    return true;
  }
};

device_array_stream_reader::device_array_stream_reader(ArrowDeviceArrayStream* in, const import_options& options,
                                                       stream_items items)
    : state_(std::make_unique<state>()) {
  if (in == nullptr) throw invalid_argument("device_array_stream_reader: null ArrowDeviceArrayStream pointer");
  if (in->release == nullptr) throw invalid_data("stream", "the ArrowDeviceArrayStream is released (release == NULL)");
  state_->stream = *in;
  in->release = nullptr;
  state_->options = options;
  state_->type = from_arrow_device_type(state_->stream.device_type);
  read_stream_schema(state_->stream, "ArrowDeviceArrayStream", items, state_->c_schema, state_->batches, state_->schema,
                     state_->root);
}

device_array_stream_reader::~device_array_stream_reader() = default;
device_array_stream_reader::device_array_stream_reader(device_array_stream_reader&&) noexcept = default;
device_array_stream_reader& device_array_stream_reader::operator=(device_array_stream_reader&&) noexcept = default;

bool device_array_stream_reader::reads_batches() const noexcept { return state_->batches; }
const arrow::schema& device_array_stream_reader::schema() const noexcept { return state_->schema; }
const field& device_array_stream_reader::root_field() const noexcept { return state_->root; }
device_type device_array_stream_reader::type() const noexcept { return state_->type; }
owned_schema device_array_stream_reader::take_c_schema() { return std::move(live(state_, "take_c_schema").c_schema); }

std::optional<record_batch> device_array_stream_reader::next(stream_view s, placement* where) {
  state& st = live(state_, "device_array_stream_reader::next");
  if (!st.batches) {
    throw invalid_argument("device_array_stream_reader::next: the stream is read as arrays (next_array)");
  }
  owned_device_array a;
  placement p;
  if (!st.next(a, &p)) return std::nullopt;
  record_batch b = import_device_record_batch(a.get(), st.schema, s, st.options);
  if (where != nullptr) *where = p;
  return b;
}

std::optional<array_data> device_array_stream_reader::next_array(stream_view s, placement* where) {
  state& st = live(state_, "device_array_stream_reader::next_array");
  if (st.batches) {
    throw invalid_argument("device_array_stream_reader::next_array: the stream is read as record batches (next)");
  }
  owned_device_array a;
  placement p;
  if (!st.next(a, &p)) return std::nullopt;
  array_data d = import_device_array(a.get(), st.root.type, s, st.options);
  if (where != nullptr) *where = p;
  return d;
}

stream_contents device_array_stream_reader::read_all(stream_view s) {
  stream_contents out;
  placement p;
  if (live(state_, "device_array_stream_reader::read_all").batches) {
    while (std::optional<record_batch> b = next(s, &p)) out.batches.push_back({std::move(*b), p});
  } else {
    while (std::optional<array_data> a = next_array(s, &p)) out.arrays.push_back({state_->root, std::move(*a), p});
  }
  return out;
}

// ---- adapters --------------------------------------------------------------------------------

void to_device(ArrowArrayStream* in, const context& ctx, ArrowDeviceArrayStream* out,
               const array_transfer_options& options) {
  if (out == nullptr) throw invalid_argument("to_device: null output ArrowDeviceArrayStream");
  struct adapter {
    array_stream_reader reader;
    context ctx;
    cuarrow::stream st;
    array_transfer_options options;
  };
  // The reader validates on import; the transfer then trusts it.
  auto a = std::make_shared<adapter>(
      adapter{array_stream_reader(in, import_options{options.validation}), ctx, cuarrow::stream(ctx), options});
  auto p = std::make_unique<stream_private<ArrowDeviceArray>>();
  p->schema = a->reader.schema();
  p->keep = a;
  adapter* raw = a.get();
  p->produce = [raw](ArrowDeviceArray* o) {
    std::optional<record_batch> b = raw->reader.next();
    if (!b) return false;
    record_batch d = to_device_async(*b, raw->ctx, raw->st, array_transfer_options{validation_level::none});
    export_declared(d.to_struct(), "batch", stream_placement(device_type::cuda, raw->st), raw->st, o);
    return true;
  };
  fill_device_stream(std::move(p), device_type::cuda, out);
}

void to_host(ArrowDeviceArrayStream* in, ArrowArrayStream* out, const array_transfer_options& options) {
  if (out == nullptr) throw invalid_argument("to_host: null output ArrowArrayStream");
  auto reader = std::make_shared<device_array_stream_reader>(in, import_options{options.validation});
  auto p = std::make_unique<stream_private<ArrowArray>>();
  p->schema = reader->schema();
  p->keep = reader;
  device_array_stream_reader* raw = reader.get();
  // Host readers index with what the batch holds: to_host checks that
  // (offsets, view ranges, type ids) at the caller's level, as to_host()
  // of a batch does; the reader's import checked the structure only.
  p->produce = [raw, options](ArrowArray* o) {
    std::optional<record_batch> b = raw->next();
    if (!b) return false;
    record_batch h = to_host(*b, stream_view(), options);
    export_record_batch(h, o);
    return true;
  };
  fill_host_stream(std::move(p), out);
}

}  // namespace cuarrow::arrow
