// IPC streams and files held in memory (include/cuarrow/ipc/stream.hpp):
// pyarrow's golden streams and files (tests/ipc/make_golden.py) read from
// host and device memory, written again byte for byte, and hostile sources.
#include "cuarrow/ipc/stream.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "../fault_api.hpp"
#include "arrow/arrow_test_util.hpp"
#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/ipc/metadata.hpp"
#include "cuarrow/memory_resource.hpp"
#include "ipc_test_util.hpp"
#include "test_data.hpp"
#include "test_support.hpp"

namespace cuarrow_ipc_stream_test {
namespace {

using namespace cuarrow::arrow;      // NOLINT
using namespace cuarrow_arrow_test;  // NOLINT
namespace ipc = cuarrow::ipc;

using test_data::load;

cuarrow::buffer on_host(const std::vector<std::byte>& bytes) {
  cuarrow::buffer b = cuarrow::allocate_host(static_cast<std::int64_t>(bytes.size()));
  if (!bytes.empty()) std::memcpy(b.mutable_host_data(), bytes.data(), bytes.size());
  return b;
}

cuarrow::buffer on_device(const std::vector<std::byte>& bytes) {
  return cuarrow::copy_to_device(cuarrow::context::get(0), bytes.data(), static_cast<std::int64_t>(bytes.size()));
}

// Where two byte strings first differ ("" when equal), for failure messages.
std::string first_difference(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  if (i == a.size() && i == b.size()) return "";
  return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size()) + ", first difference at byte " +
         std::to_string(i);
}

std::vector<std::byte> to_bytes(const cuarrow::buffer& b) {
  std::vector<std::byte> out(static_cast<std::size_t>(b.size()));
  if (b.size() > 0) cuarrow::copy_to_host(out.data(), b, 0, b.size());
  return out;
}

// Uncompressed streams whose every batch pyarrow wrote from the same
// dictionaries (or none): reading and writing again gives the same bytes.
const char* const kStreams[] = {"primitives.arrows",  "binaries.arrows",     "nested.arrows",      "metadata.arrows",
                                "empty_batch.arrows", "empty_schema.arrows", "dictionaries.arrows"};
const char* const kFiles[] = {"file_primitives.arrow", "file_dictionaries.arrow"};

TEST(IpcStream, PyarrowStreamsAreWrittenAgainByteForByte) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  for (const char* name : kStreams) {
    SCOPED_TRACE(name);
    const std::vector<std::byte> golden = load(name);
    ipc::stream_reader r(on_host(golden));
    ipc::stream_writer w(r.schema().schema, ctx);
    while (std::optional<ipc::batch_with_metadata> b = r.read_next_with_custom_metadata()) {
      w.write(b->batch, b->custom_metadata);
    }
    EXPECT_EQ(first_difference(to_bytes(w.finish()), golden), "");
  }
}

TEST(IpcStream, PyarrowFilesAreWrittenAgainByteForByte) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  for (const char* name : kFiles) {
    SCOPED_TRACE(name);
    const std::vector<std::byte> golden = load(name);
    ipc::file_reader r(on_host(golden));
    ASSERT_GT(r.num_record_batches(), 0);
    ipc::stream_writer w(r.schema().schema, ctx, ipc::stream_writer::format::file, {}, r.footer().custom_metadata);
    for (int i = 0; i < r.num_record_batches(); ++i) {
      const ipc::batch_with_metadata b = r.read_batch_with_custom_metadata(i);
      w.write(b.batch, b.custom_metadata);
    }
    EXPECT_EQ(first_difference(to_bytes(w.finish()), golden), "");
  }
}

TEST(IpcStream, WritersFromOneEncodedSchemaWriteWhatPyarrowWrote) {
  // An encoded_schema shared by several writers, streams and files: each
  // writes the golden bytes, as a writer given the schema itself does.
  const cuarrow::context ctx = cuarrow::context::get(0);
  for (const char* name : kStreams) {
    SCOPED_TRACE(name);
    const std::vector<std::byte> golden = load(name);
    ipc::stream_reader r(on_host(golden));
    std::vector<ipc::batch_with_metadata> batches;
    while (std::optional<ipc::batch_with_metadata> b = r.read_next_with_custom_metadata()) {
      batches.push_back(std::move(*b));
    }
    const ipc::encoded_schema encoded(r.schema().schema);
    EXPECT_TRUE(encoded.schema() == r.schema().schema);
    for (int k = 0; k < 2; ++k) {
      ipc::stream_writer w(encoded, ctx);
      for (const auto& b : batches) w.write(b.batch, b.custom_metadata);
      EXPECT_EQ(first_difference(to_bytes(w.finish()), golden), "");
    }
  }
  const std::vector<std::byte> golden = load("file_primitives.arrow");
  ipc::file_reader r(on_host(golden));
  const ipc::encoded_schema encoded(r.schema().schema);
  ipc::stream_writer w(encoded, ctx, ipc::stream_writer::format::file, {}, r.footer().custom_metadata);
  for (int i = 0; i < r.num_record_batches(); ++i) {
    const ipc::batch_with_metadata b = r.read_batch_with_custom_metadata(i);
    w.write(b.batch, b.custom_metadata);
  }
  EXPECT_EQ(first_difference(to_bytes(w.finish()), golden), "");
}

TEST(IpcStream, AnEncodedSchemaRefusesWhatAWriterRefuses) {
  // A dictionary whose values are dictionary-encoded: not written yet, by
  // either way in.
  schema s;
  s.fields.emplace_back("d", dictionary(int32(), dictionary(int8(), utf8())));
  EXPECT_THROW(ipc::encoded_schema{s}, cuarrow::invalid_argument);
  EXPECT_THROW(ipc::stream_writer(s, cuarrow::context::get(0)), cuarrow::invalid_argument);
}

