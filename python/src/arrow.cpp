// Typed Arrow data: cuarrow::arrow bound for the facade (cuarrow/_arrays.py),
// over the core's placed_array and placed_batch (bound as ArrayData and BatchData).  Data crosses to
// Python as PyCapsules of the C Data / C Device Data / C Stream interfaces
// (capsules.hpp), which pyarrow turns into its own objects.  The GIL is
// released around transfers, imports of device data (which read offsets from
// the device) and synchronizations.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuarrow/arrow/arrow.hpp>

#include "capsules.hpp"
#include "common.hpp"

namespace cuarrow_py {

namespace ca = cuarrow::arrow;

namespace {

// The schema capsule of a handle: an array's field (metadata included), a
// batch's schema.
nb::object schema_capsule_of(const ca::placed_array& a) {
  return make_capsule<ArrowSchema>([&](ArrowSchema* s) { ca::export_field(a.field, s); });
}
nb::object schema_capsule_of(const ca::placed_batch& b) {
  return make_capsule<ArrowSchema>([&](ArrowSchema* s) { ca::export_schema(b.batch.schema, s); });
}

// Host copies in flight (cuarrow::arrow::to_host_for_export), for Python: the
// host data is exported while the DMA runs, and wait() is called before the
// result is handed to anyone.  Dropped unwaited, the memory still stays
// alive until the copies have run.
struct HostTransfer {
  std::function<void()> wait_fn;
  void wait() {
    if (!wait_fn) return;
    std::function<void()> w = std::move(wait_fn);
    wait_fn = nullptr;
    w();
  }
};

// ---- streams -------------------------------------------------------------------------

// The producer's schema of a stream, moved into a capsule.
nb::object take_schema(ca::owned_schema schema) {
  return make_capsule<ArrowSchema>([&](ArrowSchema* out) {
    *out = *schema.get();
    schema->release = nullptr;
  });
}

// mode: 0 decide by the schema (struct: batches), 1 arrays, 2 batches.
ca::stream_items items_of(int mode) {
  switch (mode) {
    case 1: return ca::stream_items::arrays;
    case 2: return ca::stream_items::batches;
    default: return ca::stream_items::by_schema;
  }
}

// A stream's items read to its end, as the facade's handles.
nb::list handles_of(ca::stream_contents& all) {
  nb::list items;
  for (ca::placed_array& a : all.arrays) items.append(nb::cast(std::move(a)));
  for (ca::placed_batch& b : all.batches) items.append(nb::cast(std::move(b)));
  return items;
}

// (HostTransfer, [capsule]) of the items copied to the host by one
// to_host_for_export (which validates the source cheaply and checks what
// host readers index with: device objects may hold imported data): the
// capsules are made while the DMA runs, where pyarrow's importer allows.
template <class T>
nb::tuple to_host_begin(const std::vector<T>& items, cuarrow::stream_view s) {
  nb::list capsules;
  if (items.empty()) return nb::make_tuple(HostTransfer{}, capsules);
  auto begin = [&] { return ca::to_host_for_export(std::span<const T>(items), s); };
  auto shared = std::make_shared<decltype(begin())>(released(begin));
  for (const auto& item : shared->data()) {
    capsules.append(make_capsule<ArrowArray>([&](ArrowArray* out) {
      nb::gil_scoped_release r;
      if constexpr (std::is_same_v<T, ca::placed_array>) {
        ca::export_array(item, out);
      } else {
        ca::export_record_batch(item, out);  // from its columns in place
      }
    }));
  }
  return nb::make_tuple(HostTransfer{[shared] { shared->wait(); }}, capsules);
}

// Copies on the context's device, in one batched copy, validated cheaply
// first or not at all.
template <class T>
std::vector<T> to_device(const std::vector<T>& items, const cuarrow::context& ctx, cuarrow::stream_view s,
                         bool validate) {
  const ca::array_transfer_options o{validate ? ca::validation_level::cheap : ca::validation_level::none};
  nb::gil_scoped_release r;
  return ca::to_device(std::span<const T>(items), ctx, s, o);
}

// A host or device C stream read to its end: (is_batches, schema capsule,
// [ArrayData or BatchData]), and for a device stream its device type.
template <class Reader, class C>
nb::tuple read_to_end(nb::handle capsule, int mode, cuarrow::stream_view s) {
  constexpr bool device = std::is_same_v<C, ArrowDeviceArrayStream>;
  auto* in = capsule_struct<C>(capsule, device ? "the device stream capsule" : "the stream capsule");
  std::optional<Reader> reader;
  ca::stream_contents all;
  {
    nb::gil_scoped_release g;
    reader.emplace(in, ca::import_options{}, items_of(mode));
    if constexpr (device) {
      all = reader->read_all(s);
    } else {
      all = reader->read_all();
    }
  }
  nb::object schema = take_schema(reader->take_c_schema());
  nb::list items = handles_of(all);
  if constexpr (device) return nb::make_tuple(reader->reads_batches(), schema, items, static_cast<int>(reader->type()));
  return nb::make_tuple(reader->reads_batches(), schema, items);
}

// ("arrow_schema", "arrow_device_array") capsules; an item without buffers
// is labelled with its declared placement.
template <class T>
nb::tuple export_device(const T& item, cuarrow::stream_view stream) {
  nb::object array = make_capsule<ArrowDeviceArray>([&](ArrowDeviceArray* out) {
    nb::gil_scoped_release r;
    ca::export_device_array(item, stream, out);
  });
  return nb::make_tuple(schema_capsule_of(item), array);
}

template <class T>
nb::object export_device_stream(nb::handle schema_capsule, std::vector<T> items, const ca::placement& where) {
  const ArrowSchema& sc = *capsule_struct<ArrowSchema>(schema_capsule, "the schema capsule");
  return make_capsule<ArrowDeviceArrayStream>([&](ArrowDeviceArrayStream* out) {
    if constexpr (std::is_same_v<T, ca::placed_array>) {
      ca::export_device_array_stream(ca::read_field(sc), ca::source_of(std::move(items)), where, {}, out);
    } else {
      ca::export_device_array_stream(ca::read_schema(sc), ca::source_of(std::move(items)), where, {}, out);
    }
  });
}

// import_placed_array and its kin over a (schema, array) capsule pair: the
// schema is read, the array moved out.
template <class A, auto Import>
auto import_from(nb::handle schema_capsule, nb::handle array_capsule, auto... stream) {
  const auto* s = capsule_struct<ArrowSchema>(schema_capsule, "the schema capsule");
  auto* a = capsule_struct<A>(array_capsule,
                              std::is_same_v<A, ArrowArray> ? "the array capsule" : "the device array capsule");
  nb::gil_scoped_release r;
  return Import(a, *s, stream..., ca::import_options{});
}

template <auto Import>
auto import_host(nb::handle schema_capsule, nb::handle array_capsule) {
  return import_from<ArrowArray, Import>(schema_capsule, array_capsule);
}

template <auto Import>
auto import_device(nb::handle schema_capsule, nb::handle array_capsule, cuarrow::stream_view s) {
  return import_from<ArrowDeviceArray, Import>(schema_capsule, array_capsule, s);
}

// A device_readahead whose destruction releases the GIL: its thread may be
// in the producer's get_next, waiting for the GIL (pyarrow's readers over
// Python iterators take it), and is joined by the destructor.
struct DeviceReadahead {
  std::optional<ca::device_readahead> r;
  ~DeviceReadahead() {
    if (!r) return;
    nb::gil_scoped_release g;
    r.reset();
  }
};

}  // namespace

void bind_arrow(nb::module_& m) {
  // ---- handles ----------------------------------------------------------------------
  using pa_t = ca::placed_array;
  using pb_t = ca::placed_batch;
  nb::class_<pa_t>(m, "ArrayData",
                   "An Arrow array with its field and declared placement (cuarrow::arrow::placed_array).")
      .def_prop_ro("length", [](const pa_t& a) { return a.data.length; })
      .def_prop_ro("offset", [](const pa_t& a) { return a.data.offset; })
      .def_prop_ro("raw_null_count", [](const pa_t& a) { return a.data.null_count; })
      .def_prop_ro("placement", &pa_t::where)
      .def_prop_ro("raw_context", &pa_t::context)
      .def_prop_ro("has_validity_buffer", [](const pa_t& a) { return a.data.has_validity_bitmap(); })
      .def("buffers", [](const pa_t& a) { return a.data.buffers; })
      .def("children", &pa_t::children)
      .def("dictionary", &pa_t::dictionary)
      .def("indices", &pa_t::indices)
      .def("slice", &pa_t::slice, nb::arg("offset"), nb::arg("length"))
      .def("without_validity", &pa_t::without_validity)
      .def(
          "null_count",
          [](const pa_t& a, cuarrow::stream_view stream) { return ca::compute_null_count(a.data, stream); },
          nb::arg("stream") = nb::none(), nb::call_guard<nb::gil_scoped_release>())
      .def(
          "with_null_count",
          [](const pa_t& a, std::int64_t n) {
            pa_t out = a;
            out.data.null_count = n;
            return out;
          },
          nb::arg("null_count"))
      .def(
          "with_field",
          [](const pa_t& a, nb::handle schema_capsule) {
            return a.with_field(field_of(schema_capsule, "the requested schema capsule"));
          },
          nb::arg("schema_capsule"))
      .def("schema_capsule", [](const pa_t& a) { return schema_capsule_of(a); })
      .def(
          "validate",
          [](const pa_t& a, bool full, cuarrow::stream_view stream) {
            ca::validate_options o;
            if (full) o.level = ca::validation_level::full;
            nb::gil_scoped_release r;
            ca::validate(a.data, o, stream);
          },
          nb::arg("full") = false, nb::arg("stream") = nb::none());

  nb::class_<pb_t>(m, "BatchData", "A record batch with its declared placement (cuarrow::arrow::placed_batch).")
      .def_prop_ro("num_rows", [](const pb_t& b) { return b.batch.num_rows; })
      .def_prop_ro("num_columns", [](const pb_t& b) { return b.batch.columns.size(); })
      .def_prop_ro("placement", &pb_t::where)
      .def_prop_ro("raw_context", &pb_t::context)
      .def("columns", &pb_t::columns)
      .def("slice", &pb_t::slice, nb::arg("offset"), nb::arg("length"))
      .def(
          "with_schema",
          [](const pb_t& b, nb::handle schema_capsule) {
            return b.with_schema(schema_of(schema_capsule, "the requested schema capsule"));
          },
          nb::arg("schema_capsule"))
      .def("schema_capsule", [](const pb_t& b) { return schema_capsule_of(b); });

  // ---- import -----------------------------------------------------------------------
  m.def("import_array", &import_host<&ca::import_placed_array>, nb::arg("schema_capsule"), nb::arg("array_capsule"));
  m.def("import_batch", &import_host<&ca::import_placed_batch>, nb::arg("schema_capsule"), nb::arg("array_capsule"));
  m.def(
      "is_struct_schema",
      [](nb::handle schema_capsule) {
        return ca::is_struct_schema(*capsule_struct<ArrowSchema>(schema_capsule, "the schema capsule"));
      },
      nb::arg("schema_capsule"));
  m.def(
      "device_array_placement",
      [](nb::handle device_array_capsule) {
        auto* a = capsule_struct<ArrowDeviceArray>(device_array_capsule, "the device array capsule");
        return std::make_pair(static_cast<int>(a->device_type), static_cast<std::int64_t>(a->device_id));
      },
      nb::arg("device_array_capsule"));
  m.def("import_device_array", &import_device<&ca::import_placed_device_array>, nb::arg("schema_capsule"),
        nb::arg("device_array_capsule"), nb::arg("stream") = nb::none());
  m.def("import_device_batch", &import_device<&ca::import_placed_device_batch>, nb::arg("schema_capsule"),
        nb::arg("device_array_capsule"), nb::arg("stream") = nb::none());

  m.def(
      "read_stream",
      [](nb::handle capsule, int mode) {
        return read_to_end<ca::array_stream_reader, ArrowArrayStream>(capsule, mode, cuarrow::stream_view());
      },
      nb::arg("capsule"), nb::arg("mode") = 0);
  m.def("read_device_stream", &read_to_end<ca::device_array_stream_reader, ArrowDeviceArrayStream>, nb::arg("capsule"),
        nb::arg("mode") = 0, nb::arg("stream") = nb::none());

  m.def(
      "make_array",
      [](nb::handle schema_capsule, std::int64_t length, std::int64_t null_count, std::int64_t offset,
         std::vector<std::optional<cuarrow::buffer>> buffers, std::vector<ca::placed_array> children,
         std::optional<ca::placed_array> dictionary, const ca::placement& where, cuarrow::stream_view stream) {
        ca::field f = field_of(schema_capsule);  // keeps extension metadata
        std::vector<cuarrow::buffer> bufs;
        for (auto& b : buffers) bufs.push_back(std::move(b).value_or(cuarrow::buffer()));
        nb::gil_scoped_release r;
        return ca::make_placed_array(std::move(f), length, std::move(bufs), null_count, offset, std::move(children),
                                     std::move(dictionary), where, {}, stream);
      },
      nb::arg("schema_capsule"), nb::arg("length"), nb::arg("null_count"), nb::arg("offset"), nb::arg("buffers"),
      nb::arg("children"), nb::arg("dictionary").none(), nb::arg("placement"), nb::arg("stream") = nb::none());
  m.def(
      "batch_from_arrays",
      [](nb::handle schema_capsule, const std::vector<ca::placed_array>& columns, const ca::placement& where,
         cuarrow::stream_view stream) {
        ca::schema sc = schema_of(schema_capsule);
        nb::gil_scoped_release r;
        return ca::make_placed_batch(std::move(sc), columns, where, {}, stream);
      },
      nb::arg("schema_capsule"), nb::arg("columns"), nb::arg("placement"), nb::arg("stream") = nb::none());

  // ---- transfers ----------------------------------------------------------------------
  m.def("arrays_to_device", &to_device<ca::placed_array>, nb::arg("arrays"), nb::arg("context"),
        nb::arg("stream") = nb::none(), nb::arg("validate") = true);
  m.def("batches_to_device", &to_device<ca::placed_batch>, nb::arg("batches"), nb::arg("context"),
        nb::arg("stream") = nb::none(), nb::arg("validate") = true);
  nb::class_<HostTransfer>(m, "HostTransfer", "Host copies in flight: wait() before reading the data.")
      .def("wait", &HostTransfer::wait, release_gil());
  m.def("batches_to_host_begin", &to_host_begin<ca::placed_batch>, nb::arg("batches"), nb::arg("stream") = nb::none());
  m.def("arrays_to_host_begin", &to_host_begin<ca::placed_array>, nb::arg("arrays"), nb::arg("stream") = nb::none());
  m.def(
      "capsule_address",
      [](nb::handle capsule) {
        return reinterpret_cast<std::uintptr_t>(capsule_struct<ArrowArray>(capsule, "capsule"));
      },
      nb::arg("capsule"));
  nb::class_<DeviceReadahead>(m, "DeviceReadahead", nb::is_weak_referenceable(),
                              "The batches of a host C stream moved to the device ahead of the caller "
                              "(cuarrow::arrow::device_readahead).")
      .def(
          "__init__",
          [](DeviceReadahead* self, nb::handle capsule, const cuarrow::context& ctx, int depth, std::int64_t read_bytes,
             bool validate) {
            auto* in = capsule_struct<ArrowArrayStream>(capsule, "the stream capsule");
            const ca::device_readahead_options o{depth, read_bytes,
                                                 validate ? ca::validation_level::cheap : ca::validation_level::none};
            new (self) DeviceReadahead{};
            nb::gil_scoped_release r;
            self->r.emplace(in, ctx, o);
          },
          nb::arg("capsule"), nb::arg("context"), nb::arg("depth"), nb::arg("read_bytes"), nb::arg("validate") = true)
      .def("schema_capsule", [](DeviceReadahead& self) { return take_schema(self.r->take_c_schema()); })
      .def("next",
           [](DeviceReadahead& self) -> nb::object {
             std::optional<ca::record_batch> b = released([&] { return self.r->next(); });
             if (!b) return nb::none();
             return nb::cast(ca::placed_batch{std::move(*b), self.r->placement()});
           })
      .def("close", [](DeviceReadahead& self) { released([&] { self.r->close(); }); })
      .def_prop_ro("position", [](const DeviceReadahead& self) { return self.r->position(); });
  // ---- export ---------------------------------------------------------------------------
  m.def("export_device_array", &export_device<ca::placed_array>, nb::arg("array"), nb::arg("stream") = nb::none());
  m.def("export_device_batch", &export_device<ca::placed_batch>, nb::arg("batch"), nb::arg("stream") = nb::none());
  m.def("export_device_array_stream", &export_device_stream<ca::placed_array>, nb::arg("schema_capsule"),
        nb::arg("chunks"), nb::arg("placement"));
  m.def("export_device_batch_stream", &export_device_stream<ca::placed_batch>, nb::arg("schema_capsule"),
        nb::arg("batches"), nb::arg("placement"));
}

}  // namespace cuarrow_py
