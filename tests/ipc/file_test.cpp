// Arrow IPC files and streams read by path into device memory
// (include/cuarrow/ipc/file.hpp): pyarrow's golden files written to a
// temporary directory and read back, compared on the host with what the
// in-memory readers (stream.hpp) give for the same bytes; projection, random
// access, compressed bodies, small staging chunks, and hostile or missing
// files.
#include "cuarrow/ipc/file.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "arrow/arrow_test_util.hpp"
#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/ipc/codec.hpp"
#include "cuarrow/ipc/metadata.hpp"
#include "cuarrow/ipc/stream.hpp"
#include "fault_api.hpp"
#include "temp_files.hpp"
#include "test_data.hpp"

namespace cuarrow_ipc_file_test {
namespace {

using namespace cuarrow::arrow;      // NOLINT
using namespace cuarrow_arrow_test;  // NOLINT
namespace ipc = cuarrow::ipc;
namespace fs = std::filesystem;

using test_data::load;

cuarrow::buffer on_host(const std::vector<std::byte>& bytes) {
  cuarrow::buffer b = cuarrow::allocate_host(static_cast<std::int64_t>(bytes.size()));
  if (!bytes.empty()) std::memcpy(b.mutable_host_data(), bytes.data(), bytes.size());
  return b;
}

class IpcFile : public cuarrow_test::temp_files_test {
 protected:
  std::string write_golden(const std::string& name) const { return write(name, load(name)); }
};

cuarrow::context ctx() { return cuarrow::context::get(0); }

// Host decompression for the in-memory readers (they take a hook).
ipc::read_options with_host_decompress() {
  ipc::read_options o;
  o.decompress = [](ipc::compression_codec c, const cuarrow::buffer& framed) {
    const std::span<const std::byte> in(static_cast<const std::byte*>(framed.host_data()),
                                        static_cast<std::size_t>(framed.size()));
    const std::int64_t n = ipc::decompressed_size(in, std::int64_t{1} << 30);
    cuarrow::buffer out = cuarrow::allocate_host(n);
    ipc::decompress(c, in, {static_cast<std::byte*>(out.mutable_host_data()), static_cast<std::size_t>(n)});
    return out;
  };
  return o;
}

// The batch's buffers live on the device (one allocation per batch).
void expect_on_device(const record_batch& b) {
  for (const array_data& c : b.columns) {
    for (const cuarrow::buffer& buf : c.buffers) {
      if (buf.size() > 0) {
        EXPECT_EQ(buf.type(), cuarrow::device_type::cuda);
      }
    }
  }
}

void expect_same(const std::vector<record_batch>& expected, const std::vector<record_batch>& got) {
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    expect_on_device(got[i]);
    EXPECT_TRUE(same_values(expected[i], to_host(got[i]))) << "batch " << i;
  }
}

const char* const kFiles[] = {"file_primitives.arrow", "file_dictionaries.arrow", "file_wide.arrow"};
const char* const kStreams[] = {"primitives.arrows",   "binaries.arrows",         "nested.arrows",
                                "metadata.arrows",     "empty_batch.arrows",      "empty_schema.arrows",
                                "dictionaries.arrows", "dictionary_deltas.arrows"};
const char* const kCompressedFiles[] = {"file_lz4.arrow", "file_zstd.arrow"};
const char* const kCompressedStreams[] = {"lz4.arrows", "zstd.arrows", "stream_lz4.arrows", "stream_zstd.arrows"};

TEST_F(IpcFile, GoldenFilesReadAsTheInMemoryReaderReadsThem) {
  for (const char* name : kFiles) {
    SCOPED_TRACE(name);
    const std::string path = write_golden(name);
    ipc::file_reader mem(on_host(load(name)));
    ipc::device_file_reader r(path, ctx());
    EXPECT_EQ(r.schema(), mem.schema());
    EXPECT_EQ(r.footer().record_batches, mem.footer().record_batches);
    EXPECT_EQ(r.footer().custom_metadata, mem.footer().custom_metadata);
    ASSERT_EQ(r.num_record_batches(), mem.num_record_batches());
    expect_same(mem.read_all(), r.read_all());
    EXPECT_EQ(r.last_read_path(), ipc::read_path::staging);
    for (int i = 0; i < r.num_record_batches(); ++i) {
      EXPECT_EQ(r.read_batch_with_custom_metadata(i).custom_metadata,
                mem.read_batch_with_custom_metadata(i).custom_metadata);
    }
  }
}

TEST_F(IpcFile, GoldenStreamsReadAsTheInMemoryReaderReadsThem) {
  for (const char* name : kStreams) {
    SCOPED_TRACE(name);
    const std::vector<std::byte> bytes = load(name);
    const std::string path = write(name, bytes);
    ipc::stream_reader mem(on_host(bytes));
    ipc::device_stream_reader r(path, ctx());
    EXPECT_EQ(r.schema(), mem.schema());
    std::vector<record_batch> expected, got;
    while (std::optional<ipc::batch_with_metadata> e = mem.read_next_with_custom_metadata()) {
      std::optional<ipc::batch_with_metadata> g = r.read_next_with_custom_metadata();
      ASSERT_TRUE(g.has_value());
      EXPECT_EQ(g->custom_metadata, e->custom_metadata);
      expected.push_back(std::move(e->batch));
      got.push_back(std::move(g->batch));
    }
    EXPECT_FALSE(r.read_next().has_value());
    EXPECT_FALSE(r.read_next().has_value()) << "stays at the end";
    expect_same(expected, got);
    EXPECT_EQ(r.position(), mem.position());
  }
}

TEST_F(IpcFile, CompressedBodiesDecompressToTheSameData) {
  ASSERT_TRUE(ipc::codec_available(ipc::compression_codec::lz4_frame));
  ASSERT_TRUE(ipc::codec_available(ipc::compression_codec::zstd));
  for (const char* name : kCompressedFiles) {
    SCOPED_TRACE(name);
    const std::string path = write_golden(name);
    ipc::file_reader mem(on_host(load(name)), with_host_decompress());
    ipc::device_file_reader r(path, ctx());
    expect_same(mem.read_all(), r.read_all());
    // The decompressed int64 column is 160 KB, the file much smaller.
    EXPECT_GT(r.read_batch(0).columns[0].buffers[1].size(), 100 << 10);
    EXPECT_LT(static_cast<std::int64_t>(fs::file_size(path)), 100 << 10);
  }
  for (const char* name : kCompressedStreams) {
    SCOPED_TRACE(name);
    const std::string path = write_golden(name);
    ipc::stream_reader mem(on_host(load(name)), with_host_decompress());
    ipc::device_stream_reader r(path, ctx());
    expect_same(mem.read_all(), r.read_all());
  }
}

TEST_F(IpcFile, ReadersSayWhereTheirBatchesLive) {
  // What a batch without any buffer (an empty one) is declared to be.
  const cuarrow::context last = cuarrow::context::get(cuarrow::device_count() - 1);
  const std::vector<std::byte> bytes = load("file_wide.arrow");
  const std::string path = write("wide.arrow", bytes);
  EXPECT_EQ(ipc::device_file_reader(path, last).placement(),
            placement::of(cuarrow::device_type::cuda, last.device_number()));
  const std::string spath = write_golden("empty_batch.arrows");
  EXPECT_EQ(ipc::device_stream_reader(spath, last).placement(),
            placement::of(cuarrow::device_type::cuda, last.device_number()));
  EXPECT_EQ(ipc::file_reader(on_host(bytes)).placement(), placement::of(cuarrow::device_type::cpu, -1));
  const cuarrow::buffer on_device =
      cuarrow::copy_to_device(last, bytes.data(), static_cast<std::int64_t>(bytes.size()));
  ipc::file_reader dev(on_device);
  EXPECT_EQ(dev.placement(), placement::of(cuarrow::device_type::cuda, last.device_number()));
  EXPECT_EQ(placement_of(dev.read_batch(0).columns[0], {}), dev.placement()) << "where its buffers are";
  EXPECT_EQ(ipc::stream_reader(on_host(load("empty_batch.arrows"))).placement(),
            placement::of(cuarrow::device_type::cpu, -1));
}

TEST_F(IpcFile, BatchesAreReadInAnyOrder) {
  const std::string path = write_golden("file_wide.arrow");
  ipc::file_reader mem(on_host(load("file_wide.arrow")));
  ipc::device_file_reader r(path, ctx());
  ASSERT_EQ(r.num_record_batches(), 4);
  for (const int i : {3, 0, 2, 1, 3, 1}) {
    SCOPED_TRACE(i);
    const record_batch b = r.read_batch(i);
    EXPECT_EQ(b.num_rows, mem.read_batch(i).num_rows);
    EXPECT_TRUE(same_values(mem.read_batch(i), to_host(b)));
  }
  EXPECT_EQ(r.read_batch(1).num_rows, 0) << "the empty batch";
  EXPECT_THROW(r.read_batch(4), cuarrow::out_of_range);
  EXPECT_THROW(r.read_batch(-1), cuarrow::out_of_range);
}

// Only the chosen columns' byte ranges (and their dictionaries) are read.
TEST_F(IpcFile, ProjectionReadsOnlyTheChosenColumns) {
  const std::string path = write_golden("file_wide.arrow");
  ipc::device_file_reader full(path, ctx());
  const std::vector<record_batch> all = full.read_all();
  const std::vector<int> chosen = {12, 0, 14};  // dict, i0, struct
  ipc::file_read_options o;
  o.columns = chosen;
  ipc::device_file_reader part(path, ctx(), o);
  ASSERT_EQ(part.schema().schema.fields.size(), chosen.size());
  for (std::size_t k = 0; k < chosen.size(); ++k) {
    EXPECT_EQ(part.schema().schema.fields[k], full.schema().schema.fields[static_cast<std::size_t>(chosen[k])]);
  }
  ASSERT_EQ(part.schema().dictionaries.size(), 1u);
  EXPECT_EQ(part.schema().dictionaries[0].path, std::vector<int>{0});
  const std::vector<record_batch> got = part.read_all();
  ASSERT_EQ(got.size(), all.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].columns.size(), chosen.size());
    EXPECT_EQ(got[i].num_rows, all[i].num_rows);
    for (std::size_t k = 0; k < chosen.size(); ++k) {
      EXPECT_TRUE(same_values(to_host(all[i].columns[static_cast<std::size_t>(chosen[k])]), to_host(got[i].columns[k])))
          << "batch " << i << " column " << chosen[k];
    }
  }
  // 3 of 16 columns (two small ones): well under half of the bytes.
  EXPECT_LT(part.bytes_read() * 3, full.bytes_read()) << part.bytes_read() << " of " << full.bytes_read();

  // No dictionary column chosen: no dictionary read.
  o.columns = std::vector<int>{3};
  ipc::device_file_reader one(path, ctx(), o);
  EXPECT_EQ(one.dictionaries().get(0), nullptr);
  const record_batch b = one.read_batch(0);
  EXPECT_TRUE(same_values(to_host(all[0].columns[3]), to_host(b.columns[0])));

  o.columns = std::vector<int>{16};
  EXPECT_THROW(ipc::device_file_reader(path, ctx(), o), cuarrow::invalid_argument);
  o.columns = std::vector<int>{1, 1};
  EXPECT_THROW(ipc::device_file_reader(path, ctx(), o), cuarrow::invalid_argument);
}