// Slices are written as Arrow's writer writes them (its 64-byte padded
// lengths decide when a buffer is truncated, bitmaps of slices are copied
// from bit 0, offsets rebased, values cut to the range the offsets use):
// the batch of `slice_source`, sliced as make_golden.py's SLICES, gives the
// bytes of `sliced`.
TEST(IpcStream, SlicesAreWrittenAsPyarrowWritesThem) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::pair<std::int64_t, std::int64_t> slices[] = {{0, 10}, {3, 100}, {64, 64}, {130, 70}, {0, 0}, {199, 1}};
  for (bool device : {false, true}) {
    SCOPED_TRACE(device ? "device source" : "host source");
    const std::vector<std::byte> source = load("slice_source.arrows");
    ipc::stream_reader r(device ? on_device(source) : on_host(source));
    const std::optional<record_batch> whole = r.read_next();
    ASSERT_TRUE(whole.has_value());
    ipc::stream_writer w(r.schema().schema, ctx);
    for (const auto& [off, len] : slices) w.write(whole->slice(off, len));
    EXPECT_EQ(first_difference(to_bytes(w.finish()), load("sliced.arrows")), "");
  }
}

// Device memory as a resource hands it out holding whatever it held: every
// allocation filled with 0xA5 before the writer gets it.
class dirty_resource final : public cuarrow::device_memory_resource {
 public:
  std::uintptr_t allocate(std::int64_t bytes, cuarrow::stream_view s) override {
    const std::uintptr_t p = inner_->allocate(bytes, s);
    const cuarrow::context ctx = cuarrow::context::get(0);
    cuarrow::fill(cuarrow::wrap_device(ctx, p, bytes, nullptr), 0, bytes, 0xA5, s);
    return p;
  }
  void deallocate(std::uintptr_t address, std::int64_t bytes, cuarrow::stream_view s) noexcept override {
    inner_->deallocate(address, bytes, s);
  }
  std::string name() const override { return "dirty"; }

 private:
  std::shared_ptr<cuarrow::device_memory_resource> inner_ = cuarrow::plain_device_resource::shared();
};

// The padding after each body buffer and between messages is written as
// zeros (pyarrow's bytes), not left as the allocation held it: the writer
// zeroes exactly the gaps between its pieces.
TEST(IpcStream, PaddingIsZeroWhateverTheAllocationHeld) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  for (const char* name : {"binaries.arrows", "nested.arrows", "primitives.arrows"}) {
    SCOPED_TRACE(name);
    const std::vector<std::byte> golden = load(name);
    ipc::stream_reader r(on_device(golden));
    ipc::stream_writer w(r.schema().schema, ctx, ipc::stream_writer::format::stream, {}, {}, {},
                         std::make_shared<dirty_resource>());
    const std::vector<record_batch> batches = r.read_all();
    w.write(batches);
    EXPECT_EQ(first_difference(to_bytes(w.finish()), golden), "");
  }
}

// Every byte of every record batch body that no buffer covers (the padding
// after each buffer, to the next or to the body's end) is zero.
void expect_zero_padding(const std::vector<std::byte>& stream) {
  const cuarrow::buffer source = on_host(stream);
  std::int64_t at = 0, checked = 0;
  while (std::optional<ipc::message> m = ipc::read_message(source, at)) {
    at += m->size;
    const auto* h = std::get_if<ipc::record_batch_header>(&m->metadata.header);
    if (h == nullptr) continue;
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;  // offset, length
    for (const auto& b : h->buffers) ranges.emplace_back(b.offset, b.length);
    std::sort(ranges.begin(), ranges.end());
    const auto* body = reinterpret_cast<const std::byte*>(m->body.host_data());
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      const std::int64_t end = ranges[i].first + ranges[i].second;
      const std::int64_t next = i + 1 < ranges.size() ? ranges[i + 1].first : m->body.size();
      for (std::int64_t k = end; k < next; ++k) {
        ASSERT_EQ(body[k], std::byte{0}) << "byte " << k << " of the body of the message at " << at - m->size;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0) << "the stream has padding to check";
}

// A stream large for its padding zeroes the gaps by small copies (not a
// memset of the whole stream): those bytes are zeros too, whatever the
// allocation held.
TEST(IpcStream, PaddingOfALargeStreamIsZeroWhateverTheAllocationHeld) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t n = 1'000'001;  // odd: the int32 values and the string bytes end off an 8-byte boundary
  std::vector<std::optional<std::int64_t>> big(static_cast<std::size_t>(n));
  std::vector<std::optional<std::int32_t>> small(static_cast<std::size_t>(n));
  std::vector<std::optional<std::string>> text(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    big[static_cast<std::size_t>(i)] = i * 3;
    small[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
    text[static_cast<std::size_t>(i)] = std::string(1, static_cast<char>('a' + i % 26));
  }
  record_batch b;
  b.schema.fields = {field("big", int64()), field("small", int32()), field("text", utf8())};
  b.columns = {primitive<std::int64_t>(int64(), big), primitive<std::int32_t>(int32(), small), strings(utf8(), text)};
  b.num_rows = n;
  const record_batch d = to_device(b, ctx);
  ipc::stream_writer w(b.schema, ctx, ipc::stream_writer::format::stream, {}, {}, {},
                       std::make_shared<dirty_resource>());
  w.write(d);
  w.write(d.slice(1, n - 2));
  const std::vector<std::byte> bytes = to_bytes(w.finish());
  expect_zero_padding(bytes);
  ipc::stream_reader r(on_host(bytes));
  for (const record_batch& want : {b, b.slice(1, n - 2)}) {
    const std::optional<record_batch> got = r.read_next();
    ASSERT_TRUE(got.has_value());
    EXPECT_TRUE(equals(*got, want));
  }
}

// An empty string array without offsets (the C data interface allows it)
// is written with the one offset Arrow's arrays hold: pyarrow's bytes.
TEST(IpcStream, EmptyArraysWithoutOffsetsAreWrittenAsPyarrowWritesThem) {
  const std::vector<std::byte> golden = load("empty_batch.arrows");
  ipc::stream_reader r(on_host(golden));
  std::optional<record_batch> b = r.read_next();
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->columns.at(1).type.id, type_id::utf8);
  ASSERT_EQ(b->columns[1].buffers.at(1).size(), 4) << "pyarrow's empty string array holds one offset";
  b->columns[1].buffers[1] = cuarrow::buffer();
  b->columns[1].buffers[2] = cuarrow::buffer();
  ipc::stream_writer w(r.schema().schema, cuarrow::context::get(0));
  w.write(*b);
  EXPECT_EQ(first_difference(to_bytes(w.finish()), golden), "");
}

