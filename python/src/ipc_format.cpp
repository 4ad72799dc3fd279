// The Arrow IPC format over device memory: cuarrow::ipc's messages, stream
// and file readers and writers, bound for the facade (cuarrow/ipc.py).
// Schemas cross as "arrow_schema" capsules, record batches as BatchData
// (the core's placed_batch: a batch as a reader made it, or as a writer
// takes it), message bodies as Buffers, shared objects (share.hpp) as
// SharedObject and descriptor bytes, kinds as their names ("table" ...).
// What is read stays where it was: batches are zero-copy slices of the
// message body.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <cuarrow/arrow/arrow.hpp>
#include <cuarrow/ipc/file.hpp>
#include <cuarrow/ipc/file_writer.hpp>
#include <cuarrow/ipc/metadata.hpp>
#include <cuarrow/ipc/record_batch.hpp>
#include <cuarrow/ipc/share.hpp>
#include <cuarrow/ipc/stream.hpp>

#include "capsules.hpp"
#include "common.hpp"

namespace cuarrow_py {
namespace {

namespace ca = cuarrow::arrow;
namespace ci = cuarrow::ipc;

// A batch read from a source, as the facade's handle: `where` (the
// reader's placement(), or where the source's memory is) is declared for a
// batch without any buffer.
nb::object batch_handle(ca::record_batch b, const ca::placement& where) {
  return nb::cast(ca::placed_batch{std::move(b), where});
}

// Batches read from a source, as a list of the facade's handles.
nb::list batch_handles(std::vector<ca::record_batch> batches, const ca::placement& where) {
  nb::list out;
  for (ca::record_batch& b : batches) out.append(batch_handle(std::move(b), where));
  return out;
}

// A list of BatchData, as the core's batches (copies of handles: a batch's
// schema and its columns' buffer handles, no device memory).
std::vector<ca::record_batch> batches_of(const std::vector<const ca::placed_batch*>& batches) {
  std::vector<ca::record_batch> bs;
  bs.reserve(batches.size());
  for (const ca::placed_batch* b : batches) bs.push_back(b->batch);
  return bs;
}

// Custom metadata crosses as a list of (bytes, bytes) pairs, in order.
ca::key_value_metadata metadata_of(nb::handle pairs) {
  ca::key_value_metadata out;
  if (pairs.is_none()) return out;
  for (nb::handle item : pairs) {
    auto kv = nb::cast<nb::tuple>(item);
    if (kv.size() != 2) throw nb::type_error("custom metadata: expected (bytes, bytes) pairs");
    auto k = nb::cast<nb::bytes>(kv[0]);
    auto v = nb::cast<nb::bytes>(kv[1]);
    out.emplace_back(std::string(k.c_str(), k.size()), std::string(v.c_str(), v.size()));
  }
  return out;
}

// None, or one list of (key, value) pairs per batch.
std::vector<ca::key_value_metadata> metadata_list_of(nb::handle per_batch) {
  std::vector<ca::key_value_metadata> mds;
  if (!per_batch.is_none()) {
    for (nb::handle m : per_batch) mds.push_back(metadata_of(m));
  }
  return mds;
}

nb::list pairs_of(const ca::key_value_metadata& md) {
  nb::list out;
  for (const auto& [k, v] : md) {
    out.append(nb::make_tuple(nb::bytes(k.data(), k.size()), nb::bytes(v.data(), v.size())));
  }
  return out;
}

// The objects below are used with the GIL released: those whose C++ state
// changes (a memo being filled, a stream reader's position, a writer) hold
// a mutex, taken after the GIL is released, so Python threads sharing one
// get errors or results, never a data race.

// A stream's dictionaries (pyarrow.ipc.DictionaryMemo's role).
struct DictionaryMemo {
  ci::dictionary_memo memo;
  std::mutex mu;
};

// A reader (of a buffer: stream_reader, file_reader; of a path, into device
// memory: device_stream_reader, device_file_reader).
template <class R>
struct Reader {
  R r;
  std::mutex mu;  // held by reads that change the reader (a stream's position)
};
using StreamReader = Reader<ci::stream_reader>;
using FileReader = Reader<ci::file_reader>;
using PathFileReader = Reader<ci::device_file_reader>;
using PathStreamReader = Reader<ci::device_stream_reader>;

// __init__ of a reader of a path into device memory of `ctx`.
template <class R>
void init_path_reader(Reader<R>* self, std::string path, const cuarrow::context& ctx,
                      std::optional<std::vector<int>> columns, bool collect_stats, bool gpu_decompression,
                      std::optional<std::int64_t> body_group_bytes, const std::string& read_path) {
  ci::file_read_options o;
  o.path = ci::read_path_preference_from(read_path);
  o.columns = std::move(columns);
  o.collect_stats = collect_stats;
  o.gpu_decompression = gpu_decompression;
  o.body_group_bytes = body_group_bytes.value_or(-1);  // None: the core's default
  nb::gil_scoped_release r;
  new (self) Reader<R>{R(std::move(path), ctx, o), {}};
}

// __init__ of a reader of a buffer.
template <class R>
void init_buffer_reader(Reader<R>* self, const cuarrow::buffer& source) {
  nb::gil_scoped_release r;
  new (self) Reader<R>{R(source, ci::read_options{}), {}};
}

// A writer's write_stats as a dict of its fields.
nb::dict stats_of(const ci::write_stats& w) {
  using S = ci::write_stats;
  return fields_dict(w, "batches", &S::batches, "messages", &S::messages, "body_pieces", &S::body_pieces,
                     "early_messages", &S::early_messages, "layout_seconds", &S::layout_seconds, "compress_seconds",
                     &S::compress_seconds, "compress_copy_seconds", &S::compress_copy_seconds, "metadata_seconds",
                     &S::metadata_seconds, "allocate_seconds", &S::allocate_seconds, "queue_seconds", &S::queue_seconds,
                     "wait_seconds", &S::wait_seconds, "file_write_seconds", &S::file_write_seconds);
}

// A reader's read_stats as a dict of its fields.
nb::dict stats_of(const ci::read_stats& r) {
  using S = ci::read_stats;
  return fields_dict(r, "bytes_read", &S::bytes_read, "batches", &S::batches, "staging_jobs", &S::staging_jobs,
                     "metadata_seconds", &S::metadata_seconds, "allocate_seconds", &S::allocate_seconds,
                     "staging_seconds", &S::staging_seconds, "gds_seconds", &S::gds_seconds, "build_seconds",
                     &S::build_seconds, "pread_seconds", &S::pread_seconds, "decompress_seconds",
                     &S::decompress_seconds, "dma_wait_seconds", &S::dma_wait_seconds, "gpu_decompress_seconds",
                     &S::gpu_decompress_seconds, "dmas", &S::dmas, "scratch_decoded_bytes", &S::scratch_decoded_bytes);
}

// A read that changes a reader's or a memo's state: with the GIL released,
// under the object's lock.
template <class T, class F>
auto locked(T& self, F&& fn) {
  return released([&] {
    std::lock_guard lock(self.mu);
    return fn();
  });
}

// write / write_batches of the writers into device memory and to a path
// (both hold `w`, a writer with write(batch, metadata) and write(span, span),
// and `mu`).
template <class W>
void writer_methods(nb::class_<W>& c) {
  c.def(
       "write",
       [](W& self, const ca::placed_batch& b, nb::handle custom_metadata) {
         ca::key_value_metadata md = metadata_of(custom_metadata);
         locked(self, [&] { self.w->write(b.batch, md); });
       },
       nb::arg("batch"), nb::arg("custom_metadata") = nb::none())
      .def(
          "write_batches",
          [](W& self, const std::vector<const ca::placed_batch*>& batches, nb::handle custom_metadata) {
            // By address: a writer that keeps them copies them once their
            // copies are queued.
            std::vector<const ca::record_batch*> bs;
            bs.reserve(batches.size());
            for (const ca::placed_batch* b : batches) bs.push_back(&b->batch);
            std::vector<ca::key_value_metadata> mds = metadata_list_of(custom_metadata);
            locked(self, [&] { self.w->write(std::span<const ca::record_batch* const>(bs), mds); });
          },
          nb::arg("batches"), nb::arg("custom_metadata") = nb::none())
      .def("stats", [](W& self) { return stats_of(locked(self, [&] { return self.w->stats(); })); });
}

// What the readers offer.  Every reader: the schema.  File readers (in
// memory, by path): the footer's custom metadata and any batch by index.
// Stream readers: the next batch with its message's metadata, the
// position.  All but the file reader of a path (read_batches): every batch
// left.  Readers of paths: what they read and how.
template <class R>
void reader_methods(nb::class_<Reader<R>>& c, bool read_all = true) {
  using Self = Reader<R>;
  c.def("schema_capsule", [](const Self& self) { return schema_capsule(self.r.schema().schema); });
  if constexpr (requires(const R& r) { r.footer(); }) {
    c.def_prop_ro("num_record_batches", [](const Self& self) { return self.r.num_record_batches(); })
        .def(
            "read_batch",
            [](const Self& self, int i) {
              return batch_handle(released([&] { return self.r.read_batch(i); }), self.r.placement());
            },
            nb::arg("i"))
        .def(
            "read_batch_with_metadata",
            [](const Self& self, int i) {
              ci::batch_with_metadata b = released([&] { return self.r.read_batch_with_custom_metadata(i); });
              return nb::make_tuple(batch_handle(std::move(b.batch), self.r.placement()), pairs_of(b.custom_metadata));
            },
            nb::arg("i"))
        .def_prop_ro("footer_metadata", [](const Self& self) { return pairs_of(self.r.footer().custom_metadata); });
  } else {
    c.def("read_next_with_metadata", [](Self& self) -> nb::object {
       std::optional<ci::batch_with_metadata> b = locked(self, [&] { return self.r.read_next_with_custom_metadata(); });
       if (!b) return nb::none();
       return nb::make_tuple(batch_handle(std::move(b->batch), self.r.placement()), pairs_of(b->custom_metadata));
     }).def_prop_ro("position", [](const Self& self) { return self.r.position(); });
  }
  if (read_all) {
    c.def("read_all", [](Self& self) {
      return batch_handles(locked(self, [&] { return self.r.read_all(); }), self.r.placement());
    });
  }
  if constexpr (requires(const R& r) { r.stats(); }) {
    c.def("__init__", &init_path_reader<R>, nb::arg("path"), nb::arg("context"), nb::arg("columns").none() = nb::none(),
          nb::arg("collect_stats") = false, nb::arg("gpu_decompression") = false,
          nb::arg("body_group_bytes").none() = nb::none(), nb::arg("read_path") = "auto")
        .def_prop_ro("bytes_read", [](const Self& self) { return self.r.bytes_read(); })
        .def("stats", [](const Self& self) { return stats_of(self.r.stats()); })
        .def_prop_ro("read_path", [](const Self& self) { return ci::to_string(self.r.last_read_path()); })
        .def_prop_ro("read_path_reason", [](const Self& self) { return self.r.last_read_path_reason(); });
  } else {
    c.def("__init__", &init_buffer_reader<R>, nb::arg("source"));
  }
}

// A writer, into device memory (stream_writer) or to a path (file_writer);
// neither is copyable nor movable.
template <class W>
struct Writer {
  std::unique_ptr<W> w;
  std::mutex mu;
};
using PathWriter = Writer<ci::file_writer>;
using DeviceWriter = Writer<ci::stream_writer>;

}  // namespace

void bind_ipc_format(nb::module_& m) {
  nb::class_<ci::message>(m, "IpcMessage",
                          "One encapsulated Arrow IPC message (cuarrow::ipc::message): metadata read on the host, "
                          "the body a zero-copy slice of its source.")
      .def_prop_ro("kind", [](const ci::message& msg) { return static_cast<int>(msg.kind()); })
      .def_prop_ro("version", [](const ci::message& msg) { return static_cast<int>(msg.metadata.version); })
      .def_prop_ro("metadata", [](const ci::message& msg) { return bytes_of(msg.flatbuffer); })
      .def_ro("body", &ci::message::body)
      .def_prop_ro("offset", [](const ci::message& msg) { return msg.offset; })
      .def_prop_ro("size", [](const ci::message& msg) { return msg.size; })
      .def(
          "serialize",
          [](const ci::message& msg, cuarrow::stream_view s) {
            return bytes_of(released([&] { return ci::serialize_to_host(msg, s); }));
          },
          nb::arg("stream") = nb::none())
      .def("schema_capsule",
           [](const ci::message& msg) { return schema_capsule(msg.metadata.schema_header("IPC message").schema); });

  m.def("ipc_read_message", &ci::read_message, nb::arg("source"), nb::arg("offset") = 0, nb::arg("stream") = nb::none(),
        release_gil());

  nb::class_<DictionaryMemo>(m, "IpcDictionaryMemo", "The dictionaries of a stream, by id.")
      .def(
          "__init__",
          [](DictionaryMemo* self, const ci::message& schema_message) {
            new (self)
                DictionaryMemo{ci::dictionary_memo(schema_message.metadata.schema_header("IPC dictionary memo")), {}};
          },
          nb::arg("schema_message"))
      .def(
          "read",
          [](DictionaryMemo& self, const ci::message& msg) {
            locked(self, [&] { ci::read_dictionary(self.memo, msg); });
          },
          nb::arg("message"));

  m.def(
      "ipc_read_record_batch",
      [](const ci::message& msg, nb::handle schema_cap, DictionaryMemo* memo) {
        ca::schema sc = schema_of(schema_cap);
        ca::record_batch b = released([&] {
          std::unique_lock<std::mutex> lock;
          if (memo != nullptr) lock = std::unique_lock(memo->mu);
          return ci::read_record_batch(msg, std::move(sc), memo != nullptr ? &memo->memo : nullptr);
        });
        return batch_handle(std::move(b), ca::placement::of(msg.body));
      },
      nb::arg("message"), nb::arg("schema_capsule"), nb::arg("dictionary_memo").none() = nb::none());

  nb::class_<StreamReader> stream_reader(m, "IpcStreamReader",
                                         "An IPC stream held in a buffer (cuarrow::ipc::stream_reader).");
  reader_methods(stream_reader);
  nb::class_<FileReader> file_reader(m, "IpcFileReader", "An IPC file held in a buffer (cuarrow::ipc::file_reader).");
  reader_methods(file_reader);
  nb::class_<PathFileReader> path_file_reader(
      m, "IpcPathFileReader", "An IPC file read by path into device memory (cuarrow::ipc::device_file_reader).");
  reader_methods(path_file_reader, /*read_all=*/false);
  path_file_reader
      .def("footer_schema_capsule",
           [](const PathFileReader& self) { return schema_capsule(self.r.footer().schema.schema); })
      .def(
          "read_batches",
          [](const PathFileReader& self, const std::vector<int>& indices) {
            return batch_handles(released([&] { return self.r.read_batches(indices); }), self.r.placement());
          },
          nb::arg("indices"));
  nb::class_<ca::readahead>(m, "Readahead",
                            "Batches read ahead of the caller on a thread of their own (cuarrow::arrow::readahead).")
      .def("next",
           [](ca::readahead& self) -> nb::object {
             std::optional<ca::record_batch> b = released([&] { return self.next(); });
             if (!b) return nb::none();
             return batch_handle(std::move(*b), self.placement());
           })
      .def(
          "close", [](ca::readahead& self) { self.close(); }, release_gil())
      .def_prop_ro("position", [](const ca::readahead& self) { return self.position(); });
  nb::class_<ci::batch_readahead, ca::readahead>(
      m, "IpcBatchReadahead", "Batches of an IpcPathFileReader read ahead (cuarrow::ipc::batch_readahead).")
      .def(
          "__init__",
          [](ci::batch_readahead* self, const PathFileReader& reader, std::vector<int> indices, int depth,
             std::int64_t read_bytes) {
            nb::gil_scoped_release r;
            new (self) ci::batch_readahead(reader.r, std::move(indices), {depth, read_bytes});
          },
          nb::arg("reader"), nb::arg("indices"), nb::arg("depth"), nb::arg("read_bytes"), nb::keep_alive<1, 2>());
  nb::class_<PathStreamReader> path_stream_reader(
      m, "IpcPathStreamReader", "An IPC stream read by path into device memory (cuarrow::ipc::device_stream_reader).");
  reader_methods(path_stream_reader);
  nb::class_<ci::stream_readahead, ca::readahead>(
      m, "IpcStreamReadahead", nb::is_weak_referenceable(),
      "Batches of an IpcPathStreamReader read ahead; close() puts the reader back at the first batch not taken "
      "(cuarrow::ipc::stream_readahead).")
      .def(
          "__init__",
          [](ci::stream_readahead* self, PathStreamReader& reader, int depth, std::int64_t read_bytes) {
            nb::gil_scoped_release r;
            const std::lock_guard lock(reader.mu);  // no read of the reader's own is running
            new (self) ci::stream_readahead(reader.r, {depth, read_bytes});
          },
          nb::arg("reader"), nb::arg("depth"), nb::arg("read_bytes"), nb::keep_alive<1, 2>());

  nb::class_<PathWriter> path_writer(
      m, "IpcPathWriter", "Writes an IPC stream or file to a path (cuarrow::ipc::file_writer), batch by batch.");
  path_writer
      .def(
          "__init__",
          [](PathWriter* self, std::string path, nb::handle schema_cap, bool file, nb::handle footer_metadata,
             cuarrow::stream_view s, std::optional<std::string> codec, std::optional<int> level,
             std::optional<double> min_space_savings) {
            ca::schema sc = schema_of(schema_cap);
            ca::key_value_metadata md = metadata_of(footer_metadata);
            ci::write_options o;
            if (codec) o.compression = ci::compression_codec_of(*codec);
            o.compress.level = level;
            o.compress.min_space_savings = min_space_savings;
            nb::gil_scoped_release r;
            new (self) PathWriter{std::make_unique<ci::file_writer>(
                                      std::move(path), std::move(sc),
                                      file ? ci::file_writer::format::file : ci::file_writer::format::stream, s,
                                      std::move(md), std::move(o)),
                                  {}};
          },
          nb::arg("path"), nb::arg("schema_capsule"), nb::arg("file") = true, nb::arg("footer_metadata") = nb::none(),
          nb::arg("stream") = nb::none(), nb::arg("compression") = nb::none(), nb::arg("level") = nb::none(),
          nb::arg("min_space_savings") = nb::none())
      .def("close", [](PathWriter& self) { locked(self, [&] { self.w->close(); }); })
      .def_prop_ro("bytes_written", [](PathWriter& self) { return self.w->bytes_written(); });
  writer_methods(path_writer);

  nb::class_<ci::encoded_schema>(m, "IpcEncodedSchema",
                                 "A schema with its IPC schema message encoded once (cuarrow::ipc::encoded_schema), "
                                 "for writers into device memory.")
      .def(
          "__init__",
          [](ci::encoded_schema* self, nb::handle schema_cap) { new (self) ci::encoded_schema(schema_of(schema_cap)); },
          nb::arg("schema_capsule"));

  nb::class_<DeviceWriter> writer(m, "IpcWriter",
                                  "Writes an IPC stream or file into device memory (cuarrow::ipc::stream_writer).");
  writer
      .def(
          "__init__",
          [](DeviceWriter* self, const ci::encoded_schema& schema, const cuarrow::context& ctx, bool file,
             nb::handle footer_metadata, cuarrow::stream_view s, bool cuda_malloc) {
            new (self) DeviceWriter{
                std::make_unique<ci::stream_writer>(
                    schema, ctx, file ? ci::stream_writer::format::file : ci::stream_writer::format::stream, s,
                    metadata_of(footer_metadata), ci::write_options{},
                    cuda_malloc ? cuarrow::plain_device_resource::shared() : nullptr),
                {}};
          },
          nb::arg("schema"), nb::arg("context"), nb::arg("file") = false, nb::arg("footer_metadata") = nb::none(),
          nb::arg("stream") = nb::none(), nb::arg("cuda_malloc") = false)
      .def("finish", [](DeviceWriter& self) { return locked(self, [&] { return self.w->finish(); }); });
  writer_methods(writer);

  m.def(
      "ipc_serialize_record_batch",
      [](const ca::placed_batch& b, const cuarrow::context& ctx, cuarrow::stream_view s) {
        return ci::serialize_record_batch(b.batch, ctx, s);
      },
      nb::arg("batch"), nb::arg("context"), nb::arg("stream") = nb::none(), release_gil());

  // ---- whole objects shared with another process (cuarrow/ipc/share.hpp) ----
  nb::class_<ci::shared_object>(m, "SharedObject",
                                "The exporter's side of a shared object (cuarrow::ipc::shared_object): owns the shared "
                                "device memory until released.")
      .def("descriptor", [](const ci::shared_object& o) { return bytes_of(o.descriptor()); })
      .def_prop_ro("kind", [](const ci::shared_object& o) { return ci::to_string(o.kind()); })
      .def_prop_ro("memory", [](const ci::shared_object& o) { return ci::to_string(o.memory()); })
      .def("export_pool",
           [](const ci::shared_object& o) -> nb::object {
             std::optional<cuarrow::shareable_pool> p = o.export_pool();
             return p ? nb::object(pool_descriptor(*p)) : nb::none();
           })
      .def_prop_ro("released", &ci::shared_object::released)
      .def_prop_ro("data", &ci::shared_object::data)
      // With the GIL held: it orders release against descriptor() and data
      // of the same object on other threads (shared_object has no lock).
      .def("release", &ci::shared_object::release);

  nb::class_<cuarrow::imported_pool>(m, "ImportedPool",
                                     "Another process's pool imported here (cuarrow::imported_pool), from "
                                     "ipc_import_shared_pool.")
      .def_prop_ro("pool_id", &cuarrow::imported_pool::pool_id)
      .def_prop_ro("device_number", [](const cuarrow::imported_pool& p) { return p.get_context().device_number(); });

  m.def(
      "ipc_share",
      [](nb::handle schema_cap, const std::vector<const ca::placed_batch*>& batches, const cuarrow::context& ctx,
         const std::string& kind, cuarrow::stream_view s, const std::string& memory) {
        const ca::schema sc = schema_of(schema_cap);
        const std::vector<ca::record_batch> bs = batches_of(batches);
        const ci::shared_kind k = ci::shared_kind_of(kind);
        const ci::share_options o{ci::share_memory_of(memory)};
        return released([&] { return ci::share(sc, bs, ctx, s, k, o); });
      },
      nb::arg("schema_capsule"), nb::arg("batches"), nb::arg("context"), nb::arg("kind"),
      nb::arg("stream") = nb::none(), nb::arg("memory") = "legacy");
  m.def(
      "ipc_share_buffer",
      [](const cuarrow::buffer& b, cuarrow::stream_view s, const std::string& memory) {
        const ci::share_options o{ci::share_memory_of(memory)};
        return released([&] { return ci::share(b, s, o); });
      },
      nb::arg("buffer"), nb::arg("stream") = nb::none(), nb::arg("memory") = "legacy");
  m.def("ipc_import_shared_pool", &ci::import_shared_pool, nb::arg("context"), nb::arg("fd"), nb::arg("pool_id"),
        release_gil());
  m.def(
      "ipc_read_shared_descriptor",
      [](nb::bytes descriptor) {
        ci::shared_descriptor d = ci::read_shared_descriptor(span_of(descriptor));
        return nb::make_tuple(ci::to_string(d.kind), d.handle.device_id(), d.handle.size(), ci::to_string(d.memory),
                              d.handle.pool_id(), d.handle.exported_by_this_process());
      },
      nb::arg("descriptor"));
  m.def(
      "ipc_open_shared",
      [](const cuarrow::context& ctx, nb::bytes descriptor, std::optional<cuarrow::imported_pool> pool) {
        ci::opened_shared o = released([&] {
          return pool ? ci::open_shared(ctx, span_of(descriptor), *pool) : ci::open_shared(ctx, span_of(descriptor));
        });
        nb::list batches;
        nb::object schema = nb::none();
        if (o.kind != ci::shared_kind::buffer) {
          schema = schema_capsule(o.schema);
          batches = batch_handles(std::move(o.batches), ca::placement::of(o.data));
        }
        return nb::make_tuple(ci::to_string(o.kind), schema, batches, o.data);
      },
      nb::arg("context"), nb::arg("descriptor"), nb::arg("pool") = nb::none());
}

}  // namespace cuarrow_py
