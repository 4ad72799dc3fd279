// ArrowArrayStream / ArrowDeviceArrayStream export, import and the
// host <-> device stream adapters.
#include <cerrno>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include "c_internal.hpp"
#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/error.hpp"

namespace cuarrow::arrow {
namespace {

// ---- export ------------------------------------------------------------------------

// Common state of an exported stream.  `produce` fills the out struct for
// the next batch or returns false at the end.
template <class Out>
struct stream_private {
  arrow::schema schema;
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
    export_schema(p->schema, out);
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

// Exports a device batch declared to be in `type` memory.
void export_declared(const record_batch& b, device_type type, stream_view s, ArrowDeviceArray* out) {
  const array_data root = b.to_struct();
  const placement where = placement_of(root);
  int device_id = where.device_id;
  if (where.type != type) {
    if (detail::has_any_buffer(root)) {
      throw invalid_argument(std::string("the stream carries ") + to_string(type) + " arrays but this batch is in " +
                             to_string(where.type) + " memory");
    }
    // No buffers at all: label the batch with the stream's type.
    device_id = type == device_type::cpu ? -1 : (s.device_number() >= 0 ? s.device_number() : 0);
  }
  export_options o;
  o.if_no_buffers = placement{type, device_id};
  export_device_array(root, s, out, nullptr, o);
}

error stream_failure(const char* what, int code, const char* message) {
  return error(std::string(what) + " failed (errno " + std::to_string(code) + "): " +
               (message != nullptr ? message : "no message"));
}

}  // namespace

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

void export_device_array_stream(arrow::schema s, batch_source next, device_type type, stream_view producer,
                                ArrowDeviceArrayStream* out) {
  if (out == nullptr) throw invalid_argument("export_device_array_stream: null output ArrowDeviceArrayStream");
  if (!next) throw invalid_argument("export_device_array_stream: no batch source");
  auto p = std::make_unique<stream_private<ArrowDeviceArray>>();
  p->schema = std::move(s);
  p->produce = [next = std::move(next), type, producer](ArrowDeviceArray* o) {
    std::optional<record_batch> b = next();
    if (!b) return false;
    export_declared(*b, type, producer, o);
    return true;
  };
  fill_device_stream(std::move(p), type, out);
}

// ---- import ------------------------------------------------------------------------------

struct array_stream_reader::state {
  ArrowArrayStream stream{};
  arrow::schema schema;
  import_options options;
  ~state() {
    if (stream.release != nullptr) stream.release(&stream);
  }
};

array_stream_reader::array_stream_reader(ArrowArrayStream* in, const import_options& options)
    : state_(std::make_unique<state>()) {
  if (in == nullptr) throw invalid_argument("array_stream_reader: null ArrowArrayStream pointer");
  if (in->release == nullptr) throw invalid_data("stream", "the ArrowArrayStream is released (release == NULL)");
  state_->stream = *in;
  in->release = nullptr;
  state_->options = options;
  owned_schema sc;
  const int rc = state_->stream.get_schema(&state_->stream, sc.get());
  if (rc != 0) throw stream_failure("ArrowArrayStream.get_schema", rc, state_->stream.get_last_error(&state_->stream));
  state_->schema = import_schema(sc.get());
}

array_stream_reader::~array_stream_reader() = default;
array_stream_reader::array_stream_reader(array_stream_reader&&) noexcept = default;
array_stream_reader& array_stream_reader::operator=(array_stream_reader&&) noexcept = default;

const arrow::schema& array_stream_reader::schema() const noexcept { return state_->schema; }

std::optional<record_batch> array_stream_reader::next() {
  if (!state_) throw invalid_argument("array_stream_reader::next: the reader was moved from");
  owned_array a;
  const int rc = state_->stream.get_next(&state_->stream, a.get());
  if (rc != 0) throw stream_failure("ArrowArrayStream.get_next", rc, state_->stream.get_last_error(&state_->stream));
  if (a.is_released()) return std::nullopt;
  return import_record_batch(a.get(), state_->schema, state_->options);
}

struct device_array_stream_reader::state {
  ArrowDeviceArrayStream stream{};
  arrow::schema schema;
  device_type type = device_type::cpu;
  import_options options;
  ~state() {
    if (stream.release != nullptr) stream.release(&stream);
  }
};

device_array_stream_reader::device_array_stream_reader(ArrowDeviceArrayStream* in, const import_options& options)
    : state_(std::make_unique<state>()) {
  if (in == nullptr) throw invalid_argument("device_array_stream_reader: null ArrowDeviceArrayStream pointer");
  if (in->release == nullptr) throw invalid_data("stream", "the ArrowDeviceArrayStream is released (release == NULL)");
  state_->stream = *in;
  in->release = nullptr;
  state_->options = options;
  state_->type = from_arrow_device_type(state_->stream.device_type);
  owned_schema sc;
  const int rc = state_->stream.get_schema(&state_->stream, sc.get());
  if (rc != 0) {
    throw stream_failure("ArrowDeviceArrayStream.get_schema", rc, state_->stream.get_last_error(&state_->stream));
  }
  state_->schema = import_schema(sc.get());
}

device_array_stream_reader::~device_array_stream_reader() = default;
device_array_stream_reader::device_array_stream_reader(device_array_stream_reader&&) noexcept = default;
device_array_stream_reader& device_array_stream_reader::operator=(device_array_stream_reader&&) noexcept = default;

const arrow::schema& device_array_stream_reader::schema() const noexcept { return state_->schema; }
device_type device_array_stream_reader::type() const noexcept { return state_->type; }

std::optional<record_batch> device_array_stream_reader::next(stream_view s) {
  if (!state_) throw invalid_argument("device_array_stream_reader::next: the reader was moved from");
  owned_device_array a;
  const int rc = state_->stream.get_next(&state_->stream, a.get());
  if (rc != 0) {
    throw stream_failure("ArrowDeviceArrayStream.get_next", rc, state_->stream.get_last_error(&state_->stream));
  }
  if (a.is_released()) return std::nullopt;
  const device_type got = from_arrow_device_type(a->device_type);
  if (got != state_->type) {
    throw invalid_data("stream", std::string("the stream declared ") + to_string(state_->type) +
                                     " arrays but produced a " + to_string(got) + " array");
  }
  return import_device_record_batch(a.get(), state_->schema, s, state_->options);
}

// ---- adapters --------------------------------------------------------------------------------

void to_device(ArrowArrayStream* in, const context& ctx, ArrowDeviceArrayStream* out, const array_transfer_options& options) {
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
    export_declared(d, device_type::cuda, raw->st, o);
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
  p->produce = [raw](ArrowArray* o) {
    std::optional<record_batch> b = raw->next();
    if (!b) return false;
    record_batch h = to_host(*b, stream_view(), array_transfer_options{validation_level::none});
    export_record_batch(h, o);
    return true;
  };
  fill_host_stream(std::move(p), out);
}

}  // namespace cuarrow::arrow