// A dictionary held by another object with the same values (each chunk of
// a table moved to the device gets its own copy) is not a replacement: a
// file takes it and writes pyarrow's bytes; other values are refused.
TEST(IpcStream, EqualDictionariesInOtherObjectsAreNotReplacements) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::vector<std::byte> golden = load("file_dictionaries.arrow");
  ipc::file_reader r(on_host(golden));
  ASSERT_EQ(r.num_record_batches(), 2);
  ipc::stream_writer w(r.schema().schema, ctx, ipc::stream_writer::format::file, {}, r.footer().custom_metadata);
  w.write(r.read_batch(0));
  record_batch second = r.read_batch(1);
  for (std::size_t c : {std::size_t{0}, std::size_t{1}}) {
    ASSERT_TRUE(second.columns.at(c).dictionary);
    second.columns[c].dictionary =
        std::make_shared<const array_data>(cuarrow::arrow::to_device(*second.columns[c].dictionary, ctx));
  }
  w.write(second);
  EXPECT_EQ(first_difference(to_bytes(w.finish()), golden), "");

  // Other values: a replacement, which a file refuses.
  ipc::stream_reader s(on_host(load("dictionaries.arrows")));
  std::optional<record_batch> b0 = s.read_next();
  std::optional<record_batch> b1 = s.read_next();
  ASSERT_TRUE(b0 && b1);
  ipc::stream_writer f(s.schema().schema, ctx, ipc::stream_writer::format::file);
  f.write(*b0);
  EXPECT_THROW(f.write(*b1), cuarrow::invalid_argument);
}

// Batches written in one call go to the device as they are laid out: the
// writer allocates the stream when they are written (room for an upper
// bound of what they take) and queues each message's copies at once,
// while the next batches are laid out (where the gather kernel takes the
// copies).  The bytes are pyarrow's all the same; a later write that does
// not fit the room goes on as a writer that queued nothing would, the
// bytes queued before it one piece of the stream.
TEST(IpcStream, BatchesAreCopiedAsTheyAreWritten) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const bool gathered = ctx.gather_status() == "ready";
  for (const char* name : {"metadata.arrows", "sliced.arrows"}) {
    SCOPED_TRACE(name);
    const std::vector<std::byte> golden = load(name);
    ipc::stream_reader r(on_device(golden));
    const auto [batches, metadata] = ipc_test_util::read_rest(r);
    ASSERT_GE(batches.size(), 2u);
    {
      ipc::stream_writer w(r.schema().schema, ctx);
      w.write(batches, metadata);
      const ipc::write_stats written = w.stats();
      EXPECT_EQ(written.early_messages, gathered ? written.messages : 0) << "the schema and every batch";
      EXPECT_EQ(first_difference(to_bytes(w.finish()), golden), "");
    }
    // The first batch alone, then the rest: the second call does not fit
    // the room the first made.
    ipc::stream_writer w(r.schema().schema, ctx);
    w.write(std::span<const record_batch>(batches).first(1), std::span<const key_value_metadata>(metadata).first(1));
    w.write(std::span<const record_batch>(batches).subspan(1),
            std::span<const key_value_metadata>(metadata).subspan(1));
    const ipc::write_stats st = w.stats();
    EXPECT_EQ(st.early_messages, gathered ? 2 : 0) << "the schema and the first batch";
    EXPECT_EQ(st.messages, static_cast<std::int64_t>(batches.size()) + 1);
    EXPECT_EQ(first_difference(to_bytes(w.finish()), golden), "");
  }
}

// An array of `type` without nulls over `buffers` (no validity buffer
// given: pass an empty one first where the layout has one) and `children`.
array_data array_over(const data_type& type, std::int64_t length, std::vector<cuarrow::buffer> buffers,
                      std::vector<array_data> children = {}) {
  array_data a;
  a.type = type;
  a.length = length;
  a.null_count = 0;
  a.buffers = std::move(buffers);
  a.children = std::move(children);
  return a;
}

