// Byte equality with pyarrow: the streams and files under tests/ipc/data/
// were written by pyarrow (tests/ipc/make_golden.py says how and with which
// version).  Every message of every file is read, its metadata re-encoded
// with cuarrow's writer and compared byte for byte with pyarrow's (schema,
// dictionary batch and record batch messages, prefix and padding included),
// and so is each file's footer and trailer.  The reads are also checked for
// what they mean (types, dictionary ids, deltas, compression, metadata).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuarrow/ipc/metadata.hpp"
#include "test_data.hpp"

namespace ipc = cuarrow::ipc;
namespace arrow = cuarrow::arrow;

namespace {

using test_data::load;

// Reads the messages of a stream starting at `pos`, checking that each
// re-encodes to the same bytes; stops after the end-of-stream marker.
std::vector<ipc::message_metadata> read_stream(std::span<const std::byte> bytes, std::size_t pos,
                                               std::size_t* end = nullptr) {
  std::vector<ipc::message_metadata> out;
  for (int i = 0;; ++i) {
    const auto rest = bytes.subspan(pos);
    const auto e = ipc::read_encapsulated_metadata(rest, "stream message " + std::to_string(i));
    if (e.prefix.end_of_stream()) {
      EXPECT_EQ(e.prefix.prefix_length, 8);
      const auto eos = ipc::end_of_stream_marker();
      EXPECT_TRUE(std::equal(eos.begin(), eos.end(), rest.begin())) << "end-of-stream marker";
      pos += 8;
      break;
    }
    EXPECT_EQ(e.prefix.prefix_length, 8);
    EXPECT_EQ(e.prefix.size() % 8, 0);
    ipc::message_metadata m = ipc::read_message_metadata(e.flatbuffer);
    const auto again = ipc::write_encapsulated_metadata(m);
    const auto original = rest.first(static_cast<std::size_t>(e.prefix.size()));
    EXPECT_TRUE(std::equal(again.begin(), again.end(), original.begin(), original.end()))
        << "message " << i << " (kind " << static_cast<int>(m.kind()) << ") re-encodes to other bytes: " << again.size()
        << " bytes, pyarrow wrote " << original.size();
    // And the re-encoded bytes read back to the same metadata.
    const auto e2 = ipc::read_encapsulated_metadata(again);
    const auto m2 = ipc::read_message_metadata(e2.flatbuffer);
    EXPECT_EQ(m2.header, m.header);
    pos += static_cast<std::size_t>(e.prefix.size() + m.body_length);
    out.push_back(std::move(m));
  }
  if (end != nullptr) *end = pos;
  return out;
}

std::vector<ipc::message_metadata> read_stream_file(const std::string& name) {
  const auto bytes = load(name);
  std::size_t end = 0;
  auto out = read_stream(bytes, 0, &end);
  EXPECT_EQ(end, bytes.size()) << name << ": bytes after the end-of-stream marker";
  return out;
}

const ipc::schema_message& schema_of(const ipc::message_metadata& m) { return std::get<ipc::schema_message>(m.header); }

}  // namespace

TEST(IpcGolden, EveryStreamReencodesByteForByte) {
  for (const char* name :
       {"primitives.arrows", "binaries.arrows", "nested.arrows", "metadata.arrows", "dictionaries.arrows",
        "dictionary_deltas.arrows", "empty_schema.arrows", "empty_batch.arrows", "zstd.arrows", "lz4.arrows"}) {
    SCOPED_TRACE(name);
    const auto messages = read_stream_file(name);
    ASSERT_GE(messages.size(), 2u);
    EXPECT_EQ(messages[0].kind(), ipc::message_kind::schema);
    for (const auto& m : messages) EXPECT_EQ(m.version, ipc::metadata_version::v5);
  }
}