TEST_F(IpcFile, ProjectionOfStreamsAndCompressedFiles) {
  {
    const std::vector<std::byte> bytes = load("dictionary_deltas.arrows");
    const std::string path = write("deltas.arrows", bytes);
    ipc::stream_reader mem(on_host(bytes));
    const std::vector<record_batch> all = mem.read_all();
    ASSERT_GE(all.size(), 1u);
    ASSERT_GE(all[0].columns.size(), 2u);
    const int last = static_cast<int>(all[0].columns.size()) - 1;
    ipc::file_read_options o;
    o.columns = std::vector<int>{last, 0};
    ipc::device_stream_reader r(path, ctx(), o);
    const std::vector<record_batch> got = r.read_all();
    ASSERT_EQ(got.size(), all.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(same_values(all[i].columns[static_cast<std::size_t>(last)], to_host(got[i].columns[0])));
      EXPECT_TRUE(same_values(all[i].columns[0], to_host(got[i].columns[1])));
    }
  }
  for (const char* name : kCompressedFiles) {
    SCOPED_TRACE(name);
    const std::string path = write_golden(name);
    ipc::file_reader mem(on_host(load(name)), with_host_decompress());
    ipc::file_read_options o;
    o.columns = std::vector<int>{2, 1};
    ipc::device_file_reader r(path, ctx(), o);
    for (int i = 0; i < r.num_record_batches(); ++i) {
      const record_batch e = mem.read_batch(i);
      const record_batch g = r.read_batch(i);
      EXPECT_TRUE(same_values(e.columns[2], to_host(g.columns[0])));
      EXPECT_TRUE(same_values(e.columns[1], to_host(g.columns[1])));
    }
  }
}

// Chunks smaller than a buffer: file ranges split over slots, decompressed
// buffers produced in parts; and one reader thread.
TEST_F(IpcFile, ChunksSmallerThanABuffer) {
  const cuarrow::transfer_options saved = cuarrow::get_transfer_options();
  cuarrow::transfer_options small = saved;
  small.staging_chunk_bytes = 64 << 10;
  small.staging_threads_to_device = 3;
  cuarrow::set_transfer_options(small);
  try {
    for (const char* name : {"file_wide.arrow", "file_lz4.arrow", "file_zstd.arrow"}) {
      for (const int threads : {0, 1}) {
        SCOPED_TRACE(std::string(name) + " io_threads " + std::to_string(threads));
        const std::string path = write_golden(name);
        ipc::file_reader mem(on_host(load(name)), with_host_decompress());
        ipc::file_read_options o;
        o.io_threads = threads;
        ipc::device_file_reader r(path, ctx(), o);
        expect_same(mem.read_all(), r.read_all());
      }
    }
  } catch (...) {
    cuarrow::set_transfer_options(saved);
    throw;
  }
  cuarrow::set_transfer_options(saved);
}

TEST_F(IpcFile, MissingFilesAndDirectoriesAreTypedErrors) {
  const std::string missing = (dir_ / "no_such_file.arrow").string();
  try {
    ipc::device_file_reader r(missing, ctx());
    FAIL() << "opened a missing file";
  } catch (const ipc::invalid_message&) {
    FAIL() << "a missing file is not a malformed one";
  } catch (const cuarrow::io_error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_EQ(e.error_code(), ENOENT);
  }
  EXPECT_THROW(ipc::device_stream_reader(missing, ctx()), cuarrow::io_error);
  try {
    ipc::device_file_reader r(dir_.string(), ctx());
    FAIL() << "opened a directory";
  } catch (const ipc::invalid_message&) {
    FAIL() << "a directory is not a malformed file";
  } catch (const cuarrow::io_error& e) {
    EXPECT_NE(std::string(e.what()).find("directory"), std::string::npos) << e.what();
    EXPECT_EQ(e.error_code(), EISDIR);
  }
  EXPECT_THROW(ipc::device_stream_reader(dir_.string(), ctx()), cuarrow::io_error);
  ipc::file_read_options o;
  o.io_threads = -1;
  EXPECT_THROW(ipc::device_file_reader(write_golden("file_primitives.arrow"), ctx(), o), cuarrow::invalid_argument);
}

TEST_F(IpcFile, TruncatedFilesAndBadFootersAreInvalidMessages) {
  const std::vector<std::byte> good = load("file_wide.arrow");
  for (const std::size_t keep : {std::size_t{0}, std::size_t{7}, std::size_t{17}, good.size() / 2, good.size() - 1}) {
    SCOPED_TRACE(keep);
    const std::string path = write("cut.arrow", std::vector<std::byte>(good.begin(), good.begin() + keep));
    EXPECT_THROW(ipc::device_file_reader(path, ctx()), ipc::invalid_message);
  }
  // The footer's bytes garbled.
  const ipc::file_footer footer = ipc::read_file_footer(good);
  const std::vector<std::byte> trailer = ipc::write_file_trailer(footer);
  const std::size_t footer_start = good.size() - trailer.size();
  std::vector<std::byte> bad = good;
  for (std::size_t i = footer_start; i < footer_start + 16; ++i) bad[i] = std::byte{0xAB};
  EXPECT_THROW(ipc::device_file_reader(write("bad_footer.arrow", bad), ctx()), ipc::invalid_message);

  // A block pointing past the end of the file.
  auto with_footer = [&](const ipc::file_footer& f) {
    std::vector<std::byte> out(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(footer_start));
    const std::vector<std::byte> t = ipc::write_file_trailer(f);
    out.insert(out.end(), t.begin(), t.end());
    return out;
  };
  ASSERT_EQ(with_footer(footer), good);
  ipc::file_footer past = footer;
  past.record_batches[2].offset = static_cast<std::int64_t>(good.size()) + 64;
  EXPECT_THROW(ipc::device_file_reader(write("past.arrow", with_footer(past)), ctx()), ipc::invalid_message);
  ipc::file_footer long_body = footer;
  long_body.record_batches[3].body_length = static_cast<std::int64_t>(good.size());
  EXPECT_THROW(ipc::device_file_reader(write("long.arrow", with_footer(long_body)), ctx()), ipc::invalid_message);
}

// A bad batch is an error of its own: the reader (and the pipeline) still
// read the good ones.
TEST_F(IpcFile, ABadBatchLeavesTheReaderUsable) {
  const std::vector<std::byte> good = load("file_wide.arrow");
  const ipc::file_footer footer = ipc::read_file_footer(good);
  const std::size_t footer_start = good.size() - ipc::write_file_trailer(footer).size();
  ipc::file_footer f = footer;
  f.record_batches[2] = footer.record_batches[0];  // the block disagrees with the message there
  f.record_batches[2].body_length += 8;
  std::vector<std::byte> bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(footer_start));
  const std::vector<std::byte> t = ipc::write_file_trailer(f);
  bytes.insert(bytes.end(), t.begin(), t.end());
  const std::string path = write("mixed.arrow", bytes);
  ipc::file_reader mem(on_host(good));
  ipc::device_file_reader r(path, ctx());
  EXPECT_THROW(r.read_batch(2), ipc::invalid_message);
  EXPECT_TRUE(same_values(mem.read_batch(3), to_host(r.read_batch(3))));
  EXPECT_THROW(r.read_batch(2), ipc::invalid_message);
  EXPECT_TRUE(same_values(mem.read_batch(0), to_host(r.read_batch(0))));
}

// A file cut short after the footer was read: the body read fails with an
// io_error naming the file, the device memory is released, and the
// reader reads again once the file is whole.
TEST_F(IpcFile, AFileCutWhileOpenIsAnIoErrorAndTheReaderRecovers) {
  const std::vector<std::byte> good = load("file_wide.arrow");
  const std::string path = write("shrinking.arrow", good);
  ipc::file_reader mem(on_host(good));
  ipc::device_file_reader r(path, ctx());
  const ipc::file_block b = r.footer().record_batches[3];
  const std::int64_t allocated_before = ctx().bytes_allocated();
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(b.offset + b.metadata_length + 1000)), 0);
  try {
    (void)r.read_batch(3);
    FAIL() << "read a batch past the end of the file";
  } catch (const ipc::invalid_message& e) {
    FAIL() << "an I/O error, not a malformed file: " << e.what();
  } catch (const cuarrow::io_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_EQ(ctx().bytes_allocated(), allocated_before);
  write("shrinking.arrow", good);
  EXPECT_TRUE(same_values(mem.read_batch(3), to_host(r.read_batch(3))));
}