std::vector<std::byte> bytes_of_ints(const std::vector<std::int32_t>& v) {
  std::vector<std::byte> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A writer does not read the offsets of unsliced arrays before it queues
// their copies: it takes them to use all their values, and checks after.
// Where they do not (offsets that do not start at 0, a child longer than
// the offsets use), it writes the batches again from the offsets it read:
// Arrow's bytes, the same as from the same buffers in host memory (read in
// place, never assumed).
TEST(IpcStream, OffsetsThatDoNotUseAllTheValuesAreWrittenAsArrowWritesThem) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::vector<std::byte> text = {std::byte{'a'}, std::byte{'b'}, std::byte{'c'}, std::byte{'d'},
                                       std::byte{'e'}, std::byte{'f'}, std::byte{'g'}, std::byte{'h'}};
  const std::vector<std::byte> from3 = bytes_of_ints({3, 4, 6, 8});  // 3 strings of "defgh"
  const std::vector<std::byte> items = bytes_of_ints({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  const std::vector<std::byte> lists = bytes_of_ints({0, 2, 4});  // 2 lists of the first 4 of 10 items
  auto batch = [&](const std::function<cuarrow::buffer(const std::vector<std::byte>&)>& place) {
    const array_data s = array_over(utf8(), 3, {cuarrow::buffer(), place(from3), place(text)});
    const array_data item = array_over(int32(), 10, {cuarrow::buffer(), place(items)});
    const array_data l = array_over(list(field("item", int32())), 2, {cuarrow::buffer(), place(lists)}, {item});
    record_batch b;
    b.schema.fields = {field("s", s.type), field("l", l.type)};
    b.columns = {s, l};
    b.num_rows = 2;
    b.columns[0] = s.slice(0, 2);  // every column 2 rows; the slice keeps offset 0
    return b;
  };
  const record_batch device = batch(on_device), host = batch(on_host);
  ipc::stream_writer w(device.schema, ctx);
  w.write(std::vector<record_batch>{device, device});
  ipc::stream_writer reference(host.schema, ctx);
  reference.write(std::vector<record_batch>{host, host});
  const std::vector<std::byte> got = to_bytes(w.finish()), want = to_bytes(reference.finish());
  EXPECT_EQ(first_difference(got, want), "");
  ipc::stream_reader r(on_host(got));
  for (const record_batch& b : r.read_all()) EXPECT_TRUE(equals(b, host));
}

// A string column of 2 rows over 100 bytes of values whose last offset is
// `last` (64: short of the values by more than Arrow's padding, so the
// writer's assumption does not hold), its buffers made by `place`.
using placer = std::function<cuarrow::buffer(const std::vector<std::byte>&)>;
record_batch strings_ending_at(int last, const placer& place) {
  const std::vector<std::byte> values(100, std::byte{'v'});
  const std::vector<std::byte> offsets = bytes_of_ints({0, 30, last});
  record_batch b;
  b.schema.fields = {field("s", utf8())};
  b.columns = {array_over(utf8(), 2, {cuarrow::buffer(), place(offsets), place(values)})};
  b.num_rows = 2;
  return b;
}

// The same on the device or the host.
record_batch strings_ending_at(int last, bool device) {
  return strings_ending_at(last, placer(device ? on_device : on_host));
}

// A string array's last offset that falls short of its values' size only
// by what Arrow's 64-byte padding of a cut buffer covers gives the layout
// of one that uses them all (pyarrow writes a slice's values so; its
// readers give such arrays): the writer's assumption holds, and the
// batch is not written twice (the check's read of the device goes with
// finish()'s last copies, and one wait covers both; write() waits for
// nothing).  One offset further short does not, and is written again from
// the offsets read (the rewrite's read and the rewritten stream's wait
// follow).  The bytes are Arrow's either way.
TEST(IpcStream, AssumedOffsetsHoldWithinArrowsPadding) {
  const cuarrow_test::fault_api& f = cuarrow_test::faults();
  if (!f.available()) GTEST_SKIP() << "counts driver calls: needs the host emulation's call counters";
  const cuarrow::context ctx = cuarrow::context::get(0);
  if (ctx.gather_status() != "ready") GTEST_SKIP() << "copies early only where the gather kernel runs";
  for (const auto& [last, finish_waits] : {std::pair{65, 1}, std::pair{100, 1}, std::pair{64, 3}}) {
    SCOPED_TRACE("last offset " + std::to_string(last) + " of 100 bytes of values");
    const record_batch device = strings_ending_at(last, true), host = strings_ending_at(last, false);
    ctx.synchronize();
    auto waits = [&] { return f.calls("cuStreamSynchronize") + f.calls("cuCtxSynchronize"); };
    ipc::stream_writer w(device.schema, ctx);
    f.reset_calls();
    w.write(std::vector<record_batch>{device});
    EXPECT_EQ(waits(), 0U) << "write() waited for its copies";
    f.reset_calls();
    const cuarrow::buffer got = w.finish();
    EXPECT_EQ(waits(), static_cast<std::size_t>(finish_waits)) << "the check with the end, then any rewrite";
    ipc::stream_writer reference(host.schema, ctx);
    reference.write(host);
    EXPECT_EQ(first_difference(to_bytes(got), to_bytes(reference.finish())), "");
  }
}

// Offsets in pinned host memory are assumed too, but their check cannot
// ride in the end's batched copy (that takes reads of the writer's device
// memory only): finish() then flushes and reads them apart.  Either way the
// assumption is checked and the bytes are Arrow's.
TEST(IpcStream, AssumedOffsetsInPinnedMemoryAreCheckedApart) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  if (ctx.gather_status() != "ready") GTEST_SKIP() << "copies early only where the gather kernel runs";
  auto pinned = [&](const std::vector<std::byte>& bytes) {
    cuarrow::buffer b = cuarrow::allocate_pinned(ctx, static_cast<std::int64_t>(bytes.size()));
    std::memcpy(b.mutable_host_data(), bytes.data(), bytes.size());
    return b;
  };
  for (const int last : {100, 64}) {
    SCOPED_TRACE("last offset " + std::to_string(last) + " of 100 bytes of values");
    const record_batch in_pinned = strings_ending_at(last, pinned), device = strings_ending_at(last, true),
                       host = strings_ending_at(last, false);
    ctx.synchronize();
    ipc::stream_writer w(in_pinned.schema, ctx), reference(host.schema, ctx);
    // Beside a batch in device memory, whose check alone could ride along.
    w.write(std::vector<record_batch>{device, in_pinned});
    reference.write(std::vector<record_batch>{host, host});
    EXPECT_EQ(w.stats().early_messages, w.stats().messages) << "the case needs copies queued early";
    const cuarrow_test::fault_api& f = cuarrow_test::faults();
    if (f.available()) f.reset_calls();  // the real driver has no call counters
    const cuarrow::buffer got = w.finish();
    if (f.available() && last == 100) {
      // The check's own reads and waits, then finish()'s: the branch apart
      // (the end's batched copy with the reads waits once).
      EXPECT_GT(f.calls("cuStreamSynchronize") + f.calls("cuCtxSynchronize"), 1U);
    }
    EXPECT_EQ(first_difference(to_bytes(got), to_bytes(reference.finish())), "");
  }
}

// An assumption that does not hold is found after write() returned: by the
// next write() (which writes the earlier batches again before its own) or
// by finish() (which takes back the end it queued and writes it again
// after them).  Stream and file: Arrow's bytes, and a file's footer points
// at the messages written last.
TEST(IpcStream, AnOffsetThatDoesNotHoldIsWrittenAgainAtTheNextWriteOrTheEnd) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const record_batch short_d = strings_ending_at(64, true), short_h = strings_ending_at(64, false);
  const record_batch full_d = strings_ending_at(100, true), full_h = strings_ending_at(100, false);
  ctx.synchronize();
  for (const auto f : {ipc::stream_writer::format::stream, ipc::stream_writer::format::file}) {
    SCOPED_TRACE(f == ipc::stream_writer::format::file ? "file" : "stream");
    for (const int way : {0, 1, 2}) {
      const bool second_write = way != 0;
      SCOPED_TRACE(way == 0 ? "one write, taken over" : way == 1 ? "a second write" : "by address, a second write");
      ipc::stream_writer w(short_d.schema, ctx, f), reference(short_h.schema, ctx, f);
      // The batches taken over, given as a span or by address (kept as a
      // copy: the caller's batches are gone before the rewrite).
      std::vector<record_batch> both{full_d, short_d};
      if (way == 0) {
        w.write(std::move(both));
        // Left empty (taken over) or as it was, as write(&&) says; never
        // batches without their columns.
        EXPECT_TRUE(both.empty() || (both.size() == 2 && equals(both[0], full_d) && equals(both[1], short_d)));
      } else if (way == 1) {
        w.write(std::span<const record_batch>(both));
      } else {
        auto held = std::make_unique<std::vector<record_batch>>(both);
        const std::vector<const record_batch*> at{&(*held)[0], &(*held)[1]};
        w.write(std::span<const record_batch* const>(at));
        held.reset();
      }
      reference.write(std::vector<record_batch>{full_h, short_h});
      if (second_write) {
        w.write(full_d);
        reference.write(full_h);
      }
      const std::vector<std::byte> got = to_bytes(w.finish()), want = to_bytes(reference.finish());
      EXPECT_EQ(first_difference(got, want), "");
      EXPECT_EQ(w.stats().batches, second_write ? 3 : 2);
      if (f == ipc::stream_writer::format::file) {
        ipc::file_reader r(on_host(got));
        ASSERT_EQ(r.num_record_batches(), second_write ? 3 : 2);
        EXPECT_TRUE(equals(r.read_batch(1), short_h));
      }
    }
  }
}

