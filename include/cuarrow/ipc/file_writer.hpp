// Writing record batches as an Arrow IPC stream or file into a file at a
// path, batch by batch: what pyarrow.ipc.new_file / new_stream and
// feather.write_feather write, from device (or host) record batches.
//
// Each write() call's messages are written together: their metadata from the
// host, their bodies from where the batches' buffers are.  Device buffers
// travel through the pinned staging pipeline (copy.hpp's
// transfer_options), each chunk written into the file from the pinned slot
// the DMA filled, the bodies of all the batches of one call in one
// pipeline job (write(span)); nothing is assembled in device memory and
// nothing is kept after write() returns.
// Uncompressed, the file holds the bytes stream_writer produces for the
// same batches, which are the bytes pyarrow writes.  With a codec
// (write_options::compression) each buffer is copied to the host,
// compressed there on host threads (compress_body) and written, as
// IpcWriteOptions(compression="lz4" / "zstd") writes it.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "cuarrow/arrow/array.hpp"
#include "cuarrow/export.hpp"
#include "cuarrow/ipc/stream.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow::ipc {

class CUARROW_EXPORT file_writer {
 public:
  using format = stream_writer::format;

  /// Creates `path` (or truncates the file there) and writes the start of
  /// the stream or file (magic, schema).  `footer_metadata`: a file's footer
  /// custom metadata (new_file(metadata=...)).  Device memory is read on
  /// `s`.  The arguments are stream_writer's, in its order.  Throws io_error (the file cannot be created or written:
  /// the path and the reason), invalid_argument (a schema IPC cannot carry), cuarrow::error (this build lacks the
  /// codec).
  file_writer(std::string path, arrow::schema schema, format f = format::file, stream_view s = {},
              arrow::key_value_metadata footer_metadata = {}, write_options options = {});
  /// A writer not closed (close() not called, or a failure) removes its
  /// file: an IPC stream or file without its end is not one.
  ~file_writer();
  file_writer(const file_writer&) = delete;
  file_writer& operator=(const file_writer&) = delete;

  /// Writes a batch (its schema must equal the writer's; invalid_argument),
  /// with the dictionaries it needs first (as stream_writer does), after
  /// the work queued on `s`; its buffers are no longer needed when write()
  /// returns.  Throws invalid_argument, cuda_error, io_error.  A failure
  /// ends the writer (the file is removed and later calls throw
  /// invalid_argument), except a batch whose schema differs, which writes
  /// nothing.
  void write(const arrow::record_batch& batch, const arrow::key_value_metadata& custom_metadata = {});

  /// Writes every batch, in order, as write(batch) would one by one (the
  /// same bytes), but the bodies move together: every batch's message is
  /// laid out first (metadata written from the host, each body's place in
  /// the file known before any of its bytes move, since an uncompressed
  /// layout does not depend on the data), then ONE staging-pipeline job
  /// copies every device piece of every body, its workers writing their
  /// pinned slots into the file in parallel (pwrite at each piece's
  /// offset).  With a codec, the batches go in groups of about 1 GiB of
  /// uncompressed body: each group's buffers are copied to the host at
  /// once, compressed on the host threads together (compress_bodies), then
  /// written.  `custom_metadata`: empty, or one per batch.  The schemas and
  /// the metadata count are checked first (invalid_argument, nothing
  /// written, the writer stays usable); any later failure ends the writer
  /// as write(batch) does.
  void write(std::span<const arrow::record_batch> batches,
             std::span<const arrow::key_value_metadata> custom_metadata = {});
  /// The same, of the batches at these addresses (no copy of them).
  void write(std::span<const arrow::record_batch* const> batches,
             std::span<const arrow::key_value_metadata> custom_metadata = {});

  /// Writes the end-of-stream marker (and a file's footer) and closes the
  /// file.  Throws io_error (the file is then removed); a second close()
  /// does nothing.
  void close();

  const std::string& path() const noexcept;
  /// Bytes written so far (after close(): the file's size).
  std::int64_t bytes_written() const noexcept;
  /// Where the writer's time went so far (write_stats; close() included
  /// once run).
  write_stats stats() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace cuarrow::ipc
