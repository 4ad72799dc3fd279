// The Arrow C Data, C Stream, C Device Data and C Device Stream interfaces:
// export and import of schemas, arrays, record batches and streams.
//
// Ownership (the specification's move rules, apache/arrow
// docs/source/format/CDataInterface.rst "Memory management"):
//   - export_* fill a struct the caller allocated.  Everything it points to
//     is owned by the struct: its private_data holds the cuarrow::buffer
//     handles (so the memory stays alive however long the consumer keeps
//     the struct, whatever happens to the exporting objects) and, for device
//     arrays, the sync event.  The consumer calls the base struct's release
//     exactly once; children may be moved out before that.  On failure the
//     out struct is left untouched.
//   - import_* take ownership of the struct they are given, ALWAYS: the
//     input is moved from (its release set to NULL) even when the import
//     fails, in which case it has been released.  A struct that is already
//     released (release == NULL) is refused with invalid_data.  The imported
//     buffers are read-only views whose owner keeps the imported struct
//     alive; its release is called when the last of them goes.
//   - read_* look at a struct without taking it.
//
// Device arrays (ArrowDeviceArray):
//   - CUDA, CUDA_HOST and CUDA_MANAGED memory (device_id = the device
//     ordinal) and CPU (device_id -1) are supported both ways.
//   - export records a real sync event: a CUevent created with
//     CU_EVENT_DISABLE_TIMING, recorded on the producing stream, owned by
//     the exported struct and destroyed by its release.  sync_event points
//     at the CUevent (a CUevent*), never into the struct itself.  CPU arrays
//     and exports with synchronize = true carry no event (the data is ready).
//   - import makes the consumer's stream wait for the imported sync_event
//     (cuStreamWaitEvent) before anything reads the buffers; the result is
//     valid in the order of that stream.
//   - binary_view / utf8_view: the variadic buffer sizes buffer is exported
//     in host memory (as Arrow C++ does); on import it may be in host or
//     device memory.
//   - Buffer sizes are not part of the interface: import computes them from
//     length + offset and the layout, and for variable-length data from the
//     last offset, which for device memory is read with one batched copy for
//     the whole tree (see validate.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cuarrow/arrow/array.hpp"
#include "cuarrow/arrow/c_abi.h"
#include "cuarrow/arrow/readahead.hpp"
#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/arrow/validate.hpp"
#include "cuarrow/context.hpp"
#include "cuarrow/export.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow::arrow {

// ---- owning wrappers for the C structs ------------------------------------

/// Whether a C struct is released: its release callback is NULL (for a
/// device array, its array's).
inline bool c_released(const ArrowDeviceArray& v) noexcept { return v.array.release == nullptr; }
template <class T>
bool c_released(const T& v) noexcept {
  return v.release == nullptr;
}

/// Calls a C struct's release callback unless it is released, which it is
/// afterwards.
inline void c_release(ArrowDeviceArray& v) noexcept {
  if (!c_released(v)) v.array.release(&v.array);
  v.array.release = nullptr;
}
template <class T>
void c_release(T& v) noexcept {
  if (!c_released(v)) v.release(&v);
  v.release = nullptr;
}

/// Owns one C struct: releases it (if not released) on destruction.
/// Move-only.  get() gives the struct to fill or to hand over; after an
/// import moved it, release is NULL and the destructor does nothing.
template <class T>
class c_owned {
 public:
  c_owned() noexcept = default;
  ~c_owned() { reset(); }
  c_owned(c_owned&& o) noexcept : value_(std::exchange(o.value_, T{})) {}
  c_owned& operator=(c_owned&& o) noexcept {
    if (this != &o) {
      reset();
      value_ = std::exchange(o.value_, T{});
    }
    return *this;
  }
  c_owned(const c_owned&) = delete;
  c_owned& operator=(const c_owned&) = delete;

  T* get() noexcept { return &value_; }
  const T* get() const noexcept { return &value_; }
  T* operator->() noexcept { return &value_; }
  const T* operator->() const noexcept { return &value_; }
  bool is_released() const noexcept { return c_released(value_); }
  void reset() noexcept { c_release(value_); }

 private:
  T value_{};
};