// A write() whose rewrite of an earlier write (an offset that did not
// hold) fails midway throws and leaves the writer before that earlier
// write; the next write() writes it again, and nothing is lost.
TEST(IpcStream, ARewriteThatFailsIsDoneAgainByTheNextWrite) {
  const cuarrow_test::fault_api& f = cuarrow_test::faults();
  if (!f.available()) GTEST_SKIP() << "injects a driver failure: needs the host emulation's fault injection";
  const cuarrow::context ctx = cuarrow::context::get(0);
  if (ctx.gather_status() != "ready") GTEST_SKIP() << "copies early only where the gather kernel runs";
  const record_batch short_d = strings_ending_at(64, true), short_h = strings_ending_at(64, false);
  const record_batch full_d = strings_ending_at(100, true), full_h = strings_ending_at(100, false);
  ctx.synchronize();
  ipc::stream_writer w(short_d.schema, ctx), reference(short_h.schema, ctx);
  w.write(std::vector<record_batch>{full_d, short_d});
  // The check's read of the device waits for the stream first, the
  // rewrite's read of the offsets next: that wait fails.
  ASSERT_EQ(f.inject("cuStreamSynchronize", 2, CUDA_ERROR_LAUNCH_FAILED), 0);
  EXPECT_THROW(w.write(full_d), cuarrow::cuda_error);
  EXPECT_EQ(f.injected(), 1U);
  f.clear();
  EXPECT_EQ(w.stats().batches, 0) << "the failed rewrite took back the earlier write's batches";
  w.write(full_d);
  reference.write(std::vector<record_batch>{full_h, short_h, full_h});
  EXPECT_EQ(w.stats().batches, 3);
  EXPECT_EQ(first_difference(to_bytes(w.finish()), to_bytes(reference.finish())), "");
}

// A finish() whose one wait fails (the end, the last copies and the reads
// of the assumed offsets queued together) throws the driver's error; the
// writer, dropped then, keeps what those copies use until the stream has
// passed them (the device memory is counted here; the reads' pinned block
// is kept with it, which no counter shows), and the next writer works.
TEST(IpcStream, AFinishWhoseWaitFailsKeepsWhatItsCopiesUse) {
  const cuarrow_test::fault_api& f = cuarrow_test::faults();
  if (!f.available()) GTEST_SKIP() << "injects a driver failure: needs the host emulation's fault injection";
  const cuarrow::context ctx = cuarrow::context::get(0);
  if (ctx.gather_status() != "ready") GTEST_SKIP() << "copies early only where the gather kernel runs";
  const record_batch b = strings_ending_at(100, true), h = strings_ending_at(100, false);
  cuarrow::stream s(ctx);
  cuarrow_test::expect_kept_until_passed(ctx, s, 1, [&] {
    ctx.synchronize();
    ipc::stream_writer w(b.schema, ctx, ipc::stream_writer::format::stream, s);
    w.write(std::vector<record_batch>{b, b});
    ASSERT_EQ(f.inject("cuStreamSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED), 0);
    EXPECT_THROW(w.finish(), cuarrow::cuda_error);
    EXPECT_EQ(f.injected(), 1U);
    f.clear();
  });  // the writer dropped while its copies may be queued
  ipc::stream_writer again(b.schema, ctx), reference(h.schema, ctx);
  again.write(std::vector<record_batch>{b, b});
  reference.write(std::vector<record_batch>{h, h});
  EXPECT_EQ(first_difference(to_bytes(again.finish()), to_bytes(reference.finish())), "");
}

// A writer dropped before finish() after its copies were queued (an
// exception between write() and finish(), say): the copies' sources and
// the room are kept until the stream has passed them, then freed.
TEST(IpcStream, AWriterDroppedBeforeFinishKeepsWhatItsCopiesUse) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  cuarrow_test::expect_kept_until_passed(ctx, s, 1, [&] {
    const record_batch b = strings_ending_at(100, true);
    ctx.synchronize();
    ipc::stream_writer w(b.schema, ctx, ipc::stream_writer::format::stream, s);
    w.write(std::vector<record_batch>{b, b});
    EXPECT_GT(w.stats().early_messages, 0) << "the case needs copies queued early";
  });  // the writer and the batch dropped while the copies may be queued
}

// A run-end encoded column whose runs end at `ends`, over `length` rows
// (values "a", "b", ...), beside an int32 column.
record_batch with_runs(const std::vector<std::optional<std::int32_t>>& ends, std::int64_t length) {
  std::vector<std::optional<std::string>> values;
  for (std::size_t i = 0; i < ends.size(); ++i) values.emplace_back(std::string(1, static_cast<char>('a' + i)));
  const array_data runs = array_over(run_end_encoded(int32(), utf8()), length, {},
                                     {primitive<std::int32_t>(int32(), ends), strings(utf8(), values)});
  std::vector<std::optional<std::int32_t>> ints;
  for (std::int64_t i = 0; i < length; ++i) ints.emplace_back(static_cast<std::int32_t>(i * 7));
  record_batch b;
  b.schema.fields = {field("runs", runs.type), field("i", int32())};
  b.columns = {runs, primitive<std::int32_t>(int32(), ints)};
  b.num_rows = length;
  return b;
}

// A write that fails midway (a later batch's layout finds its run ends too
// short, after the first batch's copies were queued) adds nothing: the
// writer goes on as if it had not been called.
TEST(IpcStream, AFailedWriteTakesBackTheBatchesItQueued) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const record_batch good = to_device(with_runs({5, 10}, 10), ctx);
  // Rows 1-19 of 20 whose runs end at row 10 (made on the device, where
  // nothing checks them): sliced, so the layout reads the run ends and
  // only then finds that they stop before the slice does.
  record_batch bad = to_device(with_runs({5, 10, 20}, 20), ctx);
  bad.columns[0].children = good.columns[0].children;
  bad = bad.slice(1, 19);
  const record_batch later = to_device(with_runs({3, 4, 8}, 8), ctx);
  ipc::stream_writer w(good.schema, ctx);
  const std::vector<record_batch> both{good, bad};
  EXPECT_THROW(w.write(both), cuarrow::invalid_argument);
  EXPECT_EQ(w.stats().batches, 0);
  w.write(later);
  const std::vector<std::byte> got = to_bytes(w.finish());

  ipc::stream_writer reference(good.schema, ctx);
  reference.write(to_host(later));
  EXPECT_EQ(first_difference(got, to_bytes(reference.finish())), "");
  ipc::stream_reader r(on_host(got));
  const std::vector<record_batch> read = r.read_all();
  ASSERT_EQ(read.size(), 1u);
  EXPECT_TRUE(equals(read[0], to_host(later)));
}

