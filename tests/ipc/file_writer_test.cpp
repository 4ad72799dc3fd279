// IPC streams and files written to a path (include/cuarrow/ipc/file_writer.hpp):
// pyarrow's golden streams and files read into device memory and written to
// a file byte for byte, compressed bodies laid out as pyarrow lays them out
// and read back equal, chunks smaller than a buffer, and files that cannot
// be created or written.
#include "cuarrow/ipc/file_writer.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "arrow/arrow_test_util.hpp"
#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/ipc/codec.hpp"
#include "cuarrow/ipc/metadata.hpp"
#include "ipc_test_util.hpp"
#include "test_data.hpp"

namespace cuarrow_ipc_file_writer_test {
namespace {

using namespace cuarrow::arrow;      // NOLINT
using namespace cuarrow_arrow_test;  // NOLINT
namespace ipc = cuarrow::ipc;
namespace fs = std::filesystem;
using bytes = std::vector<std::byte>;
using fmt = ipc::file_writer::format;

bytes load(const std::string& name) {
  const auto& files = test_data::files();
  const auto it = files.find(name);
  if (it == files.end()) throw std::runtime_error("no golden file " + name + " in tests/ipc/data");
  return {it->second.begin(), it->second.end()};
}

cuarrow::buffer on_host(const bytes& b) {
  cuarrow::buffer h = cuarrow::allocate_host(static_cast<std::int64_t>(b.size()));
  if (!b.empty()) std::memcpy(h.mutable_host_data(), b.data(), b.size());
  return h;
}

cuarrow::buffer on_device(const bytes& b) {
  return cuarrow::copy_to_device(cuarrow::context::get(0), b.data(), static_cast<std::int64_t>(b.size()));
}

bytes to_bytes(const cuarrow::buffer& b) {
  bytes out(static_cast<std::size_t>(b.size()));
  if (b.size() > 0) cuarrow::copy_to_host(out.data(), b, 0, b.size());
  return out;
}

bytes read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  const std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes out(c.size());
  if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
  return out;
}

std::string first_difference(const bytes& a, const bytes& b) {
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  if (i == a.size() && i == b.size()) return "";
  return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size()) + ", first difference at byte " +
         std::to_string(i);
}