using owned_schema = c_owned<ArrowSchema>;
using owned_array = c_owned<ArrowArray>;
using owned_device_array = c_owned<ArrowDeviceArray>;
using owned_array_stream = c_owned<ArrowArrayStream>;
using owned_device_array_stream = c_owned<ArrowDeviceArrayStream>;

// ---- format strings -------------------------------------------------------

/// The C Data Interface format string of `type` (for a dictionary: its index
/// type's, the values travel in ArrowSchema.dictionary).  Throws
/// invalid_argument for a type id outside the enum.  No memory, no stream.
CUARROW_EXPORT std::string to_format(const data_type& type);

/// Parse one format string.  Nested types come back without children (the
/// ArrowSchema's children supply them); for "+ud:"/"+us:" the type codes are
/// filled.  `path` names the field in errors.  Throws invalid_format.
CUARROW_EXPORT data_type parse_format(std::string_view format, std::string_view path = "field");

// ---- schemas --------------------------------------------------------------

/// Export a field (name, type, nullability, metadata; dictionaries as
/// ArrowSchema.dictionary).  Throws invalid_argument for an invalid type
/// (e.g. a dictionary without value type) or a null `out`.  No memory is
/// read and no stream used (as for every schema function here).
CUARROW_EXPORT void export_field(const field& f, ArrowSchema* out);
/// A nameless, nullable field of `type`.
CUARROW_EXPORT void export_type(const data_type& type, ArrowSchema* out);
/// A struct ("+s") with one child per field and the schema's metadata.
CUARROW_EXPORT void export_schema(const arrow::schema& s, ArrowSchema* out);

/// What an imported ArrowSchema may claim.  A schema is a tree: a node
/// reached twice (children shared between parents, a DAG, or a cycle) is
/// refused, as are trees of more than `max_schema_nodes` nodes (children
/// and dictionaries) or nested more than `max_schema_depth` levels.  The
/// metadata blob carries no length, so what it claims is bounded before
/// anything is read: at most `max_metadata_pairs` pairs, each key and value
/// at most `max_metadata_length` bytes, `max_metadata_bytes` in all.
inline constexpr std::int64_t max_schema_nodes = std::int64_t{1} << 20;
inline constexpr int max_schema_depth = 64;
inline constexpr std::int32_t max_metadata_pairs = std::int32_t{1} << 16;
inline constexpr std::int32_t max_metadata_length = std::int32_t{1} << 26;
inline constexpr std::int64_t max_metadata_bytes = std::int64_t{1} << 26;

/// Read without taking ownership.  Throws invalid_format (bad format string,
/// with the field path), invalid_data (released struct, wrong number of
/// children, shared or cyclic children, too many nodes or levels, bad or
/// out-of-bounds metadata encoding, bad flags).
CUARROW_EXPORT field read_field(const ArrowSchema& in);
CUARROW_EXPORT arrow::schema read_schema(const ArrowSchema& in);
/// Whether `in` can describe a record batch: a struct ("+s"), the one
/// format read_schema takes.  Reads the format only (NULL: false), so it
/// says nothing of the rest of the schema.
CUARROW_EXPORT bool is_struct_schema(const ArrowSchema& in) noexcept;
/// Read, then release `in` (always, even on failure).
CUARROW_EXPORT field import_field(ArrowSchema* in);
CUARROW_EXPORT arrow::schema import_schema(ArrowSchema* in);

// ---- arrays: the C Data Interface (host memory) ----------------------------

struct import_options {
  validation_level validation = validation_level::cheap;
};

/// Export an array whose buffers are host-accessible (cpu, cuda_host,
/// cuda_managed); host_access_error for device memory (use
/// export_device_array, or to_host first).  With `out_schema`, its type too.
/// Also throws invalid_argument (null `out`), invalid_data (buffers or
/// children that do not match the type, buffers in several places).  No
/// stream, no synchronization: pinned or managed memory is exported as it
/// is, so work writing it must be complete.
CUARROW_EXPORT void export_array(const array_data& array, ArrowArray* out, ArrowSchema* out_schema = nullptr);
CUARROW_EXPORT void export_record_batch(const record_batch& batch, ArrowArray* out, ArrowSchema* out_schema = nullptr);