// A resource that counts the bytes it has handed out and not taken back.
class counting_resource final : public cuarrow::device_memory_resource {
 public:
  std::uintptr_t allocate(std::int64_t bytes, cuarrow::stream_view s) override {
    live += bytes;
    return inner_->allocate(bytes, s);
  }
  void deallocate(std::uintptr_t address, std::int64_t bytes, cuarrow::stream_view s) noexcept override {
    live -= bytes;
    inner_->deallocate(address, bytes, s);
  }
  std::string name() const override { return "counting"; }
  std::atomic<std::int64_t> live{0};

 private:
  std::shared_ptr<cuarrow::device_memory_resource> inner_ = cuarrow::plain_device_resource::shared();
};

// The room a writer makes is bounded by the buffers' sizes; where the
// batches take much less of them (here a string column's 4 MiB of values,
// of which its offsets use 26 bytes), the stream it returns does not keep
// the rest: it holds at most its own size and a small slack of the
// resource's memory once the writer is gone.
TEST(IpcStream, AStreamDoesNotKeepTheRoomItDidNotUse) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  std::vector<std::optional<std::string>> words;
  for (char c = 'a'; c <= 'z'; ++c) words.emplace_back(std::string(1, c));
  record_batch b;
  b.schema.fields = {field("s", utf8())};
  b.columns = {strings(utf8(), words)};
  b.num_rows = static_cast<std::int64_t>(words.size());
  record_batch d = to_device(b, ctx);
  std::vector<std::byte> values(std::size_t{4} << 20, std::byte{0x5a});
  cuarrow::copy_to_host(values.data(), d.columns[0].buffers[2], 0, d.columns[0].buffers[2].size());
  d.columns[0].buffers[2] = cuarrow::copy_to_device(ctx, values.data(), static_cast<std::int64_t>(values.size()));

  auto resource = std::make_shared<counting_resource>();
  cuarrow::buffer out;
  {
    ipc::stream_writer w(b.schema, ctx, ipc::stream_writer::format::stream, {}, {}, {}, resource);
    w.write(std::vector<record_batch>{d});
    out = w.finish();
  }
  ctx.synchronize();
  EXPECT_LT(out.size(), 4096);
  EXPECT_LE(resource->live.load(), out.size() + (std::int64_t{1} << 20));
  // The same on the host: Arrow writes 64 bytes of the values (the 26
  // used, padded to 64) where the buffer holds more than the offsets use.
  record_batch h = b;
  h.columns[0].buffers[2] = on_host(values);
  ipc::stream_writer reference(b.schema, ctx);
  reference.write(h);
  EXPECT_EQ(first_difference(to_bytes(out), to_bytes(reference.finish())), "");
}

// A writer says how many messages and body pieces it wrote and where its
// time went: the counts those of the stream it made (read back message by
// message), the phases disjoint parts of the calling thread's time.
TEST(IpcStream, AWriterSaysWhereItsTimeWent) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::vector<std::byte> golden = load("dictionaries.arrows");
  ipc::stream_reader r(on_host(golden));
  std::vector<record_batch> batches;
  while (std::optional<record_batch> b = r.read_next()) batches.push_back(to_device(*b, ctx));
  ASSERT_GE(batches.size(), 2u);
  const auto start = std::chrono::steady_clock::now();
  ipc::stream_writer w(r.schema().schema, ctx);
  w.write(batches.front());
  w.write(std::span<const record_batch>(batches).subspan(1));
  const ipc::write_stats before = w.stats();
  EXPECT_EQ(before.wait_seconds, 0.0) << "nothing is waited for before finish()";
  const cuarrow::buffer out = w.finish();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const ipc::write_stats st = w.stats();

  std::int64_t messages = 0, pieces = 0;
  std::int64_t at = 0;
  while (std::optional<ipc::message> m = ipc::read_message(out, at)) {
    at += m->size;
    ++messages;
    const ipc::record_batch_header* h = nullptr;
    if (m->kind() == ipc::message_kind::record_batch) h = &m->metadata.record_batch("test");
    if (m->kind() == ipc::message_kind::dictionary_batch) h = &m->metadata.dictionary_batch("test").data;
    if (h != nullptr) {
      pieces +=
          std::count_if(h->buffers.begin(), h->buffers.end(), [](const ipc::body_range& b) { return b.length > 0; });
    }
  }
  EXPECT_EQ(st.batches, static_cast<std::int64_t>(batches.size()));
  EXPECT_EQ(st.messages, messages);
  EXPECT_EQ(st.body_pieces, pieces);
  EXPECT_GT(st.layout_seconds, 0.0);
  EXPECT_GT(st.metadata_seconds, 0.0);
  EXPECT_GT(st.allocate_seconds, 0.0);
  EXPECT_GT(st.queue_seconds, 0.0);
  EXPECT_GT(st.wait_seconds, 0.0);
  EXPECT_EQ(st.compress_seconds, 0.0) << "uncompressed";
  EXPECT_EQ(st.file_write_seconds, 0.0) << "into memory";
  EXPECT_LE(st.layout_seconds + st.metadata_seconds + st.allocate_seconds + st.queue_seconds + st.wait_seconds, wall);
  EXPECT_GE(st.layout_seconds, before.layout_seconds);
}