TEST(IpcGolden, PrimitiveTypesReadAsPyarrowWroteThem) {
  const auto messages = read_stream_file("primitives.arrows");
  const auto& s = schema_of(messages[0]).schema;
  const std::vector<arrow::data_type> expected = {
      arrow::null(),
      arrow::boolean(),
      arrow::int8(),
      arrow::uint8(),
      arrow::int16(),
      arrow::uint16(),
      arrow::int32(),
      arrow::uint32(),
      arrow::int64(),
      arrow::uint64(),
      arrow::float16(),
      arrow::float32(),
      arrow::float64(),
      arrow::decimal(7, 2, 32),
      arrow::decimal(15, 2, 64),
      arrow::decimal(38, 2, 128),
      arrow::decimal(76, 1, 256),
      arrow::date32(),
      arrow::date64(),
      arrow::time32(arrow::time_unit::second),
      arrow::time32(arrow::time_unit::milli),
      arrow::time64(arrow::time_unit::micro),
      arrow::time64(arrow::time_unit::nano),
      arrow::timestamp(arrow::time_unit::second),
      arrow::timestamp(arrow::time_unit::milli, "UTC"),
      arrow::timestamp(arrow::time_unit::micro, "Europe/Paris"),
      arrow::timestamp(arrow::time_unit::nano),
      arrow::duration(arrow::time_unit::second),
      arrow::duration(arrow::time_unit::milli),
      arrow::duration(arrow::time_unit::micro),
      arrow::duration(arrow::time_unit::nano),
      arrow::interval_month_day_nano(),
  };
  ASSERT_EQ(s.fields.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(s.fields[i].type, expected[i]) << s.fields[i].name << ": " << s.fields[i].type.to_string();
    EXPECT_TRUE(s.fields[i].nullable);
  }
  const auto& batch = std::get<ipc::record_batch_header>(messages[1].header);
  EXPECT_EQ(batch.length, 2);
  EXPECT_EQ(batch.nodes.size(), expected.size());
  EXPECT_EQ(batch.nodes[0], (ipc::field_node{2, 2}));  // the null column
  EXPECT_FALSE(batch.compression);
}

TEST(IpcGolden, ViewTypesCarryVariadicCountsAndCompressionItsCodec) {
  const auto plain = read_stream_file("binaries.arrows");
  const auto& s = schema_of(plain[0]).schema;
  EXPECT_EQ(s.fields[4].type, arrow::binary_view());
  EXPECT_EQ(s.fields[5].type, arrow::utf8_view());
  EXPECT_EQ(s.fields[6].type, arrow::fixed_size_binary(4));
  const auto& batch = std::get<ipc::record_batch_header>(plain[1].header);
  EXPECT_EQ(batch.variadic_buffer_counts, (std::vector<std::int64_t>{1, 1}));
  EXPECT_FALSE(batch.compression);
  const auto zstd = read_stream_file("zstd.arrows");
  EXPECT_EQ(std::get<ipc::record_batch_header>(zstd[1].header).compression, ipc::compression_codec::zstd);
  const auto lz4 = read_stream_file("lz4.arrows");
  EXPECT_EQ(std::get<ipc::record_batch_header>(lz4[1].header).compression, ipc::compression_codec::lz4_frame);
}

TEST(IpcGolden, NestedTypesKeepTheirChildren) {
  const auto messages = read_stream_file("nested.arrows");
  const auto& f = schema_of(messages[0]).schema.fields;
  EXPECT_EQ(f[0].type, arrow::list(arrow::field("item", arrow::int32())));
  EXPECT_EQ(f[1].type, arrow::large_list(arrow::field("v", arrow::int64(), false)));
  EXPECT_EQ(f[2].type.id, arrow::type_id::list_view);
  EXPECT_EQ(f[3].type.id, arrow::type_id::large_list_view);
  EXPECT_EQ(f[4].type, arrow::fixed_size_list(arrow::field("item", arrow::int8()), 2));
  EXPECT_EQ(f[5].type, arrow::struct_({arrow::field("a", arrow::int32()), arrow::field("b", arrow::utf8(), false)}));
  EXPECT_EQ(f[6].type, arrow::map(arrow::utf8(), arrow::int32()));
  EXPECT_EQ(f[7].type, arrow::map(arrow::int16(), arrow::utf8(), true));
  EXPECT_EQ(f[8].type, arrow::sparse_union({arrow::field("i", arrow::int64()), arrow::field("s", arrow::utf8())}));
  EXPECT_EQ(f[9].type,
            arrow::dense_union({arrow::field("f", arrow::float64()), arrow::field("b", arrow::boolean())}, {5, 7}));
  EXPECT_EQ(f[10].type, arrow::run_end_encoded(arrow::int32(), arrow::utf8()));
  EXPECT_EQ(f[11].type, arrow::run_end_encoded(arrow::int64(), arrow::float64()));
  EXPECT_EQ(f[12].type.id, arrow::type_id::list);
}