TEST_F(IpcFile, StreamsThatEndEarlyOrStartWrong) {
  const std::vector<std::byte> good = load("dictionaries.arrows");
  EXPECT_THROW(ipc::device_stream_reader(write("empty.arrows", {}), ctx()), ipc::invalid_message);
  // The schema message cut: invalid_message.
  EXPECT_THROW(
      ipc::device_stream_reader(write("cut.arrows", std::vector<std::byte>(good.begin(), good.begin() + 20)), ctx()),
      ipc::invalid_message);
  // A batch cut: the batches before it still read.
  ipc::stream_reader mem(on_host(good));
  const record_batch first = mem.read_next().value();
  const std::int64_t after_first = mem.position();
  ipc::device_stream_reader r(
      write("cut2.arrows", std::vector<std::byte>(good.begin(), good.begin() + after_first + 12)), ctx());
  EXPECT_TRUE(same_values(first, to_host(r.read_next().value())));
  EXPECT_THROW(r.read_next(), ipc::invalid_message);
  // A file is not a stream: it starts with the magic.
  EXPECT_THROW(ipc::device_stream_reader(write_golden("file_primitives.arrow"), ctx()), ipc::invalid_message);
}

TEST_F(IpcFile, ReadPathAndCounters) {
  const std::string path = write_golden("file_primitives.arrow");
  ipc::device_file_reader r(path, ctx());
  EXPECT_EQ(r.last_read_path(), ipc::read_path::none) << "no dictionaries, no body read yet";
  EXPECT_EQ(r.path(), path);
  const std::int64_t before = r.bytes_read();
  EXPECT_GT(before, 0);
  (void)r.read_batch(0);
  EXPECT_EQ(r.last_read_path(), ipc::read_path::staging);
  EXPECT_STREQ(ipc::to_string(r.last_read_path()), "staging");
  const ipc::file_block b = r.footer().record_batches[0];
  EXPECT_LE(r.bytes_read() - before, b.metadata_length + b.body_length) << "metadata and body, nothing more";
  EXPECT_GT(r.bytes_read() - before, b.metadata_length);
}

// ---- many batches in one staging job ------------------------------------------------

// `count` batches of one schema (a dictionary-encoded column when asked:
// streams only, each batch with its own dictionary, sent as a replacement).
std::vector<record_batch> many_batches(int count, bool with_dictionary, std::uint64_t seed) {
  random_arrays gen(seed);
  schema s;
  s.fields = {field("i", int64()), field("s", utf8()), field("l", list(field("item", int32()))), field("f", float64())};
  if (with_dictionary) s.fields.emplace_back("d", dictionary(int32(), utf8()));
  std::vector<record_batch> out;
  for (int k = 0; k < count; ++k) {
    record_batch b;
    b.schema = s;
    b.num_rows = k == 2 ? 0 : gen.uniform(1, 3000);  // one empty batch among them
    for (const field& f : s.fields) b.columns.push_back(gen.array(f.type, b.num_rows));
    out.push_back(std::move(b));
  }
  return out;
}

// `batches` with their first column repeated until they have 17 columns
// (x1, x2, ...): as wide as the benchmark's table, so that the reader
// builds and checks many of them on several threads.
std::vector<record_batch> widened(std::vector<record_batch> batches) {
  for (record_batch& b : batches) {
    for (int k = 1; b.columns.size() < 17; ++k) {
      b.schema.fields.push_back(field("x" + std::to_string(k), b.schema.fields[0].type));
      b.columns.push_back(b.columns[0]);
    }
  }
  return batches;
}

std::vector<std::byte> written(const std::vector<record_batch>& batches, ipc::stream_writer::format f,
                               std::optional<ipc::compression_codec> codec) {
  ipc::write_options o;
  o.compression = codec;
  ipc::stream_writer w(batches.front().schema, ctx(), f, {}, {}, o);
  for (const record_batch& b : batches) w.write(to_device(b, ctx()));
  const cuarrow::buffer out = w.finish();
  std::vector<std::byte> bytes(static_cast<std::size_t>(out.size()));
  cuarrow::copy_to_host(bytes.data(), out, 0, out.size());
  return bytes;
}

// A projection whose columns' places in the header vary from batch to
// batch: a utf8_view column before the chosen ones, with 1, 4 and 0 data
// buffers (variadic counts) in its three batches.  The reader walks the
// column spans of such headers batch by batch; those without variadic
// counts it walks once (file_source::spans_of).
TEST_F(IpcFile, ProjectionAfterViewColumnsOfVaryingBufferCounts) {
  const std::string long_a(30, 'a'), long_b(30, 'b');
  const std::vector<std::vector<std::optional<std::string>>> views = {
      {"short", long_a, std::nullopt},
      {long_a, long_b, long_a, long_b, "x"},
      {"a", std::nullopt, "bc", "d"},
  };
  schema s;
  s.fields = {field("v", utf8_view()), field("i", int64()), field("f", float64())};
  std::vector<record_batch> batches;
  for (std::size_t k = 0; k < views.size(); ++k) {
    record_batch b;
    b.schema = s;
    b.num_rows = static_cast<std::int64_t>(views[k].size());
    std::vector<std::optional<std::int64_t>> ints;
    std::vector<std::optional<double>> floats;
    for (std::int64_t r = 0; r < b.num_rows; ++r) {
      ints.push_back(static_cast<std::int64_t>(k) * 100 + r);
      floats.push_back(static_cast<double>(k) + 0.25 * static_cast<double>(r));
    }
    b.columns = {string_views(utf8_view(), views[k]), primitive<std::int64_t>(int64(), ints),
                 primitive<double>(float64(), floats)};
    batches.push_back(std::move(b));
  }
  ASSERT_NE(batches[0].columns[0].buffers.size(), batches[1].columns[0].buffers.size());
  const std::string path = write("views.arrow", written(batches, ipc::stream_writer::format::file, std::nullopt));
  ipc::file_read_options o;
  o.columns = std::vector<int>{2, 0, 1};
  ipc::device_file_reader r(path, ctx(), o);
  const std::vector<record_batch> got = r.read_all();
  ASSERT_EQ(got.size(), batches.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    SCOPED_TRACE("batch " + std::to_string(k));
    EXPECT_TRUE(same_values(batches[k].columns[2], to_host(got[k].columns[0])));
    EXPECT_TRUE(same_values(batches[k].columns[0], to_host(got[k].columns[1])));
    EXPECT_TRUE(same_values(batches[k].columns[1], to_host(got[k].columns[2])));
  }
  // The view column not chosen (its counts still place the others), batch
  // by batch in reverse order: the same values.
  o.columns = std::vector<int>{2, 1};
  ipc::device_file_reader plain(path, ctx(), o);
  for (int k = static_cast<int>(batches.size()) - 1; k >= 0; --k) {
    const record_batch b = plain.read_batch(k);
    EXPECT_TRUE(same_values(batches[static_cast<std::size_t>(k)].columns[2], to_host(b.columns[0])));
    EXPECT_TRUE(same_values(batches[static_cast<std::size_t>(k)].columns[1], to_host(b.columns[1])));
  }
}

// Small chunks and more io_threads than staging_threads_to_device: a job
// of many batches spans many chunks, and the pipeline grows its slots.
class IpcFileManyBatches : public IpcFile {
 protected:
  void SetUp() override {
    IpcFile::SetUp();
    saved_ = cuarrow::get_transfer_options();
    cuarrow::transfer_options small = saved_;
    small.staging_chunk_bytes = 64 << 10;
    small.staging_threads_to_device = 2;
    cuarrow::set_transfer_options(small);
  }
  void TearDown() override {
    cuarrow::set_transfer_options(saved_);
    IpcFile::TearDown();
  }
  // read_all of the file at `path` is refused, the error naming `first`
  // (what the first bad batch shows: a file of many batches is read on
  // several threads), and the reader stays usable: batch 59 reads as
  // `batch59`.
  void expect_first_refused(const std::string& path, const std::string& first, const record_batch& batch59) {
    ipc::device_file_reader r(path, ctx());
    try {
      (void)r.read_all();
      ADD_FAILURE() << "a bad file was read";
    } catch (const ipc::invalid_message& e) {
      EXPECT_NE(std::string(e.what()).find(first), std::string::npos) << e.what();
    }
    EXPECT_TRUE(same_values(batch59, to_host(r.read_batch(59)))) << "the reader stays usable";
  }
  cuarrow::transfer_options saved_;
};

const std::optional<ipc::compression_codec> kCodecs[] = {std::nullopt, ipc::compression_codec::lz4_frame,
                                                         ipc::compression_codec::zstd};