// A stream in device memory reads as device arrays whose buffers lie inside
// the source (zero-copy), equal to the same stream read from host memory.
TEST(IpcStream, DeviceStreamsReadAsSlicesOfTheSource) {
  for (const char* name : kStreams) {
    SCOPED_TRACE(name);
    const std::vector<std::byte> golden = load(name);
    const cuarrow::buffer dev = on_device(golden);
    ipc::stream_reader host_reader(on_host(golden));
    ipc::stream_reader dev_reader(dev);
    EXPECT_EQ(dev_reader.schema(), host_reader.schema());
    const std::vector<record_batch> expected = host_reader.read_all();
    const std::vector<record_batch> got = dev_reader.read_all();
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      for (std::size_t c = 0; c < got[i].columns.size(); ++c) {
        const array_data& a = got[i].columns[c];
        for (const cuarrow::buffer& b : a.buffers) {
          if (b.size() == 0) continue;
          EXPECT_EQ(b.type(), cuarrow::device_type::cuda);
          EXPECT_GE(b.address(), dev.address());
          EXPECT_LE(b.address() + static_cast<std::uintptr_t>(b.size()),
                    dev.address() + static_cast<std::uintptr_t>(dev.size()));
        }
        EXPECT_TRUE(same_values(expected[i].columns[c], a)) << "batch " << i << " column " << c;
      }
    }
    EXPECT_EQ(dev_reader.position(), static_cast<std::int64_t>(golden.size()) - 8) << "all but the end marker";
  }
}

TEST(IpcStream, DeviceFilesReadAnyBatch) {
  for (const char* name : kFiles) {
    SCOPED_TRACE(name);
    const std::vector<std::byte> golden = load(name);
    ipc::file_reader host_reader(on_host(golden));
    ipc::file_reader dev_reader(on_device(golden));
    ASSERT_EQ(dev_reader.num_record_batches(), host_reader.num_record_batches());
    for (int i = dev_reader.num_record_batches() - 1; i >= 0; --i) {
      const record_batch a = dev_reader.read_batch(i);
      const record_batch b = host_reader.read_batch(i);
      ASSERT_EQ(a.columns.size(), b.columns.size());
      for (std::size_t c = 0; c < a.columns.size(); ++c) EXPECT_TRUE(same_values(b.columns[c], a.columns[c]));
    }
    EXPECT_THROW((void)dev_reader.read_batch(dev_reader.num_record_batches()), cuarrow::out_of_range);
    EXPECT_THROW((void)dev_reader.read_batch(-1), cuarrow::out_of_range);
  }
}

// Every sample type, written into a device stream and a device file and
// read back.
TEST(IpcStream, EverySampleRoundTripsThroughADeviceStreamAndFile) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  for (auto& [name, a] : sample_arrays()) {
    SCOPED_TRACE(name);
    record_batch b;
    b.schema.fields = {field("x", a.type)};
    b.num_rows = a.length;
    b.columns = {to_device(a, ctx)};
    for (auto f : {ipc::stream_writer::format::stream, ipc::stream_writer::format::file}) {
      ipc::stream_writer w(b.schema, ctx, f);
      w.write(b);
      w.write(b);
      const cuarrow::buffer out = w.finish();
      std::vector<record_batch> back;
      if (f == ipc::stream_writer::format::stream) {
        back = ipc::stream_reader(out).read_all();
      } else {
        back = ipc::file_reader(out).read_all();
      }
      ASSERT_EQ(back.size(), 2u);
      for (const record_batch& r : back) EXPECT_TRUE(same_values(a, r.columns[0]));
    }
  }
}

TEST(IpcStream, ASerializedBatchIsOneMessage) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const array_data a = strings(utf8(), {"a", std::nullopt, "ccc"});
  record_batch b;
  b.schema.fields = {field("s", utf8())};
  b.num_rows = 3;
  b.columns = {a};
  const cuarrow::buffer dev = ipc::serialize_record_batch(b, ctx);
  const std::optional<ipc::message> m = ipc::read_message(dev);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->kind(), ipc::message_kind::record_batch);
  EXPECT_EQ(m->size, dev.size());
  EXPECT_EQ(m->body.type(), cuarrow::device_type::cuda);
  ipc::schema_message s;
  s.schema = b.schema;
  const record_batch back = ipc::read_record_batch(std::get<ipc::record_batch_header>(m->metadata.header), s, m->body,
                                                   ipc::dictionary_memo(s));
  EXPECT_TRUE(same_values(a, back.columns[0]));
  EXPECT_EQ(ipc::serialize_to_host(*m), to_bytes(dev));
  // A dictionary column needs a stream.
  record_batch d;
  array_data codes = primitive<std::int32_t>(int32(), {0, 1});
  codes.type = dictionary(int32(), utf8());
  codes.dictionary = std::make_shared<array_data>(strings(utf8(), {"x", "y"}));
  d.schema.fields = {field("d", codes.type)};
  d.num_rows = 2;
  d.columns = {codes};
  EXPECT_THROW((void)ipc::serialize_record_batch(d, ctx), cuarrow::invalid_argument);
}