/// Whether Arrow C++'s C Data importer (pyarrow's) reads the bytes of an
/// exported array of this type, not only its structure: the last offset of
/// binary and string arrays (the data buffer's size is not in the struct),
/// and the types not known to be safe (views, unions, run-end encoded, map,
/// whose entries' nulls it counts).  An export of host data whose copy is
/// still in flight (to_host_async) is handed to it only after wait() when
/// this is true; fixed-width values, lists' offsets and struct children
/// are not read.
CUARROW_EXPORT bool importer_reads_values(const data_type& type);
/// The same for a record batch exported as its struct: true if it is for a
/// column's type.
CUARROW_EXPORT bool importer_reads_values(const arrow::schema& s);

/// Import a host array of `type` (pyarrow's __arrow_c_array__).  Consumes `in`.
/// Throws invalid_argument (null `in`), invalid_data (released, malformed),
/// invalid_format (a bad schema).  No stream: the memory is host memory.
CUARROW_EXPORT array_data import_array(ArrowArray* in, const data_type& type, const import_options& options = {});
/// Consumes both `in` and `schema`.
CUARROW_EXPORT array_data import_array(ArrowArray* in, ArrowSchema* schema, const import_options& options = {});
CUARROW_EXPORT record_batch import_record_batch(ArrowArray* in, const arrow::schema& schema,
                                                const import_options& options = {});
CUARROW_EXPORT record_batch import_record_batch(ArrowArray* in, ArrowSchema* schema,
                                                const import_options& options = {});

// ---- arrays: the C Device Data Interface -----------------------------------

struct export_options {
  /// Synchronize `s` before returning and export no sync event.
  bool synchronize = false;
  /// Where an array without any buffer (a null array, an empty one) lives:
  /// it has no memory to say so, its holder does.  Arrays with buffers are
  /// labelled by their buffers.
  placement if_no_buffers{};
};

/// Export an array whose buffers are all on one device (or all on the
/// host): device_type and device_id from the buffers (placement_of), the
/// sync event recorded on `s`, the stream the array was produced on.
///
/// What every export gives (host ones too), as Arrow C++ imports it: an
/// empty array at offset 0 without nulls, and for an empty binary / list /
/// map array whose offsets buffer is empty, one zero offset where the array
/// lives (device memory filled on `s`) instead of NULL.  A non-empty
/// array's offsets buffer too small for its length is invalid_data.
///
/// Returns at once: the consumer waits on the event (with
/// options.synchronize, `s` is synchronized instead).  A CPU array carries
/// no event and is exported as it is.  Throws invalid_argument (null
/// `out`), invalid_data (a malformed tree, buffers in several places),
/// cuda_error (event, fill).
CUARROW_EXPORT void export_device_array(const array_data& array, stream_view s, ArrowDeviceArray* out,
                                        ArrowSchema* out_schema = nullptr, const export_options& options = {});
CUARROW_EXPORT void export_device_record_batch(const record_batch& batch, stream_view s, ArrowDeviceArray* out,
                                               ArrowSchema* out_schema = nullptr, const export_options& options = {});

/// Import a device array of `type`; `s` waits for its sync event and orders
/// the batched read of last offsets.  Consumes `in`.  Throws invalid_data
/// (released, malformed), invalid_argument (unsupported device type),
/// invalid_format (a bad schema), cuda_error.  The wait does not block the
/// host; reading last offsets and validating device memory synchronize `s`
/// (once per batched read).  The result is valid in the order of `s`.
CUARROW_EXPORT array_data import_device_array(ArrowDeviceArray* in, const data_type& type, stream_view s = {},
                                              const import_options& options = {});
CUARROW_EXPORT array_data import_device_array(ArrowDeviceArray* in, ArrowSchema* schema, stream_view s = {},
                                              const import_options& options = {});
CUARROW_EXPORT record_batch import_device_record_batch(ArrowDeviceArray* in, const arrow::schema& schema,
                                                       stream_view s = {}, const import_options& options = {});
CUARROW_EXPORT record_batch import_device_record_batch(ArrowDeviceArray* in, ArrowSchema* schema, stream_view s = {},
                                                       const import_options& options = {});

// ---- arrays and batches as their holders declare them ------------------------