TEST_F(IpcFileManyBatches, ReadAllEqualsThePerBatchReads) {
  const std::vector<record_batch> batches = many_batches(12, false, 5);
  for (const auto& codec : kCodecs) {
    const std::string path = write("many.arrow", written(batches, ipc::stream_writer::format::file, codec));
    for (const bool project : {false, true}) {
      for (const int threads : {0, 1, 5}) {
        SCOPED_TRACE(std::string(codec ? ipc::to_string(*codec) : "uncompressed") + (project ? " projected" : "") +
                     " io_threads " + std::to_string(threads));
        ipc::file_read_options o;
        o.io_threads = threads;
        if (project) o.columns = std::vector<int>{3, 1};
        ipc::device_file_reader r(path, ctx(), o);
        const std::vector<record_batch> all = r.read_all();
        ASSERT_EQ(all.size(), batches.size());
        for (std::size_t i = 0; i < all.size(); ++i) {
          SCOPED_TRACE(i);
          expect_on_device(all[i]);
          const record_batch one = r.read_batch(static_cast<int>(i));
          EXPECT_TRUE(same_values(to_host(one), all[i]));
          if (!project) {
            EXPECT_TRUE(same_values(batches[i], all[i]));
          } else {
            ASSERT_EQ(all[i].columns.size(), 2U);
            EXPECT_TRUE(same_values(batches[i].columns[3], all[i].columns[0]));
            EXPECT_TRUE(same_values(batches[i].columns[1], all[i].columns[1]));
          }
        }
      }
    }
  }
}

// A buffer above 4 MiB, as cuarrow writes it (one ZSTD frame, or one
// independent LZ4 block, per 4 MiB chunk), is decoded frame by frame (block
// by block) on the workers that stage its chunks.  ZSTD frames state their
// sizes: with slots of 64 KiB, which hold no frame, each frame spans many
// chunks and is decoded once into scratch memory, then copied out; slots
// of 4 MiB (the default) and 64 MiB hold whole frames, the chunks are cut
// on the frames' bounds (5 MiB chunks, as one worker would have them, hold
// one frame each), and every frame is decoded straight into a slot.  An
// LZ4 block's size only decoding it tells: every block is decoded into
// memory of its own, on the workers that need the buffer, then copied.
TEST_F(IpcFile, BuffersOfSeveralFramesDecodeOnTheWorkersThatStageThem) {
  constexpr std::int64_t rows = 5'000'000;  // 40 MB of int64: 10 frames or blocks
  std::vector<std::optional<std::int64_t>> values(rows);
  for (std::int64_t r = 0; r < rows; ++r) values[static_cast<std::size_t>(r)] = (r * 7919) % 100'003;
  record_batch b;
  b.schema.fields = {field("i", int64())};
  b.num_rows = rows;
  b.columns = {primitive<std::int64_t>(int64(), values)};
  const cuarrow::transfer_options saved = cuarrow::get_transfer_options();
  try {
    for (const auto codec : {ipc::compression_codec::zstd, ipc::compression_codec::lz4_frame}) {
      const std::string path = write("frames.arrow", written({b}, ipc::stream_writer::format::file, codec));
      for (const auto& [chunk, threads, scratch] :
           {std::tuple{64 << 10, 3, rows * 8}, std::tuple{4 << 20, 3, std::int64_t{0}},
            std::tuple{64 << 20, 1, std::int64_t{0}}}) {
        SCOPED_TRACE(std::string(ipc::to_string(codec)) + ", chunks of at most " + std::to_string(chunk) + " bytes, " +
                     std::to_string(threads) + " workers");
        cuarrow::transfer_options o = saved;
        o.staging_chunk_bytes = chunk;
        o.staging_threads_to_device = threads;
        cuarrow::set_transfer_options(o);
        ipc::file_read_options ro;
        ro.io_threads = threads;
        ipc::device_file_reader r(path, ctx(), ro);
        const record_batch got = r.read_batch(0);
        expect_on_device(got);
        EXPECT_TRUE(same_values(b, got));
        EXPECT_EQ(r.stats().scratch_decoded_bytes, scratch) << "decompressed bytes copied again";
      }
    }
  } catch (...) {
    cuarrow::set_transfer_options(saved);
    throw;
  }
  cuarrow::set_transfer_options(saved);
}

// An LZ4 frame's blocks are sized on trust (every one full but the last)
// and decoded straight into the slots; a valid frame whose blocks are sized
// otherwise (its last block moved first: a short block first, a long one
// last) is staged again, decoded the careful way, and reads right, as does
// the next read of the same reader (which no longer trusts the sizes).
TEST_F(IpcFile, LZ4BlocksSizedOtherwiseThanFullAreStagedAgain) {
  constexpr std::int64_t block_rows = (4 << 20) / 8, tail_rows = (1 << 20) / 8;
  constexpr std::int64_t rows = 2 * block_rows + tail_rows;  // 9 MiB of int64: blocks of 4, 4 and 1 MiB
  std::vector<std::optional<std::int64_t>> values(rows), rotated;
  for (std::int64_t r = 0; r < rows; ++r) values[static_cast<std::size_t>(r)] = (r * 7919) % 100'003;
  rotated.assign(values.end() - tail_rows, values.end());
  rotated.insert(rotated.end(), values.begin(), values.end() - tail_rows);
  const auto batch_of = [](const std::vector<std::optional<std::int64_t>>& v) {
    record_batch b;
    b.schema.fields = {field("i", int64())};
    b.num_rows = static_cast<std::int64_t>(v.size());
    b.columns = {primitive<std::int64_t>(int64(), v)};
    return b;
  };
  std::vector<std::byte> file =
      written({batch_of(values)}, ipc::stream_writer::format::file, ipc::compression_codec::lz4_frame);
  // The data buffer's frame: the LZ4 magic, a 7-byte descriptor, then
  // blocks (4-byte headers) up to the end mark.
  const std::byte magic[] = {std::byte{0x04}, std::byte{0x22}, std::byte{0x4D}, std::byte{0x18}};
  const auto frame = std::search(file.begin(), file.end(), std::begin(magic), std::end(magic));
  ASSERT_NE(frame, file.end());
  std::vector<std::size_t> at;
  for (auto pos = static_cast<std::size_t>(frame - file.begin()) + 7;;) {
    at.push_back(pos);
    std::uint32_t h = 0;
    std::memcpy(&h, file.data() + pos, 4);
    if (h == 0) break;
    pos += 4 + (h & 0x7FFFFFFFU);
  }
  ASSERT_EQ(at.size(), 4U) << "three blocks and the end mark";
  std::vector<std::byte> blocks(file.begin() + static_cast<std::ptrdiff_t>(at[2]),
                                file.begin() + static_cast<std::ptrdiff_t>(at[3]));
  blocks.insert(blocks.end(), file.begin() + static_cast<std::ptrdiff_t>(at[0]),
                file.begin() + static_cast<std::ptrdiff_t>(at[2]));
  std::copy(blocks.begin(), blocks.end(), file.begin() + static_cast<std::ptrdiff_t>(at[0]));
  const std::string path = write("moved.arrow", file);
  const record_batch want = batch_of(rotated);
  const cuarrow::transfer_options saved = cuarrow::get_transfer_options();
  try {
    cuarrow::transfer_options o = saved;
    o.staging_chunk_bytes = 4 << 20;
    o.staging_threads_to_device = 3;
    cuarrow::set_transfer_options(o);
    ipc::file_read_options ro;
    ro.io_threads = 3;
    ro.collect_stats = true;
    ipc::device_file_reader r(path, ctx(), ro);
    const record_batch got = r.read_batch(0);
    expect_on_device(got);
    EXPECT_TRUE(same_values(want, got));
    const ipc::read_stats first = r.stats();
    EXPECT_EQ(first.staging_jobs, 2) << "staged again";
    EXPECT_EQ(first.scratch_decoded_bytes, rows * 8) << "the second time, each block decoded into its own memory";
    EXPECT_TRUE(same_values(want, r.read_batch(0)));
    EXPECT_EQ(r.stats().staging_jobs, 3) << "the reader no longer trusts the sizes: staged once";
    // The frame as written: decoded in place, staged once.
    ipc::device_file_reader good(write("good.arrow", written({batch_of(values)}, ipc::stream_writer::format::file,
                                                             ipc::compression_codec::lz4_frame)),
                                 ctx(), ro);
    EXPECT_TRUE(same_values(batch_of(values), good.read_batch(0)));
    EXPECT_EQ(good.stats().staging_jobs, 1);
    EXPECT_EQ(good.stats().scratch_decoded_bytes, 0);
  } catch (...) {
    cuarrow::set_transfer_options(saved);
    throw;
  }
  cuarrow::set_transfer_options(saved);
}