// A stream's messages read one by one, as pyarrow.ipc's read_message,
// DictionaryMemo and read_record_batch read them, give the stream reader's
// batches (nested dictionaries, replacements); a dictionary column needs
// the memo; a message of another kind is refused.
TEST(IpcStream, MessagesReadOneByOneGiveTheStreamsBatches) {
  const std::vector<std::byte> bytes = load("dictionaries.arrows");
  const cuarrow::buffer source = on_device(bytes);
  ipc::stream_reader whole(on_host(bytes));  // what same_values compares with: host data
  std::optional<ipc::message> m = ipc::read_message(source);
  ASSERT_TRUE(m);
  const ipc::schema_message s = m->metadata.schema_header("test");
  ipc::dictionary_memo memo(s);
  EXPECT_EQ(memo.fields().size(), s.dictionaries.size());
  EXPECT_EQ(message_of([&] { (void)ipc::read_record_batch(*m, s.schema, &memo); }),
            "IPC read_record_batch: not a record batch message");
  int batches = 0;
  for (std::int64_t at = m->size; (m = ipc::read_message(source, at)); at += m->size) {
    if (m->kind() == ipc::message_kind::dictionary_batch) {
      ipc::read_dictionary(memo, *m);
      continue;
    }
    ASSERT_EQ(m->kind(), ipc::message_kind::record_batch);
    EXPECT_EQ(message_of([&] { ipc::read_dictionary(memo, *m); }),
              "IPC dictionary memo: not a dictionary batch message");
    EXPECT_THROW((void)ipc::read_record_batch(*m, s.schema), ipc::invalid_message);
    const std::optional<record_batch> expected = whole.read_next();
    ASSERT_TRUE(expected);
    EXPECT_TRUE(same_values(*expected, ipc::read_record_batch(*m, s.schema, &memo)));
    ++batches;
  }
  EXPECT_EQ(batches, 2);
  EXPECT_FALSE(whole.read_next());
}

// ---- hostile sources ----------------------------------------------------------------

std::string message_of_read(const std::vector<std::byte>& bytes) {
  return message_of([&] { (void)ipc::stream_reader(on_device(bytes)).read_all(); });
}

TEST(IpcStreamHostile, TruncatedStreamsSayWhereAndWhat) {
  const std::vector<std::byte> golden = load("primitives.arrows");
  for (std::size_t cut : {std::size_t{0}, std::size_t{3}, std::size_t{9}, golden.size() / 2, golden.size() - 9}) {
    SCOPED_TRACE(cut);
    const std::vector<std::byte> part(golden.begin(), golden.begin() + static_cast<std::ptrdiff_t>(cut));
    const std::string m = message_of_read(part);
    EXPECT_FALSE(m.empty()) << "a cut stream must not read as a good one";
    EXPECT_NE(m.find("message"), std::string::npos) << m;
  }
  // Cut inside the last body.
  const std::vector<std::byte> part(golden.begin(), golden.end() - 16);
  EXPECT_NE(message_of_read(part).find("runs past the end of the source"), std::string::npos);
}

TEST(IpcStreamHostile, AStreamMustStartWithItsSchema) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  record_batch b;
  b.schema.fields = {field("i", int32())};
  b.num_rows = 2;
  b.columns = {primitive<std::int32_t>(int32(), {1, 2})};
  const std::vector<std::byte> batch_only = to_bytes(ipc::serialize_record_batch(b, ctx));
  EXPECT_NE(message_of_read(batch_only).find("starts with a RecordBatch message"), std::string::npos);
  EXPECT_NE(message_of_read({}).find("no schema message"), std::string::npos);
}

TEST(IpcStreamHostile, FlippedBytesNeverCrash) {
  const std::vector<std::byte> golden = load("nested.arrows");
  for (std::size_t i = 0; i < golden.size(); i += 7) {
    std::vector<std::byte> bad = golden;
    bad[i] ^= std::byte{0x5a};
    try {
      ipc::stream_reader r(on_host(bad));
      (void)r.read_all();
    } catch (const cuarrow::invalid_argument&) {
      // invalid_message or invalid_data: both say what is wrong
    }
  }
}

// read_all validates the batches of a run together (one batched read of
// their offsets): a bad offset in a later batch is still found and named.
TEST(IpcStreamHostile, ReadAllFindsABadOffsetInALaterBatch) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  random_arrays gen(11);
  schema s;
  s.fields = {field("i", int32()), field("s", utf8())};
  for (const auto f : {ipc::stream_writer::format::stream, ipc::stream_writer::format::file}) {
    SCOPED_TRACE(f == ipc::stream_writer::format::file ? "file" : "stream");
    ipc::stream_writer w(s, ctx, f);
    for (int k = 0; k < 5; ++k) {
      record_batch b;
      b.schema = s;
      b.num_rows = 100;
      b.columns = {gen.array(int32(), 100), gen.array(utf8(), 100)};
      w.write(to_device(b, ctx));
    }
    std::vector<std::byte> bytes = to_bytes(w.finish());
    // The fourth record batch's last offset of "s", past its data.
    const cuarrow::buffer host = on_host(bytes);
    std::int64_t at = f == ipc::stream_writer::format::file ? 8 : 0;  // past a file's magic
    int seen = 0;
    for (;;) {
      std::optional<ipc::message> m = ipc::read_message(host, at);
      ASSERT_TRUE(m.has_value());
      if (m->kind() == ipc::message_kind::record_batch && ++seen == 4) {
        const auto& h = std::get<ipc::record_batch_header>(m->metadata.header);
        ASSERT_EQ(h.buffers.size(), 5U);  // i: validity, values; s: validity, offsets, data
        const std::int64_t last = at + (m->size - m->body.size()) + h.buffers[3].offset + 100 * 4;
        const std::int32_t huge = 1 << 30;
        std::memcpy(bytes.data() + last, &huge, sizeof huge);
        break;
      }
      at += m->size;
    }
    auto read_all = [&] {
      if (f == ipc::stream_writer::format::file) return ipc::file_reader(on_device(bytes)).read_all();
      return ipc::stream_reader(on_device(bytes)).read_all();
    };
    try {
      (void)read_all();
      FAIL() << "read_all took a batch whose offsets point past its data";
    } catch (const ipc::invalid_message& e) {
      EXPECT_NE(std::string(e.what()).find("\"s\""), std::string::npos) << e.what();
    }
  }
}

TEST(IpcStreamHostile, FileBlocksMustMatchTheirMessages) {
  std::vector<std::byte> golden = load("file_primitives.arrow");
  EXPECT_NE(message_of([&] {
              (void)ipc::file_reader(on_host(std::vector<std::byte>(golden.begin(), golden.begin() + 12)));
            }).find("too short"),
            std::string::npos);
  std::vector<std::byte> bad = golden;
  bad[0] = std::byte{'X'};
  EXPECT_THROW((void)ipc::file_reader(on_host(bad)), ipc::invalid_message);
}

}  // namespace
}  // namespace cuarrow_ipc_stream_test