/// Import a host array under the field `schema` describes (its name,
/// nullability and metadata: an extension type lives there), declared in
/// host memory.  Consumes `in`; `schema` is read, not released.  Errors as
/// import_array.
CUARROW_EXPORT placed_array import_placed_array(ArrowArray* in, const ArrowSchema& schema,
                                                const import_options& options = {});
CUARROW_EXPORT placed_batch import_placed_batch(ArrowArray* in, const ArrowSchema& schema,
                                                const import_options& options = {});
/// Import a device array under `schema`'s field, declared where the struct
/// says it lives (its device_type and device_id: what an array without any
/// buffer reports).  Consumes `in`; `schema` is read, not released.  Stream
/// and errors as import_device_array.
CUARROW_EXPORT placed_array import_placed_device_array(ArrowDeviceArray* in, const ArrowSchema& schema,
                                                       stream_view s = {}, const import_options& options = {});
CUARROW_EXPORT placed_batch import_placed_device_batch(ArrowDeviceArray* in, const ArrowSchema& schema,
                                                       stream_view s = {}, const import_options& options = {});
/// export_device_array of a placed array, labelled with its declared
/// placement when it has no buffer; `out_schema` (when given) receives
/// its field, metadata included.  For a batch, its schema.
CUARROW_EXPORT void export_device_array(const placed_array& array, stream_view s, ArrowDeviceArray* out,
                                        ArrowSchema* out_schema = nullptr);
CUARROW_EXPORT void export_device_array(const placed_batch& batch, stream_view s, ArrowDeviceArray* out,
                                        ArrowSchema* out_schema = nullptr);

// ---- streams ---------------------------------------------------------------

/// Produces the next batch (or array), or nullopt at the end.  Exceptions
/// become the stream's error (errno EINVAL for invalid_argument, ENOMEM for
/// out_of_memory, EIO otherwise) with get_last_error giving the message.
using batch_source = std::function<std::optional<record_batch>()>;
using array_source = std::function<std::optional<array_data>()>;
/// A source yielding `items` in order, moved out as they go (a table's
/// batches, a chunked array's chunks).
CUARROW_EXPORT batch_source source_of(std::vector<record_batch> items);
CUARROW_EXPORT array_source source_of(std::vector<array_data> items);
/// The same over placed items: their data, in order (the placements are
/// the stream's to declare).
CUARROW_EXPORT batch_source source_of(std::vector<placed_batch> items);
CUARROW_EXPORT array_source source_of(std::vector<placed_array> items);

/// The stream exports below throw invalid_argument for a null `out` or an
/// empty source; the source runs when the consumer calls get_next, and
/// each item is exported then, as export_record_batch / export_array /
/// export_device_array do it (device items: an event recorded on
/// `producer`, which the consumer waits on).
///
/// An ArrowArrayStream of host batches (export_record_batch each).
CUARROW_EXPORT void export_array_stream(arrow::schema s, batch_source next, ArrowArrayStream* out);
/// An ArrowArrayStream of host arrays of `f`'s type, any type (a chunked
/// array): get_schema gives the field (name, nullability, metadata).
CUARROW_EXPORT void export_array_stream(field f, array_source next, ArrowArrayStream* out);
/// An ArrowDeviceArrayStream of batches in `where`'s memory, each exported
/// with an event recorded on `producer` (which must outlive the stream).  A
/// batch without any buffer is labelled `where`; one in other memory is a
/// stream error (EINVAL).
CUARROW_EXPORT void export_device_array_stream(arrow::schema s, batch_source next, const placement& where,
                                               stream_view producer, ArrowDeviceArrayStream* out);
/// The same in `type` memory of the producer's device (device 0 for a
/// default stream).
CUARROW_EXPORT void export_device_array_stream(arrow::schema s, batch_source next, device_type type,
                                               stream_view producer, ArrowDeviceArrayStream* out);
/// An ArrowDeviceArrayStream of arrays of `f`'s type, any type (a chunked
/// array), in `where`'s memory, as the batch stream above.
CUARROW_EXPORT void export_device_array_stream(field f, array_source next, const placement& where, stream_view producer,
                                               ArrowDeviceArrayStream* out);

/// How a stream reader reads a stream's items.
enum class stream_items : std::uint8_t {
  batches,   // record batches: the schema must be a struct ("+s")
  arrays,    // arrays of the schema's type, whatever it is (a chunked array)
  by_schema  // batches for a struct schema, arrays otherwise
};