// The offsets the cheap validation checks are taken from the staging slots
// on their way to the device (the bytes the device got), not read back
// from the device: a good file reads without a device-to-host copy (the
// emulation counts them), and a file whose offsets lie, in any batch and
// with chunks that cut buffers, is refused naming the column, by read_all,
// read_batch and a stream's read_all alike.
TEST_F(IpcFileManyBatches, OffsetsAreCheckedAsTheyPassThroughStaging) {
  const std::vector<record_batch> batches = many_batches(12, false, 11);
  const std::vector<std::byte> good = written(batches, ipc::stream_writer::format::file, std::nullopt);
  const cuarrow_test::fault_api& f = cuarrow_test::faults();
  auto device_reads = [&] {
    return f.calls("cuMemcpyDtoHAsync") + f.calls("cuMemcpyAsync") + f.calls("cuMemcpyBatchAsync");
  };
  {
    const std::string path = write("good.arrow", good);
    ipc::device_file_reader r(path, ctx());
    ctx().synchronize();
    if (f.available()) f.reset_calls();
    const std::vector<record_batch> all = r.read_all();
    const std::size_t reads = f.available() ? device_reads() : 0;
    ASSERT_EQ(all.size(), batches.size());
    for (std::size_t i = 0; i < all.size(); ++i) EXPECT_TRUE(same_values(batches[i], all[i])) << i;
    EXPECT_EQ(reads, 0U) << "validation read the device back";
  }
  // The last offset of column "s" (utf8) of batch 7 made larger than its data.
  const ipc::file_footer footer = ipc::read_file_footer(good);
  const ipc::file_block& b = footer.record_batches[7];
  const std::span<const std::byte> at(good.data() + b.offset, static_cast<std::size_t>(b.metadata_length));
  const ipc::message_metadata m = ipc::read_message_metadata(ipc::read_encapsulated_metadata(at).flatbuffer);
  const auto& h = std::get<ipc::record_batch_header>(m.header);
  // Buffers: i (validity, values), s (validity, offsets, data), ...
  const ipc::body_range offsets = h.buffers[3];
  ASSERT_GT(h.length, 0);
  std::vector<std::byte> bad = good;
  const std::size_t last = static_cast<std::size_t>(b.offset + b.metadata_length + offsets.offset + h.length * 4);
  const std::int32_t lie = std::int32_t{1} << 30;
  std::memcpy(bad.data() + last, &lie, sizeof lie);
  const std::string bad_path = write("bad.arrow", bad);
  auto expect_refused = [](auto&& read) {
    try {
      read();
      ADD_FAILURE() << "a lying offset was read";
    } catch (const ipc::invalid_message& e) {
      EXPECT_NE(std::string(e.what()).find("\"s\""), std::string::npos) << e.what();
    }
  };
  ipc::device_file_reader r(bad_path, ctx());
  expect_refused([&] { (void)r.read_all(); });
  expect_refused([&] { (void)r.read_batch(7); });
  EXPECT_TRUE(same_values(batches[6], r.read_batch(6))) << "the reader stays usable";
  // The same bytes as a stream (the file's messages after its magic).
  const ipc::file_block& first = footer.record_batches[0];
  std::vector<std::byte> stream(bad.begin() + 8, bad.begin() + static_cast<std::ptrdiff_t>(first.offset));
  for (const ipc::file_block& k : footer.record_batches) {
    stream.insert(stream.end(), bad.begin() + k.offset, bad.begin() + k.offset + k.metadata_length + k.body_length);
  }
  const std::vector<std::byte> eos = ipc::end_of_stream_marker();
  stream.insert(stream.end(), eos.begin(), eos.end());
  ipc::device_stream_reader sr(write("bad.arrows", stream), ctx());
  expect_refused([&] { (void)sr.read_all(); });
}

// The metadata of many batches is read on several threads: the batches
// come back in order, and of two bad blocks the error names the first.
TEST_F(IpcFileManyBatches, MetadataOfManyBatchesReadTogether) {
  std::vector<record_batch> batches = many_batches(200, false, 21);
  for (record_batch& b : batches) {
    b.columns.resize(1);  // small: the metadata is what is read here
    b.schema.fields.resize(1);
  }
  const std::vector<std::byte> good = written(batches, ipc::stream_writer::format::file, std::nullopt);
  {
    ipc::device_file_reader r(write("many.arrow", good), ctx());
    const std::vector<record_batch> all = r.read_all();
    ASSERT_EQ(all.size(), batches.size());
    for (std::size_t i = 0; i < all.size(); ++i) EXPECT_TRUE(same_values(batches[i], all[i])) << i;
  }
  const ipc::file_footer footer = ipc::read_file_footer(good);
  const std::size_t footer_start = good.size() - ipc::write_file_trailer(footer).size();
  ipc::file_footer f = footer;
  for (const std::size_t bad : {std::size_t{190}, std::size_t{60}}) {  // read by different threads
    f.record_batches[bad].body_length += 8;                            // the block disagrees with its message
  }
  std::vector<std::byte> bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(footer_start));
  const std::vector<std::byte> t = ipc::write_file_trailer(f);
  bytes.insert(bytes.end(), t.begin(), t.end());
  expect_first_refused(write("bad_blocks.arrow", bytes), "block 60", batches[59]);
}