TEST(IpcGolden, MetadataAtEveryLevel) {
  const auto messages = read_stream_file("metadata.arrows");
  const auto& s = schema_of(messages[0]).schema;
  EXPECT_EQ(s.metadata, (arrow::key_value_metadata{{"origin", "cuarrow golden"}, {"empty", ""}, {"utf8 é", "ü"}}));
  EXPECT_FALSE(s.fields[0].nullable);
  EXPECT_EQ(s.fields[0].metadata, (arrow::key_value_metadata{{"unit", "m"}, {"k2", "v2"}}));
  EXPECT_EQ(s.fields[1].extension_name(), "my.ext");
  EXPECT_EQ(s.fields[2].name, "");
  EXPECT_EQ(messages[1].custom_metadata, (arrow::key_value_metadata{{"batch", "0"}}));
  EXPECT_TRUE(messages[2].custom_metadata.empty());
}

TEST(IpcGolden, DictionariesTheirIdsAndDeltas) {
  for (const char* name : {"dictionaries.arrows", "dictionary_deltas.arrows"}) {
    SCOPED_TRACE(name);
    const bool deltas = std::string(name) == "dictionary_deltas.arrows";
    const auto messages = read_stream_file(name);
    const auto& sm = schema_of(messages[0]);
    EXPECT_EQ(sm.dictionaries, (std::vector<ipc::dictionary_field>{{0, {0}}, {1, {1}}, {2, {2, 0}}}));
    EXPECT_EQ(sm.schema.fields[0].type, arrow::dictionary(arrow::int32(), arrow::utf8()));
    EXPECT_EQ(sm.schema.fields[1].type, arrow::dictionary(arrow::int8(), arrow::int64(), true));
    EXPECT_EQ(sm.schema.fields[2].type.children[0].type, arrow::dictionary(arrow::uint16(), arrow::large_utf8()));
    int dictionaries = 0;
    int delta_count = 0;
    for (const auto& m : messages) {
      if (const auto* d = std::get_if<ipc::dictionary_batch_header>(&m.header)) {
        ++dictionaries;
        delta_count += d->is_delta ? 1 : 0;
        EXPECT_GE(d->id, 0);
        EXPECT_LE(d->id, 2);
      }
    }
    EXPECT_EQ(dictionaries, 4);  // three, then the first again for the second batch
    EXPECT_EQ(delta_count, deltas ? 1 : 0);
  }
}

TEST(IpcGolden, FilesFooterAndTrailerByteForByte) {
  for (const char* name : {"file_dictionaries.arrow", "file_primitives.arrow"}) {
    SCOPED_TRACE(name);
    const auto bytes = load(name);
    const ipc::file_footer footer = ipc::read_file_footer(bytes);
    const auto trailer = ipc::write_file_trailer(footer);
    ASSERT_LE(trailer.size(), bytes.size());
    EXPECT_TRUE(std::equal(trailer.begin(), trailer.end(), bytes.end() - static_cast<std::ptrdiff_t>(trailer.size())))
        << "the footer re-encodes to other bytes";
    // The stream inside: magic, padding, messages, end-of-stream, footer.
    std::size_t end = 0;
    const auto messages = read_stream(bytes, ipc::file_header_size, &end);
    EXPECT_EQ(end + trailer.size(), bytes.size());
    EXPECT_EQ(schema_of(messages[0]), footer.schema);
    // Each block names a message of the stream, its metadata length and body.
    for (const auto* blocks : {&footer.dictionaries, &footer.record_batches}) {
      for (const auto& b : *blocks) {
        const auto e = ipc::read_encapsulated_metadata(std::span(bytes).subspan(static_cast<std::size_t>(b.offset)));
        EXPECT_EQ(e.prefix.size(), b.metadata_length);
        EXPECT_EQ(ipc::read_message_metadata(e.flatbuffer).body_length, b.body_length);
      }
    }
    EXPECT_EQ(footer.record_batches.size(), 2u);
  }
  const ipc::file_footer f = ipc::read_file_footer(load("file_primitives.arrow"));
  EXPECT_EQ(f.schema.schema.fields.size(), 32u);
  EXPECT_TRUE(f.dictionaries.empty());
  const ipc::file_footer d = ipc::read_file_footer(load("file_dictionaries.arrow"));
  EXPECT_EQ(d.dictionaries.size(), 3u);
}
