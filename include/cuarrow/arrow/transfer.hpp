// Moving whole arrays and record batches between host and device.
//
// One transfer is one batch, whatever the shape of the tree:
//   1. the source is validated (cheap by default; see validate.hpp).  For a
//      source in device memory this is the only read before the copies: one
//      batched gather of the offsets that sizing needs, one synchronization;
//   2. ONE allocation holds every destination buffer (64-byte aligned slices
//      of it; the memory is freed when the last slice goes);
//   3. every buffer of the tree (children, dictionaries, variadic buffers)
//      is one piece of ONE batched copy (copy_batch_async) on `s`: sources
//      in ordinary pageable host memory travel together through the core's
//      staging pipeline once they add up to staging_threshold_bytes (a
//      thousand 1 MiB columns move like one 1 GiB buffer), neighbours in
//      the same allocations share a DMA, and one host function keeps the
//      sources alive;
//   4. the synchronous forms synchronize `s` once at the end; the _async
//      forms return at once and the result is valid in the order of `s`
//      (staged pieces are complete when they return: the pipeline waits
//      for its own DMAs, so pageable sources may be reused at once).
// Nothing synchronizes per buffer.

// Sliced arrays copy only what they reference where the layout allows it:
// fixed-width values, offsets, views, type ids and validity bitmaps are cut
// to [offset, offset + length) (the new offset keeps the bit position within
// the first byte, so validity bits line up); data buffers are cut at the
// last offset.  Arrays whose offset propagates to their children (struct,
// fixed-size list, sparse union, run-end encoded) keep their offset and copy
// their own buffers up to offset + length.  The result equals the source
// (arrow::equals) in every case.
//
// The source's buffers stay alive until the copies have run, even if the
// caller drops them (copy_async's guarantee).  The null count is carried
// over unchanged.  Thread-safe; each call uses only its arguments.
#pragma once

#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "cuarrow/arrow/array.hpp"
#include "cuarrow/arrow/validate.hpp"
#include "cuarrow/context.hpp"
#include "cuarrow/export.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow::arrow {

struct array_transfer_options {
  /// How much of the source to check before copying (none for data that
  /// cuarrow produced itself).
  validation_level validation = validation_level::cheap;
};

/// A copy of `src` (host, pinned or another device's memory) in device
/// memory of `ctx`, queued on `s`.  `s` must belong to `ctx`'s device or to
/// the source's (device_mismatch otherwise).  Throws invalid_data for a
/// malformed source (before any copy), out_of_memory, cuda_error.  Returns
/// before the copies finish: use the result on `s`, or synchronize `s`
/// before other streams or the host read it.  (Validating a device source
/// may synchronize `s`, before the copies.)
CUARROW_EXPORT array_data to_device_async(const array_data& src, const context& ctx, stream_view s,
                                          const array_transfer_options& options = {});
/// to_device_async, then one synchronization of `s`.
CUARROW_EXPORT array_data to_device(const array_data& src, const context& ctx, stream_view s = {},
                                    const array_transfer_options& options = {});
CUARROW_EXPORT record_batch to_device_async(const record_batch& src, const context& ctx, stream_view s,
                                            const array_transfer_options& options = {});
CUARROW_EXPORT record_batch to_device(const record_batch& src, const context& ctx, stream_view s = {},
                                      const array_transfer_options& options = {});

/// `src` in host memory, complete on return (one synchronization of `s`).
/// Device memory is copied into pinned memory from cuarrow's result pool
/// (type cuda_host; the DMA engine writes it directly) when the pool has
/// room, else into ordinary memory (type cpu).  A source already in
/// host-accessible memory (cpu, cuda_host, cuda_managed) is returned as is,
/// buffers shared, after `s` is synchronized; so are such columns of a batch.
/// `s` orders the source: the copies run on it when it belongs to the
/// source's device; a stream of another device is synchronized first and
/// the copies run on the source device's legacy default stream.  Throws
/// invalid_data, out_of_memory, std::bad_alloc, cuda_error.
///
/// The result is what host code (pyarrow, equals(), the caller) reads
/// without further checks, so unless options.validation is none, every
/// value a host reader indexes with is checked on the host before it is
/// returned: offsets non-decreasing within their data or child, list view
/// ranges, union type ids and dense offsets, view lengths and buffer
/// indexes, dictionary indices, run ends, map entries and keys without
/// nulls.  Data that would make a reader go out of bounds throws
/// invalid_data (naming the path and the element) instead; the source's
/// structure is validated first, as options.validation says.  (Results in
/// ordinary memory a source already had are the caller's own and are not
/// checked.)
CUARROW_EXPORT array_data to_host(const array_data& src, stream_view s = {},
                                  const array_transfer_options& options = {});
CUARROW_EXPORT record_batch to_host(const record_batch& src, stream_view s = {},
                                    const array_transfer_options& options = {});

/// Many arrays (the chunks of a chunked array) or record batches (the
/// batches of a table) at once: one validation, every buffer of all of them
/// in ONE batched copy, one synchronization for the synchronous forms (each
/// array or batch still gets an allocation of its own).  Errors name the
/// array or batch ("batch 3: column \"x\" ...").
CUARROW_EXPORT std::vector<array_data> to_device_async(std::span<const array_data> src, const context& ctx,
                                                       stream_view s, const array_transfer_options& options = {});