/// A stream's items read to its end (read_all): its batches when the
/// reader reads batches, its arrays (each under the stream's field)
/// otherwise, each with its placement: for a device stream what the item's
/// device array declared (what labels an item without buffers), for a host
/// stream cpu (-1).
struct stream_contents {
  std::vector<placed_batch> batches;
  std::vector<placed_array> arrays;
};

// Streams come from outside and are checked: a released stream, NULL
// get_schema or get_next callbacks and a released schema from get_schema
// are invalid_data ("ArrowArrayStream" or "ArrowDeviceArrayStream"); a
// failing callback is an error naming it with its errno and the
// producer's message (get_last_error may be NULL); an item in other memory
// than the stream declared is invalid_data.  The items are imported with
// the import's checks.

/// Consumes an ArrowArrayStream.  Not thread-safe (as the C stream).
class CUARROW_EXPORT array_stream_reader {
 public:
  /// Takes ownership of `in` (always); reads its schema.  Throws
  /// invalid_argument (null `in`), invalid_data and invalid_format (as
  /// above), error (get_schema failed).  No stream.
  explicit array_stream_reader(ArrowArrayStream* in, const import_options& options = {},
                               stream_items items = stream_items::batches);
  ~array_stream_reader();
  array_stream_reader(array_stream_reader&&) noexcept;
  array_stream_reader& operator=(array_stream_reader&&) noexcept;

  /// Whether the items are record batches (next) or arrays (next_array).
  bool reads_batches() const noexcept;
  /// The batches' schema (empty when reading arrays).
  const arrow::schema& schema() const noexcept;
  /// The arrays' field (empty when reading batches).
  const field& root_field() const noexcept;
  /// The producer's ArrowSchema as it gave it (read, not consumed), moved
  /// out to the caller to hand on: it keeps what the model does not (e.g. a
  /// dictionary value type's metadata).  Later calls give a released one.
  owned_schema take_c_schema();
  /// The next batch, nullopt at the end (invalid_argument when reading
  /// arrays).  Throws error with the producer's message when get_next fails.
  std::optional<record_batch> next();
  /// The next array, nullopt at the end (invalid_argument when reading
  /// batches).
  std::optional<array_data> next_array();
  /// Every item left, batches or arrays as the reader reads them, each
  /// placed in cpu memory.
  stream_contents read_all();

 private:
  struct state;
  std::unique_ptr<state> state_;
};

/// Consumes an ArrowDeviceArrayStream.  Not thread-safe.
class CUARROW_EXPORT device_array_stream_reader {
 public:
  /// Takes ownership of `in` (always); reads its schema.  Throws as
  /// array_stream_reader's constructor.  No stream.
  explicit device_array_stream_reader(ArrowDeviceArrayStream* in, const import_options& options = {},
                                      stream_items items = stream_items::batches);
  ~device_array_stream_reader();
  device_array_stream_reader(device_array_stream_reader&&) noexcept;
  device_array_stream_reader& operator=(device_array_stream_reader&&) noexcept;

  bool reads_batches() const noexcept;
  const arrow::schema& schema() const noexcept;
  const field& root_field() const noexcept;
  owned_schema take_c_schema();
  /// The stream's declared device type.
  device_type type() const noexcept;
  /// The next batch, valid in the order of `s` (which waited on its event;
  /// `s` is synchronized only to read device memory, as
  /// import_device_array does).  `where` receives the placement its device array
  /// declared (what labels an item without buffers).  Throws as
  /// import_device_array, error (get_next failed).
  std::optional<record_batch> next(stream_view s = {}, placement* where = nullptr);
  std::optional<array_data> next_array(stream_view s = {}, placement* where = nullptr);
  /// Every item left, batches or arrays as the reader reads them, each valid
  /// in the order of `s`, with the placement each declared.
  stream_contents read_all(stream_view s = {});

 private:
  struct state;
  std::unique_ptr<state> state_;
};

/// A device stream yielding each batch of `in` copied to `ctx`'s device, one
/// batched transfer per batch on a stream the adapter owns, each exported
/// with its event.  Consumes `in`.  Throws as array_stream_reader's
/// constructor, cuda_error (creating the stream).
CUARROW_EXPORT void to_device(ArrowArrayStream* in, const context& ctx, ArrowDeviceArrayStream* out,
                              const array_transfer_options& options = {});