// Many batches are built on several threads too: the batches come back in
// order, and of two batches whose field node lies about its length the
// error is the first one's.
TEST_F(IpcFileManyBatches, BatchesBuiltTogetherReportTheFirstBadOne) {
  std::vector<record_batch> batches = many_batches(200, false, 23);
  for (record_batch& b : batches) {
    b.columns.resize(1);
    b.schema.fields.resize(1);
  }
  batches = widened(std::move(batches));  // 17 int64 columns
  const std::vector<std::byte> good = written(batches, ipc::stream_writer::format::file, std::nullopt);
  const ipc::file_footer footer = ipc::read_file_footer(good);
  std::vector<std::byte> bytes = good;
  // The field node of the first column: the vector of 17 (length, null
  // count) structs, so the 4-byte count 17 then the batch's row count.
  const auto lie_about_length = [&](std::size_t k, std::int64_t lie) {
    const ipc::file_block& b = footer.record_batches[k];
    std::array<std::byte, 12> pattern{};
    const std::uint32_t columns = 17;
    const std::int64_t rows = batches[k].num_rows;
    std::memcpy(pattern.data(), &columns, 4);
    std::memcpy(pattern.data() + 4, &rows, 8);
    const auto first = bytes.begin() + static_cast<std::ptrdiff_t>(b.offset);
    const auto last = first + b.metadata_length;
    const auto at = std::search(first, last, pattern.begin(), pattern.end());
    ASSERT_NE(at, last) << "batch " << k << ": no field node of " << rows << " rows";
    std::memcpy(&*(at + 4), &lie, 8);
  };
  lie_about_length(190, 999'999);
  lie_about_length(60, 777'777);  // on another thread than 190 (2 or 4 threads)
  expect_first_refused(write("lying_nodes.arrow", bytes), "777777", batches[59]);
  ipc::device_file_reader whole(write("many_good.arrow", good), ctx());
  const std::vector<record_batch> all = whole.read_all();
  ASSERT_EQ(all.size(), batches.size());
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_TRUE(same_values(batches[i], to_host(all[i]))) << i;
}

// The checks of many batches run on several threads too, each batch with
// the offsets its slots carried: no device read, and of two lying offsets
// the first batch's is the one reported.
TEST_F(IpcFileManyBatches, ChecksOfManyBatchesReportTheFirstLyingOffset) {
  const std::vector<record_batch> batches = widened(many_batches(200, false, 25));
  const std::vector<std::byte> good = written(batches, ipc::stream_writer::format::file, std::nullopt);
  const cuarrow_test::fault_api& f = cuarrow_test::faults();
  {
    ipc::device_file_reader r(write("good.arrow", good), ctx());
    ctx().synchronize();
    if (f.available()) f.reset_calls();
    const std::vector<record_batch> all = r.read_all();
    if (f.available()) {
      EXPECT_EQ(f.calls("cuMemcpyDtoHAsync") + f.calls("cuMemcpyAsync") + f.calls("cuMemcpyBatchAsync"), 0U)
          << "validation read the device back";
    }
    ASSERT_EQ(all.size(), batches.size());
    for (std::size_t i = 0; i < all.size(); ++i) EXPECT_TRUE(same_values(batches[i], all[i])) << i;
  }
  const ipc::file_footer footer = ipc::read_file_footer(good);
  std::vector<std::byte> bad = good;
  // The last offset of column "s" (utf8) of batch k made `lie`.
  const auto lie_in = [&](std::size_t k, std::int32_t lie) {
    const ipc::file_block& b = footer.record_batches[k];
    const std::span<const std::byte> at(good.data() + b.offset, static_cast<std::size_t>(b.metadata_length));
    const ipc::message_metadata m = ipc::read_message_metadata(ipc::read_encapsulated_metadata(at).flatbuffer);
    const auto& h = std::get<ipc::record_batch_header>(m.header);
    ASSERT_GT(h.length, 0) << k;
    const ipc::body_range offsets = h.buffers[3];  // i (validity, values), s (validity, offsets, data)
    std::memcpy(bad.data() + b.offset + b.metadata_length + offsets.offset + h.length * 4, &lie, sizeof lie);
  };
  lie_in(190, 1'999'999'999);
  lie_in(60, 1'777'777'777);  // on another thread than 190 (2 or 4 threads)
  expect_first_refused(write("bad.arrow", bad), "1777777777", batches[59]);
}

TEST_F(IpcFileManyBatches, StatsCountAndTimeThePhasesWhenAsked) {
  const std::vector<record_batch> batches = many_batches(12, false, 9);
  for (const auto& codec : kCodecs) {
    SCOPED_TRACE(codec ? ipc::to_string(*codec) : "uncompressed");
    const std::string path = write("stats.arrow", written(batches, ipc::stream_writer::format::file, codec));
    ipc::file_read_options o;
    o.collect_stats = true;
    ipc::device_file_reader r(path, ctx(), o);
    ASSERT_EQ(r.read_all().size(), batches.size());
    const ipc::read_stats st = r.stats();
    EXPECT_EQ(st.batches, static_cast<std::int64_t>(batches.size()));
    EXPECT_EQ(st.staging_jobs, 1) << "every body in one job";
    EXPECT_EQ(st.bytes_read, r.bytes_read());
    EXPECT_GT(st.metadata_seconds, 0);
    EXPECT_GT(st.staging_seconds, 0);
    EXPECT_GT(st.build_seconds, 0);
    EXPECT_GT(st.pread_seconds, 0);
    EXPECT_EQ(st.decompress_seconds > 0, codec.has_value());
    EXPECT_EQ(st.gds_seconds, 0);

    ipc::device_file_reader quiet(path, ctx());  // collect_stats off: counted, not timed
    (void)quiet.read_batch(0);
    const ipc::read_stats q = quiet.stats();
    EXPECT_EQ(q.batches, 1);
    EXPECT_EQ(q.staging_jobs, 1);
    for (const double sec : {q.metadata_seconds, q.allocate_seconds, q.staging_seconds, q.gds_seconds, q.build_seconds,
                             q.pread_seconds, q.decompress_seconds, q.dma_wait_seconds}) {
      EXPECT_EQ(sec, 0);
    }
  }
}

TEST_F(IpcFileManyBatches, ReadBatchesInAnyOrderWithDuplicates) {
  const std::vector<record_batch> batches = many_batches(8, false, 6);
  for (const auto& codec : kCodecs) {
    SCOPED_TRACE(codec ? ipc::to_string(*codec) : "uncompressed");
    const std::string path = write("some.arrow", written(batches, ipc::stream_writer::format::file, codec));
    ipc::device_file_reader r(path, ctx());
    const std::vector<int> want = {5, 0, 5, 7, 2, 3, 3, 1};
    const std::vector<record_batch> got = r.read_batches(want);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t k = 0; k < want.size(); ++k) {
      SCOPED_TRACE(want[k]);
      EXPECT_TRUE(same_values(batches[static_cast<std::size_t>(want[k])], got[k]));
    }
    EXPECT_NE(got[0].columns[0].buffers[1].address(), got[2].columns[0].buffers[1].address())
        << "a duplicate is its own allocation";
    EXPECT_TRUE(r.read_batches({}).empty());
    const std::int64_t read_before = r.bytes_read();
    const std::int64_t allocated_before = ctx().bytes_allocated();
    EXPECT_THROW(r.read_batches(std::vector<int>{1, 8}), cuarrow::out_of_range);
    EXPECT_THROW(r.read_batches(std::vector<int>{-1}), cuarrow::out_of_range);
    EXPECT_EQ(r.bytes_read(), read_before) << "indices are checked before anything is read";
    EXPECT_EQ(ctx().bytes_allocated(), allocated_before);
  }
}

TEST_F(IpcFileManyBatches, StreamReadAllEqualsReadNext) {
  for (const bool dictionaries : {false, true}) {
    const std::vector<record_batch> batches = many_batches(10, dictionaries, 7);
    for (const auto& codec : kCodecs) {
      SCOPED_TRACE(std::string(codec ? ipc::to_string(*codec) : "uncompressed") +
                   (dictionaries ? " with dictionaries" : ""));
      const std::vector<std::byte> bytes = written(batches, ipc::stream_writer::format::stream, codec);
      const std::string path = write("many.arrows", bytes);
      ipc::device_stream_reader one(path, ctx());
      ipc::device_stream_reader all(path, ctx());
      const std::vector<record_batch> got = all.read_all();
      ASSERT_EQ(got.size(), batches.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE(i);
        EXPECT_TRUE(same_values(batches[i], got[i]));
        EXPECT_TRUE(same_values(to_host(one.read_next().value()), got[i]));
      }
      EXPECT_FALSE(one.read_next().has_value());
      EXPECT_EQ(all.position(), one.position()) << "both at the end-of-stream marker";
      EXPECT_TRUE(all.read_all().empty()) << "at the end";
    }
  }
  // The golden streams (dictionaries, deltas, empty batches) as the
  // in-memory reader reads them all.
  for (const char* name : kStreams) {
    SCOPED_TRACE(name);
    const std::vector<std::byte> bytes = load(name);
    ipc::stream_reader mem(on_host(bytes));
    ipc::device_stream_reader r(write(name, bytes), ctx());
    expect_same(mem.read_all(), r.read_all());
    EXPECT_EQ(r.position(), mem.position());
  }
}

// A file cut in the middle of a multi-batch job: io_error, every
// allocation of the job released, and the reader reads everything once
// the file is whole again (uncompressed: the workers' pread fails;
// compressed: a worker's read of a framed buffer, or the calling thread's
// read of a length prefix, fails).
TEST_F(IpcFileManyBatches, AFileCutInTheMiddleOfAJobReleasesEverything) {
  const std::vector<record_batch> batches = many_batches(12, false, 8);
  for (const auto& codec : kCodecs) {
    SCOPED_TRACE(codec ? ipc::to_string(*codec) : "uncompressed");
    const std::vector<std::byte> good = written(batches, ipc::stream_writer::format::file, codec);
    const std::string path = write("cut.arrow", good);
    ipc::device_file_reader r(path, ctx(), [] {
      ipc::file_read_options o;
      o.io_threads = 4;
      return o;
    }());
    const ipc::file_block b = r.footer().record_batches[7];
    const std::int64_t allocated_before = ctx().bytes_allocated();
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(b.offset + b.metadata_length + b.body_length / 2)), 0);
    // Batch 7's metadata still reads; its body and those after it do not.
    std::string what;
    try {
      (void)r.read_batches(std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
      ADD_FAILURE() << "read a batch past the end of the file";
    } catch (const cuarrow::io_error& e) {
      what = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "an I/O error, not: " << e.what();
    }
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_EQ(ctx().bytes_allocated(), allocated_before) << "every allocation of the job released";
    write("cut.arrow", good);
    const std::vector<record_batch> all = r.read_all();
    ASSERT_EQ(all.size(), batches.size());
    for (std::size_t i = 0; i < all.size(); ++i) EXPECT_TRUE(same_values(batches[i], all[i])) << i;
  }
}

// The allocation a buffer is a slice of (the root of its parents).
std::uintptr_t allocation_of(const cuarrow::buffer& b) {
  const cuarrow::buffer* at = &b;
  while (at->parent()) at = at->parent().get();
  return at->address();
}

// The bodies one call reads share allocations (body_group_bytes), so that
// neighbouring bodies travel in one DMA; each body stays 64-byte aligned,
// a shared allocation lives while any batch over it does, and 0 gives every
// batch its own.
TEST_F(IpcFileManyBatches, SmallBodiesShareAllocationsAndTheirDmas) {
  const std::vector<record_batch> batches = many_batches(24, false, 11);
  const std::string path = write("grouped.arrow", written(batches, ipc::stream_writer::format::file, std::nullopt));
  const std::int64_t allocated_before = ctx().bytes_allocated();
  const auto read = [&](std::int64_t group_bytes, std::optional<std::vector<int>> columns = std::nullopt) {
    ipc::file_read_options o;
    o.body_group_bytes = group_bytes;
    o.columns = std::move(columns);
    ipc::device_file_reader r(path, ctx(), o);
    std::vector<record_batch> all = r.read_all();
    return std::make_pair(std::move(all), r.stats());
  };
  for (const bool project : {false, true}) {
    SCOPED_TRACE(project ? "projected" : "every column");
    const auto columns = project ? std::optional<std::vector<int>>(std::vector<int>{1}) : std::nullopt;
    auto [grouped, gs] = read(-1, columns);
    auto [single, ss] = read(0, columns);
    ASSERT_EQ(grouped.size(), batches.size());
    ASSERT_EQ(single.size(), batches.size());
    std::set<std::uintptr_t> grouped_allocations, single_allocations;
    std::size_t nonempty = 0;
    for (std::size_t i = 0; i < batches.size(); ++i) {
      SCOPED_TRACE(i);
      const auto& want = batches[i].columns[project ? 1 : 0];
      EXPECT_TRUE(same_values(want, to_host(grouped[i].columns[0])));
      EXPECT_TRUE(same_values(want, to_host(single[i].columns[0])));
      if (batches[i].num_rows == 0) continue;  // an empty body: no memory of its own
      ++nonempty;
      // The body starts with its first column's first buffer that has bytes.
      std::uintptr_t start = UINTPTR_MAX;
      for (const cuarrow::buffer& b : grouped[i].columns[0].buffers) {
        if (b.size() > 0) start = std::min(start, b.address());
      }
      EXPECT_EQ(start % 64, 0U) << "a body starts 64-byte aligned";
      const cuarrow::buffer& first = grouped[i].columns[0].buffers[1];
      grouped_allocations.insert(allocation_of(first));
      single_allocations.insert(allocation_of(single[i].columns[0].buffers[1]));
    }
    EXPECT_EQ(grouped_allocations.size(), 1U) << "a few KiB of bodies: one allocation";
    EXPECT_EQ(single_allocations.size(), nonempty) << "body_group_bytes 0: one allocation a batch";
    EXPECT_LT(gs.dmas, static_cast<std::int64_t>(batches.size())) << "neighbouring bodies in one DMA";
    EXPECT_GE(ss.dmas, static_cast<std::int64_t>(batches.size())) << "a DMA (at least) a body";
    // A shared allocation lives while any batch over it does.
    const std::int64_t held = ctx().bytes_allocated();
    grouped.erase(grouped.begin(), grouped.end() - 1);
    EXPECT_EQ(ctx().bytes_allocated(), held) << "the last batch keeps the shared allocation";
    grouped.clear();
    single.clear();
    EXPECT_EQ(ctx().bytes_allocated(), allocated_before) << "every allocation released";
  }
  // A bound below a body's size: every body its own allocation again.
  const std::vector<record_batch> tight = read(64).first;
  std::set<std::uintptr_t> tight_allocations;
  for (const record_batch& b : tight) {
    if (b.num_rows > 0) tight_allocations.insert(allocation_of(b.columns[0].buffers[1]));
  }
  EXPECT_EQ(tight_allocations.size(), batches.size() - 1) << "every body but the empty one its own";
  ipc::file_read_options bad;
  bad.body_group_bytes = -2;
  try {
    ipc::device_file_reader r(path, ctx(), bad);
    ADD_FAILURE() << "body_group_bytes -2 was taken";
  } catch (const cuarrow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("body_group_bytes"), std::string::npos) << e.what();
  }
}

// ---- batch_readahead --------------------------------------------------------------------

// 0, 1, ..., n - 1.
std::vector<int> first(int n) {
  std::vector<int> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = i;
  return out;
}

// Every batch asked for, in the order asked (duplicates too), equal to
// what was written; then the end, for good.  Each read is one staging
// job: a batch alone first, then as many batches as read_bytes allows.
TEST_F(IpcFileManyBatches, ReadaheadGivesTheBatchesInTheOrderAsked) {
  const std::vector<record_batch> batches = many_batches(12, false, 11);
  for (const auto& codec : kCodecs) {
    const std::string path = write("ahead.arrow", written(batches, ipc::stream_writer::format::file, codec));
    for (const int depth : {0, 1, 3}) {
      for (const std::int64_t read_bytes : {std::int64_t{1}, std::int64_t{1} << 40}) {
        SCOPED_TRACE(std::string(codec ? ipc::to_string(*codec) : "uncompressed") + " depth " + std::to_string(depth) +
                     " read_bytes " + std::to_string(read_bytes));
        ipc::device_file_reader r(path, ctx());
        const std::vector<int> order = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 11, 4, 0};
        {
          ipc::batch_readahead file_ahead(r, order, {depth, read_bytes});
          readahead& ahead = file_ahead;  // taken through the interface both read-aheads share
          EXPECT_EQ(ahead.placement(), r.placement());
          for (std::size_t k = 0; k < order.size(); ++k) {
            std::optional<record_batch> b = ahead.next();
            ASSERT_TRUE(b.has_value()) << "batch " << k << " of " << order.size();
            expect_on_device(*b);
            EXPECT_TRUE(same_values(batches[static_cast<std::size_t>(order[k])], to_host(*b))) << k;
          }
          EXPECT_FALSE(ahead.next().has_value());
          EXPECT_FALSE(ahead.next().has_value());
          EXPECT_EQ(ahead.position(), static_cast<std::int64_t>(order.size()));
        }
        const std::int64_t jobs = r.stats().staging_jobs;
        if (read_bytes == 1 || depth == 0) {
          EXPECT_EQ(jobs, static_cast<std::int64_t>(order.size())) << "a batch a read";
        } else {
          EXPECT_EQ(jobs, 2) << "the first batch alone, then the rest in one read";
        }
      }
    }
  }
}