CUARROW_EXPORT std::vector<array_data> to_device(std::span<const array_data> src, const context& ctx,
                                                 stream_view s = {}, const array_transfer_options& options = {});
CUARROW_EXPORT std::vector<record_batch> to_device_async(std::span<const record_batch> src, const context& ctx,
                                                         stream_view s, const array_transfer_options& options = {});
CUARROW_EXPORT std::vector<record_batch> to_device(std::span<const record_batch> src, const context& ctx,
                                                   stream_view s = {}, const array_transfer_options& options = {});
/// to_device of arrays and batches as their holders declare them: each
/// result keeps its source's field (or schema) and is declared on ctx's
/// device.  Streams and errors as above.
CUARROW_EXPORT std::vector<placed_array> to_device(std::span<const placed_array> src, const context& ctx,
                                                   stream_view s = {}, const array_transfer_options& options = {});
CUARROW_EXPORT std::vector<placed_batch> to_device(std::span<const placed_batch> src, const context& ctx,
                                                   stream_view s = {}, const array_transfer_options& options = {});
/// to_host of each, with one batched copy and one synchronization for all.
/// Data to be copied must live on one device (invalid_data otherwise).
CUARROW_EXPORT std::vector<array_data> to_host(std::span<const array_data> src, stream_view s = {},
                                               const array_transfer_options& options = {});
CUARROW_EXPORT std::vector<record_batch> to_host(std::span<const record_batch> src, stream_view s = {},
                                                 const array_transfer_options& options = {});

/// Host copies in flight (to_host_async).  The data's structure (types,
/// lengths, buffers and their addresses) is final at once, so it can be
/// wrapped or exported while the DMA runs; its BYTES may be read only after
/// wait().  Dropping the object without waiting is safe: the source and
/// destination memory stay alive until the copies have run (copy_async's
/// guarantee), and nothing leaks.
template <class T>
class host_transfer {
 public:
  /// `wait` completes the transfer of `data` (and may check it).
  host_transfer(T data, std::function<void(const T&)> wait) : data_(std::move(data)), wait_(std::move(wait)) {}
  host_transfer(host_transfer&&) noexcept = default;
  host_transfer& operator=(host_transfer&&) noexcept = default;

  /// The data, whose bytes are valid once wait() has returned.
  const T& data() const noexcept { return data_; }
  /// Waits for the copies (one synchronization; later calls return at
  /// once), then checks what host readers will index with (see to_host).
  /// Throws cuda_error if the stream failed, invalid_data if the data would
  /// make a host reader go out of bounds (the data must then not be used).
  void wait() {
    if (!wait_) return;
    std::function<void(const T&)> w = std::move(wait_);
    wait_ = nullptr;
    w(data_);
  }
  /// wait(), then the data itself.
  T get() && {
    wait();
    return std::move(data_);
  }

 private:
  T data_;
  std::function<void(const T&)> wait_;
};

/// to_host of each, returning as soon as the copies are queued (after the
/// one validation; staged copies into ordinary memory, used when the
/// result pool is full, are complete on return).  Use it to build what
/// refers to the data (a pyarrow table, an export) while the DMA runs.
/// Streams and errors as to_host; the checks of the results are made by
/// wait().
CUARROW_EXPORT host_transfer<std::vector<array_data>> to_host_async(std::span<const array_data> src, stream_view s = {},
                                                                    const array_transfer_options& options = {});
CUARROW_EXPORT host_transfer<std::vector<record_batch>> to_host_async(std::span<const record_batch> src,
                                                                      stream_view s = {},
                                                                      const array_transfer_options& options = {});

/// to_host_async for data whose C Data export goes to Arrow C++ (pyarrow)
/// at once: when its importer reads bytes of any item
/// (importer_reads_values: binary and string offsets, ...), the copies are
/// waited for before returning, so an export of the result may be handed to
/// the importer before wait() either way; otherwise as to_host_async.
CUARROW_EXPORT host_transfer<std::vector<array_data>> to_host_for_export(std::span<const array_data> src,
                                                                         stream_view s = {},
                                                                         const array_transfer_options& options = {});
CUARROW_EXPORT host_transfer<std::vector<record_batch>> to_host_for_export(std::span<const record_batch> src,
                                                                           stream_view s = {},
                                                                           const array_transfer_options& options = {});
/// The same for the data of arrays and batches as their holders declare
/// them (the results are host data: their placement is the host's).
CUARROW_EXPORT host_transfer<std::vector<array_data>> to_host_for_export(std::span<const placed_array> src,
                                                                         stream_view s = {},
                                                                         const array_transfer_options& options = {});
CUARROW_EXPORT host_transfer<std::vector<record_batch>> to_host_for_export(std::span<const placed_batch> src,
                                                                           stream_view s = {},
                                                                           const array_transfer_options& options = {});

/// A copy of `src` in pinned host memory of `ctx` (device type cuda_host),
/// complete on return (copied on `s` as to_host copies).  The result is not
/// checked as to_host's is.  Throws invalid_data, out_of_memory,
/// std::bad_alloc, cuda_error.
CUARROW_EXPORT array_data to_pinned(const array_data& src, const context& ctx, stream_view s = {},
                                    const array_transfer_options& options = {});

}  // namespace cuarrow::arrow