// A directory of its own under the system's temporary directory, removed
// with everything in it at the end of the test.
class temp_dir {
 public:
  temp_dir() {
    const auto* t = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("cuarrow_file_writer_" + std::to_string(::getpid()) + "_" + t->test_suite_name() + "_" + t->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// Decompresses each buffer on the host (the reader's hook).
ipc::read_options decompressing() {
  ipc::read_options o;
  o.decompress = [](ipc::compression_codec c, const cuarrow::buffer& framed) {
    const bytes in = to_bytes(framed);
    const std::int64_t n = ipc::decompressed_size(in, std::int64_t{1} << 32);
    cuarrow::buffer out = cuarrow::allocate_host(n);
    ipc::decompress(c, in, std::span<std::byte>(out.mutable_host_data(), static_cast<std::size_t>(n)));
    return out;
  };
  return o;
}

const char* const kStreams[] = {"primitives.arrows",  "binaries.arrows",     "nested.arrows",      "metadata.arrows",
                                "empty_batch.arrows", "empty_schema.arrows", "dictionaries.arrows"};
const char* const kFiles[] = {"file_primitives.arrow", "file_dictionaries.arrow"};

// ---- uncompressed: pyarrow's bytes ----------------------------------------------------

TEST(IpcFileWriter, PyarrowStreamsFromDeviceMemoryAreWrittenByteForByte) {
  temp_dir dir;
  for (const char* name : kStreams) {
    SCOPED_TRACE(name);
    const bytes golden = load(name);
    ipc::stream_reader r(on_device(golden));
    const fs::path out = dir / name;
    ipc::file_writer w(out.string(), r.schema().schema, fmt::stream);
    while (std::optional<ipc::batch_with_metadata> b = r.read_next_with_custom_metadata()) {
      w.write(b->batch, b->custom_metadata);
    }
    w.close();
    EXPECT_EQ(w.bytes_written(), static_cast<std::int64_t>(golden.size()));
    EXPECT_EQ(first_difference(read_file(out), golden), "");
  }
}

TEST(IpcFileWriter, PyarrowFilesFromDeviceMemoryAreWrittenByteForByte) {
  temp_dir dir;
  for (const char* name : kFiles) {
    SCOPED_TRACE(name);
    const bytes golden = load(name);
    ipc::file_reader r(on_device(golden));
    ASSERT_GT(r.num_record_batches(), 0);
    const fs::path out = dir / name;
    ipc::file_writer w(out.string(), r.schema().schema, fmt::file, {}, r.footer().custom_metadata);
    for (int i = 0; i < r.num_record_batches(); ++i) {
      const ipc::batch_with_metadata b = r.read_batch_with_custom_metadata(i);
      w.write(b.batch, b.custom_metadata);
    }
    w.close();
    EXPECT_EQ(first_difference(read_file(out), golden), "");
  }
}

// The same golden streams and files, every batch in ONE write call (one
// staging-pipeline job for all the bodies): pyarrow's bytes again.
TEST(IpcFileWriter, AllBatchesInOneCallAreWrittenByteForByte) {
  temp_dir dir;
  for (const char* name : kStreams) {
    SCOPED_TRACE(name);
    const bytes golden = load(name);
    ipc::stream_reader r(on_device(golden));
    const auto [batches, metadata] = ipc_test_util::read_rest(r);
    const fs::path out = dir / name;
    ipc::file_writer w(out.string(), r.schema().schema, fmt::stream);
    w.write(batches, metadata);
    w.close();
    EXPECT_EQ(first_difference(read_file(out), golden), "");
  }
  for (const char* name : kFiles) {
    SCOPED_TRACE(name);
    const bytes golden = load(name);
    ipc::file_reader r(on_device(golden));
    std::vector<record_batch> batches;
    std::vector<key_value_metadata> metadata;
    for (int i = 0; i < r.num_record_batches(); ++i) {
      ipc::batch_with_metadata b = r.read_batch_with_custom_metadata(i);
      batches.push_back(std::move(b.batch));
      metadata.push_back(std::move(b.custom_metadata));
    }
    const fs::path out = dir / name;
    ipc::file_writer w(out.string(), r.schema().schema, fmt::file, {}, r.footer().custom_metadata);
    w.write(batches, metadata);
    w.close();
    EXPECT_EQ(first_difference(read_file(out), golden), "");
    // The same batches by address.
    std::vector<const record_batch*> at;
    for (const record_batch& b : batches) at.push_back(&b);
    const fs::path again = dir / (std::string("at_") + name);
    ipc::file_writer w2(again.string(), r.schema().schema, fmt::file, {}, r.footer().custom_metadata);
    w2.write(std::span<const record_batch* const>(at), metadata);
    w2.close();
    EXPECT_EQ(first_difference(read_file(again), golden), "");
  }
}

// Many random batches (device and host ones mixed) in one call, with chunks
// smaller than the bodies and several pipeline workers: the bytes of the
// per-batch writes and of the in-memory writer, uncompressed and with every
// codec.
TEST(IpcFileWriter, ManyBatchesInOneCallEqualPerBatchWrites) {
  temp_dir dir;
  const cuarrow::context ctx = cuarrow::context::get(0);
  const cuarrow::transfer_options saved = cuarrow::get_transfer_options();
  cuarrow::transfer_options o = saved;
  o.staging_chunk_bytes = 64 << 10;
  o.staging_threads = 4;
  cuarrow::set_transfer_options(o);
  random_arrays gen(20261205);
  // No dictionaries: a file allows one per field, and random batches would
  // each bring their own.
  record_batch first;
  first.schema.fields = {field("i", int64()),   field("s", utf8()),      field("l", list(field("item", int32()))),
                         field("b", boolean()), field("v", utf8_view()), field("d", decimal(30, 5)),
                         field("f", float64())};
  std::vector<record_batch> batches;
  for (int i = 0; i < 24; ++i) {
    record_batch host;
    host.schema = first.schema;
    host.num_rows = gen.uniform(0, 3000);
    for (const auto& fld : first.schema.fields) {
      array_data a = gen.array(fld.type, host.num_rows + 5);
      // Some columns sliced (bitmaps shifted and offsets rebased on the host).
      a = a.slice(i % 2 == 0 ? 5 : 0, host.num_rows);
      host.columns.push_back(std::move(a));
    }
    batches.push_back(i % 3 == 2 ? host : to_device(host, ctx));
  }
  std::vector<std::optional<ipc::compression_codec>> codecs = {std::nullopt};
  for (ipc::compression_codec c : ipc::available_codecs()) codecs.push_back(c);
  for (const std::optional<ipc::compression_codec>& c : codecs) {
    for (fmt f : {fmt::stream, fmt::file}) {
      SCOPED_TRACE(std::string(c ? ipc::to_string(*c) : "uncompressed") + (f == fmt::file ? " file" : " stream"));
      ipc::write_options wo;
      wo.compression = c;
      const fs::path all = dir / "all", each = dir / "each";
      ipc::file_writer wa(all.string(), first.schema, f, {}, {}, wo);
      wa.write(batches);
      wa.close();
      EXPECT_EQ(wa.bytes_written(), static_cast<std::int64_t>(fs::file_size(all)));
      ipc::file_writer we(each.string(), first.schema, f, {}, {}, wo);
      for (const record_batch& b : batches) we.write(b);
      we.close();
      ipc::stream_writer mem(first.schema, ctx, f, {}, {}, wo);
      for (const record_batch& b : batches) mem.write(b);
      ipc::stream_writer mem_all(first.schema, ctx, f, {}, {}, wo);
      mem_all.write(batches);  // in one call: the layouts made together
      const bytes got = read_file(all);
      EXPECT_EQ(first_difference(got, read_file(each)), "");
      EXPECT_EQ(first_difference(got, to_bytes(mem.finish())), "");
      EXPECT_EQ(first_difference(got, to_bytes(mem_all.finish())), "");
      std::vector<record_batch> back;
      if (f == fmt::stream) {
        back = ipc::stream_reader(on_host(got), decompressing()).read_all();
      } else {
        back = ipc::file_reader(on_host(got), decompressing()).read_all();
      }
      ASSERT_EQ(back.size(), batches.size());
      for (std::size_t i = 0; i < back.size(); ++i) {
        for (std::size_t k = 0; k < back[i].columns.size(); ++k) {
          EXPECT_TRUE(same_values(to_host(batches[i].columns[k]), back[i].columns[k])) << i << " " << k;
        }
      }
    }
  }
  cuarrow::set_transfer_options(saved);
}

// A file writer's stats: the counts the in-memory writer gives for the
// same batches, its time in writing the file, none in the phases of
// finishing a stream in device memory.
TEST(IpcFileWriter, StatsCountWhatTheInMemoryWriterCounts) {
  temp_dir dir;
  const cuarrow::context ctx = cuarrow::context::get(0);
  random_arrays gen(20261205);
  record_batch host;
  host.schema.fields = {field("i", int64()), field("s", utf8())};
  host.num_rows = 1000;
  for (const auto& fld : host.schema.fields) host.columns.push_back(gen.array(fld.type, host.num_rows));
  const std::vector<record_batch> batches = {to_device(host, ctx), host.slice(3, 500)};
  for (fmt f : {fmt::stream, fmt::file}) {
    ipc::file_writer fw((dir / "stats").string(), host.schema, f);
    fw.write(batches);
    fw.close();
    ipc::stream_writer mem(host.schema, ctx, f);
    mem.write(batches);
    (void)mem.finish();
    const ipc::write_stats a = fw.stats(), b = mem.stats();
    EXPECT_EQ(a.batches, 2);
    EXPECT_EQ(a.batches, b.batches);
    EXPECT_EQ(a.messages, b.messages);
    EXPECT_EQ(a.body_pieces, b.body_pieces);
    EXPECT_GT(a.file_write_seconds, 0.0);
    EXPECT_GT(a.layout_seconds, 0.0);
    EXPECT_EQ(a.allocate_seconds + a.queue_seconds + a.wait_seconds, 0.0) << "nothing finished in device memory";
    EXPECT_EQ(a.compress_seconds, 0.0) << "uncompressed";
  }
  // Compressed: the copy to the host is part of the compression's time.
  for (ipc::compression_codec c : ipc::available_codecs()) {
    SCOPED_TRACE(ipc::to_string(c));
    ipc::write_options wo;
    wo.compression = c;
    ipc::file_writer fw((dir / "compressed").string(), host.schema, fmt::file, {}, {}, wo);
    fw.write(batches);
    fw.close();
    const ipc::write_stats st = fw.stats();
    EXPECT_GT(st.compress_copy_seconds, 0.0);
    EXPECT_GT(st.compress_seconds, st.compress_copy_seconds);
  }
}

// Random batches (nested, sliced, with nulls), on the device and on the
// host: the file holds what the in-memory writer produces.
TEST(IpcFileWriter, RandomBatchesEqualTheInMemoryWriter) {
  temp_dir dir;
  const cuarrow::context ctx = cuarrow::context::get(0);
  random_arrays gen(20261204);
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE(round);
    const record_batch host = gen.batch(4, gen.uniform(0, 300), 3);
    const record_batch dev = to_device(host, ctx);
    for (const record_batch* b : {&host, &dev}) {
      for (fmt f : {fmt::stream, fmt::file}) {
        ipc::stream_writer mem(b->schema, ctx, f);
        mem.write(*b);
        mem.write(*b);
        const fs::path out = dir / "random";
        ipc::file_writer w(out.string(), b->schema, f);
        w.write(*b);
        w.write(*b);
        w.close();
        EXPECT_EQ(first_difference(read_file(out), to_bytes(mem.finish())), "");
      }
    }
  }
}

// The bytes of one device allocation between two buffers are not the
// body's padding: the file holds zeros there whatever the source holds.
TEST(IpcFileWriter, PaddingIsZerosWhateverLiesBetweenTheSourceBuffers) {
  temp_dir dir;
  const cuarrow::context ctx = cuarrow::context::get(0);
  bytes fill(64, std::byte{0xEE});
  for (int i = 0; i < 3; ++i) std::memcpy(fill.data() + 4 * i, &i, 4);       // a: 0 1 2 (12 bytes)
  for (int i = 0; i < 3; ++i) std::memcpy(fill.data() + 16 + 4 * i, &i, 4);  // b at 16: 0 1 2
  const cuarrow::buffer one = on_device(fill);
  record_batch b;
  b.schema.fields = {field("a", int32()), field("b", int32())};
  b.num_rows = 3;
  for (std::int64_t at : {0, 16}) {
    array_data a;
    a.type = int32();
    a.length = 3;
    a.null_count = 0;
    a.buffers = {cuarrow::buffer(), one.slice(at, 12)};
    b.columns.push_back(a);
  }
  const fs::path out = dir / "padding.arrow";
  ipc::file_writer w(out.string(), b.schema);
  w.write(b);
  w.close();
  ipc::stream_writer mem(b.schema, ctx, fmt::file);
  mem.write(b);
  const bytes expected = to_bytes(mem.finish());
  EXPECT_EQ(first_difference(read_file(out), expected), "");
  const std::vector<record_batch> back = ipc::file_reader(on_host(read_file(out))).read_all();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(same_values(to_host(b.columns[1]), back[0].columns[1]));
}

// Chunks of the staging pipeline smaller than a buffer: a buffer is written
// by several workers, each its part at its offset.
TEST(IpcFileWriter, ChunksSmallerThanABuffer) {
  temp_dir dir;
  const cuarrow::context ctx = cuarrow::context::get(0);
  const cuarrow::transfer_options saved = cuarrow::get_transfer_options();
  cuarrow::transfer_options o = saved;
  o.staging_chunk_bytes = 64 << 10;
  o.staging_threads = 3;
  cuarrow::set_transfer_options(o);
  std::vector<std::optional<std::int64_t>> v;
  std::vector<std::optional<std::string>> s;
  for (std::int64_t i = 0; i < 150000; ++i) {
    v.push_back(i % 7 == 0 ? std::nullopt : std::optional<std::int64_t>(i * 2654435761));
    if (i < 20000) s.push_back("value " + std::to_string(i * 31));
  }
  record_batch host;
  host.schema.fields = {field("v", int64()), field("s", utf8())};
  host.num_rows = 20000;
  array_data big = primitive<std::int64_t>(int64(), v);
  big.length = 20000;  // a slice: its bytes, then 130000 values more of its buffer
  big.null_count = -1;
  host.columns = {big, strings(utf8(), s)};
  record_batch wide;
  wide.schema.fields = {field("v", int64())};
  wide.num_rows = 150000;
  wide.columns = {primitive<std::int64_t>(int64(), v)};  // 1.2 MB of values: 18 chunks
  for (const record_batch& b : {host, wide}) {
    const record_batch dev = to_device(b, ctx);
    ipc::stream_writer mem(dev.schema, ctx, fmt::file);
    mem.write(dev);
    const fs::path out = dir / "chunks.arrow";
    ipc::file_writer w(out.string(), dev.schema);
    w.write(dev);
    w.close();
    EXPECT_EQ(first_difference(read_file(out), to_bytes(mem.finish())), "");
  }
  cuarrow::set_transfer_options(saved);
}

// ---- compressed ---------------------------------------------------------------------

// Every sample type, compressed with every codec this build has, into a
// file and a stream: read back equal; the file writer and the in-memory
// writer give the same bytes.
TEST(IpcFileWriterCompressed, EverySampleRoundTrips) {
  temp_dir dir;
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::vector<ipc::compression_codec> codecs = ipc::available_codecs();
  ASSERT_FALSE(codecs.empty()) << "built without liblz4 and libzstd";
  for (ipc::compression_codec c : codecs) {
    for (auto& [name, a] : sample_arrays()) {
      SCOPED_TRACE(std::string(ipc::to_string(c)) + " " + name);
      record_batch b;
      b.schema.fields = {field("x", a.type)};
      b.num_rows = a.length;
      b.columns = {to_device(a, ctx)};
      ipc::write_options wo;
      wo.compression = c;
      for (fmt f : {fmt::stream, fmt::file}) {
        const fs::path out = dir / "sample";
        ipc::file_writer w(out.string(), b.schema, f, {}, {}, wo);
        w.write(b);
        w.write(b);
        w.close();
        const bytes got = read_file(out);
        ipc::stream_writer mem(b.schema, ctx, f, {}, {}, wo);
        mem.write(b);
        mem.write(b);
        EXPECT_EQ(first_difference(got, to_bytes(mem.finish())), "");
        std::vector<record_batch> back;
        if (f == fmt::stream) {
          back = ipc::stream_reader(on_host(got), decompressing()).read_all();
        } else {
          back = ipc::file_reader(on_host(got), decompressing()).read_all();
        }
        ASSERT_EQ(back.size(), 2u);
        for (const record_batch& r : back) EXPECT_TRUE(same_values(a, r.columns[0]));
        // Without the hook the bodies are refused: they are compressed.
        if (a.length > 0 && f == fmt::file) {
          EXPECT_THROW((void)ipc::file_reader(on_host(got)).read_all(), ipc::invalid_message);
        }
      }
    }
  }
}

// Compressed, a many-batch write goes in groups (write_options::
// compress_group_bytes); into a file, each group is written while the next
// one compresses.  The bytes do not depend on the groups, nor on the
// buffers above 4 MiB being compressed in chunks, and equal the in-memory
// writer's.
TEST(IpcFileWriterCompressed, GroupsWrittenWhileTheNextCompressesGiveTheSameBytes) {
  temp_dir dir;
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::vector<ipc::compression_codec> codecs = ipc::available_codecs();
  ASSERT_FALSE(codecs.empty()) << "built without liblz4 and libzstd";
  record_batch b;
  b.schema.fields = {field("v", int64()), field("s", utf8())};
  std::vector<record_batch> batches;
  for (int i = 0; i < 6; ++i) {
    // Batch 2 holds a 5.6 MB int64 buffer (two chunks); the others are small.
    const std::size_t rows = i == 2 ? 700000 : 3000 + 100 * i;
    std::vector<std::optional<std::int64_t>> v(rows);
    std::vector<std::optional<std::string>> t(rows);
    for (std::size_t k = 0; k < rows; ++k) {
      v[k] = static_cast<std::int64_t>((k * 2654435761u) % 100000) + i;
      if (k % 7 != 0) t[k] = "row " + std::to_string(k % 1000);
    }
    b.num_rows = static_cast<std::int64_t>(rows);
    b.columns = {to_device(primitive<std::int64_t>(int64(), v), ctx), to_device(strings(utf8(), t), ctx)};
    batches.push_back(b);
  }
  for (ipc::compression_codec c : codecs) {
    SCOPED_TRACE(ipc::to_string(c));
    bytes first;
    for (std::int64_t group_bytes : {std::int64_t{0}, std::int64_t{1}, std::int64_t{200000}}) {
      SCOPED_TRACE(group_bytes);
      ipc::write_options wo;
      wo.compression = c;
      wo.compress_group_bytes = group_bytes;
      const fs::path out = dir / "groups.arrow";
      ipc::file_writer w(out.string(), b.schema, fmt::file, {}, {}, wo);
      w.write(batches);
      w.close();
      const bytes got = read_file(out);
      if (first.empty()) {
        first = got;
        ipc::stream_writer mem(b.schema, ctx, fmt::file, {}, {}, wo);
        mem.write(batches);
        EXPECT_EQ(first_difference(got, to_bytes(mem.finish())), "");
        const std::vector<record_batch> back = ipc::file_reader(on_host(got), decompressing()).read_all();
        ASSERT_EQ(back.size(), batches.size());
        for (std::size_t i = 0; i < back.size(); ++i) {
          EXPECT_TRUE(same_values(to_host(batches[i]), back[i])) << "batch " << i;
        }
      } else {
        EXPECT_EQ(first_difference(got, first), "");
      }
    }
  }
  ipc::write_options bad;
  bad.compression = codecs.front();
  bad.compress_group_bytes = -1;
  EXPECT_THROW(ipc::file_writer((dir / "bad.arrow").string(), b.schema, fmt::file, {}, {}, bad),
               cuarrow::invalid_argument);
}

// Dictionaries are compressed like the batches (Arrow C++ writes dictionary
// batches with the same options), and the golden dictionary stream reads
// back equal after a compressed round trip.
TEST(IpcFileWriterCompressed, DictionaryBatchesAreCompressedToo) {
  temp_dir dir;
  for (ipc::compression_codec c : ipc::available_codecs()) {
    SCOPED_TRACE(ipc::to_string(c));
    const bytes golden = load("dictionaries.arrows");
    ipc::stream_reader r(on_device(golden));
    ipc::write_options wo;
    wo.compression = c;
    const fs::path out = dir / "dictionaries.arrows";
    ipc::file_writer w(out.string(), r.schema().schema, fmt::stream, {}, {}, wo);
    const std::vector<record_batch> batches = r.read_all();
    for (const record_batch& b : batches) w.write(b);
    w.close();
    const bytes got = read_file(out);
    int dictionary_batches = 0;
    std::int64_t at = 0;
    while (std::optional<ipc::message> m = ipc::read_message(on_host(got), at)) {
      at += m->size;
      if (m->kind() == ipc::message_kind::dictionary_batch) {
        ++dictionary_batches;
        EXPECT_EQ(std::get<ipc::dictionary_batch_header>(m->metadata.header).data.compression, c);
      } else if (m->kind() == ipc::message_kind::record_batch) {
        EXPECT_EQ(std::get<ipc::record_batch_header>(m->metadata.header).compression, c);
      }
    }
    EXPECT_GT(dictionary_batches, 0);
    const std::vector<record_batch> back = ipc::stream_reader(on_host(got), decompressing()).read_all();
    ASSERT_EQ(back.size(), batches.size());
    for (std::size_t i = 0; i < back.size(); ++i) {
      for (std::size_t k = 0; k < back[i].columns.size(); ++k) {
        EXPECT_TRUE(same_values(to_host(batches[i].columns[k]), back[i].columns[k])) << i << " " << k;
      }
    }
  }
}

// The messages of a stream, with the framed length prefix of each body
// buffer (the uncompressed length, or -1).
struct message_summary {
  ipc::message_metadata metadata;
  std::vector<std::byte> flatbuffer;
  std::vector<std::int64_t> prefixes;  // per non-empty buffer
  std::vector<bool> empty;             // per buffer
};

std::vector<message_summary> summarize(const bytes& stream) {
  std::vector<message_summary> out;
  const cuarrow::buffer src = on_host(stream);
  std::int64_t at = 0;
  while (std::optional<ipc::message> m = ipc::read_message(src, at)) {
    at += m->size;
    message_summary s{m->metadata, m->flatbuffer, {}, {}};
    if (const auto* h = std::get_if<ipc::record_batch_header>(&m->metadata.header)) {
      for (const ipc::body_range& r : h->buffers) {
        s.empty.push_back(r.length == 0);
        if (r.length == 0) continue;
        std::int64_t prefix = 0;
        std::memcpy(&prefix, m->body.host_data() + r.offset, 8);
        s.prefixes.push_back(prefix);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

// pyarrow's compressed streams (make_golden.py, make_codec_data.py) read
// and written again with the same codec: the same messages, the schema
// byte for byte, each record batch with the same nodes, the same number of
// buffers, the same empty ones, the same compression field and the same
// length prefix per buffer (the frames' bytes themselves depend on the
// codec library's version and are not compared), 8-byte aligned; the data
// reads back equal.
TEST(IpcFileWriterCompressed, PyarrowCompressedStreamsHaveTheSameLayout) {
  temp_dir dir;
  struct sample {
    const char* name;
    ipc::compression_codec codec;
  };
  for (const sample& g :
       {sample{"lz4.arrows", ipc::compression_codec::lz4_frame}, sample{"zstd.arrows", ipc::compression_codec::zstd},
        sample{"stream_lz4.arrows", ipc::compression_codec::lz4_frame},
        sample{"stream_zstd.arrows", ipc::compression_codec::zstd}}) {
    if (!ipc::codec_available(g.codec)) {
      ADD_FAILURE() << "this build lacks " << ipc::to_string(g.codec) << ": " << g.name << " not compared";
      continue;
    }
    SCOPED_TRACE(g.name);
    const bytes golden = load(g.name);
    ipc::stream_reader r(on_host(golden), decompressing());
    const std::vector<record_batch> batches = r.read_all();
    ASSERT_FALSE(batches.empty());
    ipc::write_options wo;
    wo.compression = g.codec;
    const fs::path out = dir / g.name;
    ipc::file_writer w(out.string(), r.schema().schema, fmt::stream, {}, {}, wo);
    for (const record_batch& b : batches) w.write(to_device(b, cuarrow::context::get(0)));
    w.close();
    const bytes got = read_file(out);
    const std::vector<message_summary> ours = summarize(got), theirs = summarize(golden);
    ASSERT_EQ(ours.size(), theirs.size());
    EXPECT_EQ(ours[0].flatbuffer, theirs[0].flatbuffer) << "the schema message";
    for (std::size_t i = 1; i < ours.size(); ++i) {
      SCOPED_TRACE(i);
      const auto* a = std::get_if<ipc::record_batch_header>(&ours[i].metadata.header);
      const auto* b = std::get_if<ipc::record_batch_header>(&theirs[i].metadata.header);
      ASSERT_TRUE(a != nullptr && b != nullptr);
      EXPECT_EQ(a->length, b->length);
      EXPECT_EQ(a->nodes, b->nodes);
      EXPECT_EQ(a->buffers.size(), b->buffers.size());
      EXPECT_EQ(a->compression, b->compression);
      EXPECT_EQ(a->variadic_buffer_counts, b->variadic_buffer_counts);
      EXPECT_EQ(ours[i].empty, theirs[i].empty);
      EXPECT_EQ(ours[i].prefixes, theirs[i].prefixes);
      for (const ipc::body_range& x : a->buffers) EXPECT_EQ(x.offset % 8, 0);
      EXPECT_EQ(ours[i].metadata.body_length % 8, 0);
    }
    const std::vector<record_batch> back = ipc::stream_reader(on_host(got), decompressing()).read_all();
    ASSERT_EQ(back.size(), batches.size());
    for (std::size_t i = 0; i < back.size(); ++i) {
      for (std::size_t k = 0; k < back[i].columns.size(); ++k) {
        EXPECT_TRUE(same_values(batches[i].columns[k], back[i].columns[k]));
      }
    }
  }
}

// ---- errors ---------------------------------------------------------------------------

TEST(IpcFileWriterErrors, APathThatCannotBeCreatedIsAnIoErrorNamingIt) {
  temp_dir dir;
  record_batch b;
  b.schema.fields = {field("i", int32())};
  const std::string missing = (dir / "no such directory" / "x.arrow").string();
  try {
    ipc::file_writer w(missing, b.schema);
    ADD_FAILURE() << "created a file in a missing directory";
  } catch (const cuarrow::io_error& e) {
    EXPECT_EQ(e.path(), missing);
    EXPECT_EQ(e.error_code(), ENOENT);
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  // A directory is not a file.
  EXPECT_THROW(ipc::file_writer((dir / "").string(), b.schema), cuarrow::io_error);
}

// A file that stops taking bytes in the middle of a body (the file size
// limit standing in for a full disk): an io_error naming the file, the
// partial file removed, the writer ended, and nothing leaked: the next
// writer works.
TEST(IpcFileWriterErrors, AWriteFailureRemovesThePartialFile) {
  temp_dir dir;
  const cuarrow::context ctx = cuarrow::context::get(0);
  std::vector<std::optional<std::int64_t>> v(300000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>(i);
  record_batch b;
  b.schema.fields = {field("v", int64())};
  b.num_rows = static_cast<std::int64_t>(v.size());
  b.columns = {to_device(primitive<std::int64_t>(int64(), v), ctx)};
  const fs::path out = dir / "limited.arrow";
  {
    struct rlimit saved {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
    auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
    struct rlimit limited = saved;
    limited.rlim_cur = 1 << 20;  // 1 MiB of a 2.4 MB body
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
    std::string what;
    int code = 0;
    ipc::file_writer w(out.string(), b.schema);
    try {
      w.write(b);
    } catch (const cuarrow::io_error& e) {
      what = e.what();
      code = e.error_code();
      EXPECT_EQ(e.path(), out.string());
    }
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, old_handler);
    EXPECT_EQ(code, EFBIG) << what;
    EXPECT_NE(what.find(out.string()), std::string::npos) << what;
    EXPECT_FALSE(fs::exists(out)) << "the partial file is removed";
    EXPECT_THROW(w.write(b), cuarrow::invalid_argument);
    EXPECT_THROW(w.close(), cuarrow::invalid_argument);
  }
  ipc::file_writer w(out.string(), b.schema);
  w.write(b);
  w.close();
  const std::vector<record_batch> back = ipc::file_reader(on_host(read_file(out))).read_all();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(same_values(to_host(b.columns[0]), back[0].columns[0]));
}

// A failure in the middle of a many-batch job (the file size limit hit
// while the pipeline's workers write): the partial file removed, the
// writer ended, and the next writer works.
TEST(IpcFileWriterErrors, AFailureInAManyBatchJobRemovesThePartialFile) {
  temp_dir dir;
  const cuarrow::context ctx = cuarrow::context::get(0);
  const cuarrow::transfer_options saved_options = cuarrow::get_transfer_options();
  cuarrow::transfer_options o = saved_options;
  o.staging_chunk_bytes = 64 << 10;
  o.staging_threads = 4;
  cuarrow::set_transfer_options(o);
  // Values that do not compress: compressed bodies are as large, and are
  // written by the pipeline's workers in parallel too.
  std::vector<std::optional<std::int64_t>> v(40000);
  std::uint64_t x = 88172645463325252ull;
  for (auto& e : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    e = static_cast<std::int64_t>(x);
  }
  record_batch b;
  b.schema.fields = {field("v", int64())};
  b.num_rows = static_cast<std::int64_t>(v.size());
  std::vector<record_batch> batches;
  for (int i = 0; i < 8; ++i) {  // 8 bodies of 320 KB
    b.columns = {to_device(primitive<std::int64_t>(int64(), v), ctx)};
    batches.push_back(b);
  }
  std::vector<std::pair<std::optional<ipc::compression_codec>, std::int64_t>> cases = {{std::nullopt, 0}};
  for (ipc::compression_codec c : ipc::available_codecs()) {
    cases.emplace_back(c, 0);
    cases.emplace_back(c, 1);  // a group a batch: the failure comes from a group written while the next compresses
  }
  for (const auto& [c, group_bytes] : cases) {
    SCOPED_TRACE(std::string(c ? ipc::to_string(*c) : "uncompressed") + ", groups of " + std::to_string(group_bytes));
    ipc::write_options wo;
    wo.compression = c;
    wo.compress_group_bytes = group_bytes;
    const fs::path out = dir / "limited.arrow";
    {
      struct rlimit saved {};
      ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
      auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
      struct rlimit limited = saved;
      limited.rlim_cur = 1 << 20;  // 1 MiB of 2.6 MB
      ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
      int code = 0;
      ipc::file_writer w(out.string(), b.schema, fmt::file, {}, {}, wo);
      try {
        w.write(batches);
      } catch (const cuarrow::io_error& e) {
        code = e.error_code();
      }
      ::setrlimit(RLIMIT_FSIZE, &saved);
      std::signal(SIGXFSZ, old_handler);
      EXPECT_EQ(code, EFBIG);
      EXPECT_FALSE(fs::exists(out)) << "the partial file is removed";
      EXPECT_THROW(w.write(batches), cuarrow::invalid_argument);
    }
    ipc::file_writer w(out.string(), b.schema, fmt::file, {}, {}, wo);
    w.write(batches);
    w.close();
    const std::vector<record_batch> back = ipc::file_reader(on_host(read_file(out)), decompressing()).read_all();
    ASSERT_EQ(back.size(), batches.size());
    EXPECT_TRUE(same_values(to_host(batches[7].columns[0]), back[7].columns[0]));
  }
  cuarrow::set_transfer_options(saved_options);
}

// A many-batch call with a batch of another schema, or a metadata count
// that is neither 0 nor one per batch, writes nothing; the writer goes on.
TEST(IpcFileWriterErrors, AManyBatchCallWithABadBatchWritesNothing) {
  temp_dir dir;
  record_batch b;
  b.schema.fields = {field("i", int32())};
  b.num_rows = 2;
  b.columns = {primitive<std::int32_t>(int32(), {1, 2})};
  record_batch other = b;
  other.schema.fields = {field("j", int32())};
  const fs::path out = dir / "refused.arrows";
  ipc::file_writer w(out.string(), b.schema, fmt::stream);
  const std::int64_t before = w.bytes_written();
  const std::vector<record_batch> mixed = {b, other, b};
  EXPECT_THROW(w.write(mixed), cuarrow::invalid_argument);
  const std::vector<record_batch> two = {b, b};
  const std::vector<key_value_metadata> one(1);
  EXPECT_THROW(w.write(two, one), cuarrow::invalid_argument);
  EXPECT_EQ(w.bytes_written(), before);
  w.write(two);
  w.write(std::span<const record_batch>{});  // nothing to write
  w.close();
  EXPECT_EQ(ipc::stream_reader(on_host(read_file(out))).read_all().size(), 2u);
}

TEST(IpcFileWriterErrors, AWriterNotClosedRemovesItsFile) {
  temp_dir dir;
  record_batch b;
  b.schema.fields = {field("i", int32())};
  b.num_rows = 2;
  b.columns = {primitive<std::int32_t>(int32(), {1, 2})};
  const fs::path out = dir / "unclosed.arrows";
  {
    ipc::file_writer w(out.string(), b.schema, fmt::stream);
    w.write(b);
    EXPECT_TRUE(fs::exists(out));
  }
  EXPECT_FALSE(fs::exists(out));
  ipc::file_writer w(out.string(), b.schema, fmt::stream);
  record_batch other = b;
  other.schema.fields = {field("j", int32())};
  EXPECT_THROW(w.write(other), cuarrow::invalid_argument);
  w.write(b);  // the writer goes on after a refused batch
  w.close();
  w.close();  // a second close does nothing
  EXPECT_THROW(w.write(b), cuarrow::invalid_argument);
  EXPECT_EQ(ipc::stream_reader(on_host(read_file(out))).read_all().size(), 1u);
}

}  // namespace
}  // namespace cuarrow_ipc_file_writer_test