/// A host stream yielding each batch of `in` copied to host memory, each
/// complete when handed out (read and copied on the legacy default stream).
/// Consumes `in`.  Throws as device_array_stream_reader's constructor.
CUARROW_EXPORT void to_host(ArrowDeviceArrayStream* in, ArrowArrayStream* out,
                            const array_transfer_options& options = {});

/// How a device_readahead reads ahead.
struct device_readahead_options {
  /// Transfers done or in progress ahead of the batch the caller holds,
  /// each ONE batched transfer (to_device) of consecutive batches; the
  /// device memory held ahead is about depth * read_bytes.  0: nothing is
  /// read ahead and no thread started; next() reads and moves its batch
  /// itself.  At least 0.
  int depth = 2;
  /// A transfer takes batches until their buffers (their whole sizes, as
  /// pyarrow's get_total_buffer_size counts them) would pass this many
  /// bytes, one batch at least and 256 at most; the first transfer takes
  /// one batch, so that the first next() returns as soon as one batch is
  /// on the device.  With depth 0, one batch a transfer.  At least 1.
  /// Small batches cost a transfer and a synchronization each when moved
  /// one by one: on an H100, 226 batches of 10 MB from a memory-mapped
  /// pyarrow reader took 0.93 x pyarrow's per-batch loop moved one a
  /// transfer, 0.76 x grouped up to 64 MiB.
  std::int64_t read_bytes = std::int64_t{64} << 20;
  /// How much of each batch is checked when it is imported (the copy then
  /// trusts it).
  validation_level validation = validation_level::cheap;
};

/// The batches of a host ArrowArrayStream (a pyarrow RecordBatchReader, a
/// dataset scanner, a Parquet or CSV reader, another library's stream)
/// read and moved to `ctx`'s device on a thread of its own, ahead of the
/// caller, so that producing and copying the next batches overlaps what
/// the caller does with the batches before (a training step, a kernel).
/// Consecutive batches, up to options.read_bytes, are moved together in
/// one batched transfer (to_device) on a stream of its own (non-blocking),
/// synchronized before they are handed out: a batch from next() needs no
/// wait on any stream.  The stream's get_next is
/// called from that thread, one call at a time (a producer that needs a
/// lock the caller holds, such as Python's GIL, must not be waited for
/// with that lock held).  next() and close() may be called from any
/// thread (one at a time is served).  next(): when the producer's
/// get_next, the import or the copy fails, every batch before is still
/// returned (a failed transfer of several batches is done again batch by
/// batch); then that error (error with the producer's message,
/// invalid_data, out_of_memory, cuda_error ...) is thrown, by that call and
/// every later one, and nothing more is read.  close() waits for the
/// transfer in progress; the stream is released with this object.
/// placement(): CUDA memory of the context's device.
class CUARROW_EXPORT device_readahead : public readahead {
 public:
  /// Takes ownership of `in` (always); reads its schema, which must be a
  /// struct's (record batches).  Throws as array_stream_reader's
  /// constructor; invalid_argument for options out of range; cuda_error
  /// when the copies' stream cannot be made.
  device_readahead(ArrowArrayStream* in, context ctx, device_readahead_options options = {});
  /// close().
  ~device_readahead();

  /// The batches' schema.
  const arrow::schema& schema() const noexcept;
  /// The producer's ArrowSchema as it gave it (what the model does not
  /// keep, e.g. a dictionary value type's metadata, included), moved out
  /// to the caller; later calls give a released one.
  owned_schema take_c_schema();

 private:
  struct state;
  std::unique_ptr<state> state_;
};

// ---- small helpers ----------------------------------------------------------

/// ARROW_DEVICE_* code of a device type, and back (invalid_argument naming
/// the code for one cuarrow does not handle, e.g. "ARROW_DEVICE_ROCM (10)").
CUARROW_EXPORT ArrowDeviceType to_arrow_device_type(device_type t) noexcept;
CUARROW_EXPORT device_type from_arrow_device_type(ArrowDeviceType t);

}  // namespace cuarrow::arrow