// The thread reads at most `depth` reads ahead of the batch taken: with
// one batch a read and depth 1, after the first next() and a pause, at
// most the taken batch, the one read ahead and none more.
TEST_F(IpcFileManyBatches, ReadaheadStaysWithinItsDepth) {
  const std::vector<record_batch> batches = many_batches(12, false, 12);
  const std::string path = write("depth.arrow", written(batches, ipc::stream_writer::format::file, std::nullopt));
  ipc::device_file_reader r(path, ctx());
  const std::vector<int> all = first(12);
  ipc::batch_readahead ahead(r, all, {1, 1});
  ASSERT_TRUE(ahead.next().has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LE(r.stats().batches, 2);
  EXPECT_GE(r.stats().batches, 1);
  for (int i = 1; i < 12; ++i) ASSERT_TRUE(ahead.next().has_value()) << i;
  EXPECT_EQ(r.stats().batches, 12);
}

// Depth 0 reads nothing ahead: nothing before the first next(), then
// exactly the batches taken, however long the caller pauses.
TEST_F(IpcFileManyBatches, ReadaheadOfDepthZeroReadsOnlyWhatIsAskedFor) {
  const std::vector<record_batch> batches = many_batches(6, false, 15);
  const std::string path = write("depth0.arrow", written(batches, ipc::stream_writer::format::file, std::nullopt));
  ipc::device_file_reader r(path, ctx());
  ipc::batch_readahead ahead(r, first(6), {0, std::int64_t{1} << 40});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(r.stats().batches, 0) << "nothing read before next()";
  for (int i = 0; i < 3; ++i) {
    std::optional<record_batch> b = ahead.next();
    ASSERT_TRUE(b.has_value()) << i;
    EXPECT_TRUE(same_values(batches[static_cast<std::size_t>(i)], to_host(*b))) << i;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(r.stats().batches, 3) << "no batch read ahead";
  ahead.close();
  EXPECT_FALSE(ahead.next().has_value());
  EXPECT_EQ(ahead.position(), 3);
}

// Batches 0-6 of `batches` from `ahead` (a file or stream cut inside
// batch 7), then twice an E whose message says `says`; 7 handed out.
template <class E>
void expect_seven_then_error(readahead& ahead, const std::vector<record_batch>& batches, const std::string& says) {
  std::vector<record_batch> taken;
  for (int i = 0; i < 7; ++i) {
    std::optional<record_batch> got = ahead.next();
    ASSERT_TRUE(got.has_value()) << "batch " << i << " lies before the cut";
    EXPECT_TRUE(same_values(batches[static_cast<std::size_t>(i)], to_host(*got))) << i;
    taken.push_back(std::move(*got));
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      (void)ahead.next();
      ADD_FAILURE() << "batch 7 lies past the end of the file";
    } catch (const E& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(ahead.position(), 7);
}

// A read that fails: the batches before the failing one still come (its
// read is redone batch by batch), then its io_error, for good; nothing is
// left allocated once the batches taken are gone, and the reader reads
// again once the file is whole.
TEST_F(IpcFileManyBatches, ReadaheadGivesTheGoodBatchesBeforeTheErrorThenTheError) {
  const std::vector<record_batch> batches = many_batches(12, false, 13);
  for (const auto& codec : kCodecs) {
    SCOPED_TRACE(codec ? ipc::to_string(*codec) : "uncompressed");
    const std::vector<std::byte> good = written(batches, ipc::stream_writer::format::file, codec);
    for (const int depth : {2, 0}) {
      SCOPED_TRACE("depth " + std::to_string(depth));
      const std::string path = write("cut_ahead.arrow", good);
      ipc::device_file_reader r(path, ctx());
      const ipc::file_block b = r.footer().record_batches[7];
      const std::int64_t allocated_before = ctx().bytes_allocated();
      ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(b.offset + b.metadata_length + b.body_length / 2)), 0);
      {
        const std::vector<int> all = first(12);
        ipc::batch_readahead ahead(r, all, {depth, std::int64_t{1} << 40});  // depth 2: batches 1-11 in one read
        expect_seven_then_error<cuarrow::io_error>(ahead, batches, path);
      }
      EXPECT_EQ(ctx().bytes_allocated(), allocated_before) << "every allocation released";
      write("cut_ahead.arrow", good);
      EXPECT_TRUE(same_values(batches[9], to_host(r.read_batch(9))));
    }
  }
}

// Closed (or destroyed) early, with reads ahead and one in progress: it
// returns without hanging, frees what it read ahead, and next() ends.
TEST_F(IpcFileManyBatches, ReadaheadClosedEarlyFreesWhatItReadAhead) {
  const std::vector<record_batch> batches = many_batches(12, false, 14);
  const std::string path = write("early.arrow", written(batches, ipc::stream_writer::format::file, std::nullopt));
  ipc::device_file_reader r(path, ctx());
  const std::vector<int> all = first(12);
  const std::int64_t allocated_before = ctx().bytes_allocated();
  {
    ipc::batch_readahead ahead(r, all, {3, 1});
    std::optional<record_batch> first = ahead.next();
    ASSERT_TRUE(first.has_value());
    ahead.close();
    ahead.close();
    EXPECT_FALSE(ahead.next().has_value());
    EXPECT_EQ(ahead.position(), 1);
    EXPECT_TRUE(same_values(batches[0], to_host(*first)));
  }
  EXPECT_EQ(ctx().bytes_allocated(), allocated_before);
  for (int k = 0; k < 5; ++k) {
    ipc::batch_readahead ahead(r, all, {2, 1});  // destroyed as it reads
  }
  EXPECT_EQ(ctx().bytes_allocated(), allocated_before);
}

TEST_F(IpcFile, ReadaheadRefusesBadArgumentsBeforeReading) {
  ipc::device_file_reader r(write_golden("file_wide.arrow"), ctx());
  const int n = r.num_record_batches();
  try {
    ipc::batch_readahead ahead(r, {0, n});
    ADD_FAILURE() << "batch " << n << " of " << n << " was taken";
  } catch (const cuarrow::out_of_range& e) {
    EXPECT_EQ(std::string(e.what()), "Batch number " + std::to_string(n) + " out of range: the file has " +
                                         std::to_string(n) + " record batches (0 <= i < " + std::to_string(n) + ")");
  }
  EXPECT_THROW(ipc::batch_readahead(r, {-1}), cuarrow::out_of_range);
  EXPECT_THROW(ipc::batch_readahead(r, {-1}, {0, 1}), cuarrow::out_of_range);
  try {
    ipc::batch_readahead ahead(r, {0}, {-1, 1});
    ADD_FAILURE() << "depth -1 was taken";
  } catch (const cuarrow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("depth"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ipc::batch_readahead(r, {0}, {1, 0}), cuarrow::invalid_argument);
  EXPECT_EQ(r.stats().batches, 0) << "nothing read";
  ipc::batch_readahead none(r, {});
  EXPECT_FALSE(none.next().has_value());
}

// ---- a stream read by path, read ahead ---------------------------------------------------

// All of `ahead`'s batches, then the end, for good.
std::vector<record_batch> drain(readahead& ahead) {
  std::vector<record_batch> out;
  while (std::optional<record_batch> b = ahead.next()) out.push_back(std::move(*b));
  EXPECT_FALSE(ahead.next().has_value());
  return out;
}

// Every batch of the stream, in order (dictionary replacements and deltas
// applied between runs), at every depth and run size, compressed or not;
// the reader is then at the end.
TEST_F(IpcFileManyBatches, StreamReadaheadGivesEveryBatchInOrder) {
  for (const bool dictionaries : {false, true}) {
    const std::vector<record_batch> batches = many_batches(10, dictionaries, 31);
    for (const auto& codec : kCodecs) {
      const std::string path = write("ahead.arrows", written(batches, ipc::stream_writer::format::stream, codec));
      for (const int depth : {0, 1, 3}) {
        for (const std::int64_t read_bytes : {std::int64_t{1}, std::int64_t{1} << 40}) {
          SCOPED_TRACE(std::string(codec ? ipc::to_string(*codec) : "uncompressed") +
                       (dictionaries ? " with dictionaries" : "") + " depth " + std::to_string(depth) + " read_bytes " +
                       std::to_string(read_bytes));
          ipc::device_stream_reader r(path, ctx());
          {
            ipc::stream_readahead ahead(r, {depth, read_bytes});
            EXPECT_EQ(ahead.placement(), r.placement());
            expect_same(batches, drain(ahead));
            EXPECT_EQ(ahead.position(), 10);
          }
          EXPECT_FALSE(r.read_next().has_value()) << "the reader is at the end";
          const std::int64_t jobs = r.stats().staging_jobs;
          if (!dictionaries && read_bytes > 1 && depth > 0) {
            EXPECT_EQ(jobs, 2) << "the first batch alone, then the rest in one read";
          }
        }
      }
    }
  }
  for (const char* name : kStreams) {
    SCOPED_TRACE(name);
    const std::vector<std::byte> bytes = load(name);
    ipc::stream_reader mem(on_host(bytes));
    ipc::device_stream_reader r(write(name, bytes), ctx());
    ipc::stream_readahead ahead(r, {2, std::int64_t{1} << 40});
    expect_same(mem.read_all(), drain(ahead));
  }
}

// Stopped after k batches (closed, or destroyed), with batches read ahead
// and dictionaries applied past the last one taken: the reader is put back
// at batch k with the dictionaries batch k was read with, and reads the
// rest, each batch once.  Closing again (the destructor) after reading on
// does not move it back.
TEST_F(IpcFileManyBatches, StreamReadaheadPutsTheReaderBackAtTheFirstBatchNotTaken) {
  for (const bool dictionaries : {false, true}) {
    const std::vector<record_batch> batches = many_batches(10, dictionaries, 32);
    const std::string path = write("back.arrows", written(batches, ipc::stream_writer::format::stream, std::nullopt));
    for (const std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{4}, std::size_t{10}}) {
      SCOPED_TRACE(std::string(dictionaries ? "with dictionaries, " : "") + std::to_string(k) + " taken");
      ipc::device_stream_reader r(path, ctx());
      std::vector<record_batch> got;
      {
        ipc::stream_readahead ahead(r, {3, 1});  // a batch a read, three reads ahead
        for (std::size_t i = 0; i < k; ++i) got.push_back(ahead.next().value());
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let it read ahead
        ahead.close();
        ahead.close();
        EXPECT_FALSE(ahead.next().has_value());
        if (k < batches.size()) {
          got.push_back(r.read_next().value());  // read on while `ahead` lives
        }
      }  // destroyed: the reader stays where it is
      for (const record_batch& b : r.read_all()) got.push_back(b);
      expect_same(batches, got);
    }
  }
  // The golden stream with deltas: put back after each batch in turn.
  const std::vector<std::byte> bytes = load("dictionary_deltas.arrows");
  const std::vector<record_batch> all = ipc::stream_reader(on_host(bytes)).read_all();
  const std::string path = write("deltas.arrows", bytes);
  for (std::size_t k = 0; k <= all.size(); ++k) {
    SCOPED_TRACE(std::to_string(k) + " taken");
    ipc::device_stream_reader r(path, ctx());
    std::vector<record_batch> got;
    {
      ipc::stream_readahead ahead(r, {2, 1});
      for (std::size_t i = 0; i < k; ++i) got.push_back(ahead.next().value());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (const record_batch& b : r.read_all()) got.push_back(b);
    expect_same(all, got);
  }
}

// A long loop over a stream that replaces its dictionary before every
// batch: the read-ahead lets go of the dictionaries of the batches handed
// out (it keeps those of the batches it may put the reader back to), so
// the device memory a loop holds stays that of the batches ahead.
TEST_F(IpcFileManyBatches, StreamReadaheadLetsGoOfTheDictionariesOfBatchesHandedOut) {
  // Each batch: 10 rows over a dictionary of its own of 20,000 strings.
  random_arrays gen(35);
  std::vector<record_batch> batches;
  for (int k = 0; k < 80; ++k) {
    record_batch b;
    b.schema.fields = {field("d", dictionary(int32(), utf8()))};
    b.num_rows = 10;
    array_data d = gen.array(b.schema.fields[0].type, 10);
    d.dictionary = std::make_shared<array_data>(gen.array(utf8(), 20000));
    b.columns.push_back(std::move(d));
    batches.push_back(std::move(b));
  }
  const std::string path = write("long.arrows", written(batches, ipc::stream_writer::format::stream, std::nullopt));
  const std::int64_t before = ctx().bytes_allocated();
  ipc::device_stream_reader r(path, ctx());
  ipc::stream_readahead ahead(r, {1, 1});
  std::int64_t at20 = 0, most_after = 0;
  for (int k = 0; k < 80; ++k) {
    std::optional<record_batch> b = ahead.next();
    ASSERT_TRUE(b.has_value()) << k;
    b.reset();
    const std::int64_t held = ctx().bytes_allocated() - before;
    if (k == 20) at20 = held;
    if (k > 20) most_after = std::max(most_after, held);
  }
  EXPECT_LT(most_after, 3 * at20 + (1 << 20)) << "held at batch 20: " << at20;
}

// A stream cut in the middle of batch 7: batches 0-6 come (the run that
// failed read again batch by batch), then the error (its body runs past
// the end of the file, named), for good; nothing stays allocated, and the reader is left at batch 7.
TEST_F(IpcFileManyBatches, StreamReadaheadGivesTheGoodBatchesBeforeTheErrorThenTheError) {
  const std::vector<record_batch> batches = many_batches(12, false, 33);
  for (const auto& codec : kCodecs) {
    SCOPED_TRACE(codec ? ipc::to_string(*codec) : "uncompressed");
    const std::vector<std::byte> good = written(batches, ipc::stream_writer::format::stream, codec);
    // Where batch 7's message starts and ends, from the whole stream.
    std::int64_t batch7 = 0, cut = 0;
    {
      ipc::device_stream_reader probe(write("cut.arrows", good), ctx());
      for (int i = 0; i < 7; ++i) (void)probe.read_next();
      batch7 = probe.position();
      (void)probe.read_next();
      cut = probe.position() - 8;  // inside batch 7's body
    }
    for (const int depth : {2, 0}) {
      SCOPED_TRACE("depth " + std::to_string(depth));
      const std::string path = write("cut.arrows", good);
      ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(cut)), 0);
      const std::int64_t allocated_before = ctx().bytes_allocated();
      ipc::device_stream_reader r(path, ctx());
      {
        ipc::stream_readahead ahead(r, {depth, std::int64_t{1} << 40});  // depth 2: batches 1-6 in one read
        expect_seven_then_error<ipc::invalid_message>(ahead, batches, "runs past the end of file \"" + path + "\"");
      }
      EXPECT_EQ(ctx().bytes_allocated(), allocated_before) << "every allocation released";
      EXPECT_EQ(r.position(), batch7) << "the reader is left at batch 7";
    }
  }
}

// A read of several batches that fails as a whole (its device memory: the
// emulation fails the run's allocation) is done again batch by batch: every
// batch still comes, in order.
TEST_F(IpcFileManyBatches, StreamReadaheadReadsAFailedRunAgainBatchByBatch) {
  const cuarrow_test::fault_api& f = cuarrow_test::faults();
  if (!f.available()) GTEST_SKIP() << "fails one allocation: needs the host emulation's fault injection";
  const std::vector<record_batch> batches = many_batches(10, false, 34);
  const std::string path = write("again.arrows", written(batches, ipc::stream_writer::format::stream, std::nullopt));
  const std::int64_t allocated_before = ctx().bytes_allocated();
  ipc::device_stream_reader r(path, ctx());
  f.clear();
  // The second run's allocation (batches 1-9), from the pool or not.
  ASSERT_EQ(f.inject("cuMemAllocFromPoolAsync", 2, CUDA_ERROR_OUT_OF_MEMORY), 0);
  ASSERT_EQ(f.inject("cuMemAllocAsync", 2, CUDA_ERROR_OUT_OF_MEMORY), 0);
  std::vector<record_batch> got;
  {
    ipc::stream_readahead ahead(r, {1, std::int64_t{1} << 40});
    got = drain(ahead);
  }
  EXPECT_EQ(f.injected(), 1u) << "the second run's allocation failed";
  f.clear();
  expect_same(batches, got);
  EXPECT_FALSE(r.read_next().has_value()) << "the reader is at the end";
  got.clear();
  EXPECT_EQ(ctx().bytes_allocated(), allocated_before) << "every allocation released";
}

TEST_F(IpcFile, StreamReadaheadRefusesBadArgumentsBeforeReading) {
  ipc::device_stream_reader r(write_golden("primitives.arrows"), ctx());
  EXPECT_THROW(ipc::stream_readahead(r, {-1}), cuarrow::invalid_argument);
  EXPECT_THROW(ipc::stream_readahead(r, {1, 0}), cuarrow::invalid_argument);
  EXPECT_EQ(r.stats().batches, 0) << "nothing read";
}

}  // namespace
}  // namespace cuarrow_ipc_file_test
