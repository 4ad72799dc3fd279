// The IPC metadata reader and writer: round trips of every type cuarrow
// supports, the encapsulation and the file format, and malformed or
// hostile input, each refused with the error a user would see.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuarrow/ipc/metadata.hpp"
#include "ipc_format/flatbuffer.hpp"

namespace ipc = cuarrow::ipc;
namespace arrow = cuarrow::arrow;
namespace fb = cuarrow::ipc::fb;
using arrow::field;
using arrow::time_unit;

namespace {

ipc::message_metadata round_trip(const ipc::message_metadata& m) {
  const auto bytes = ipc::write_message_metadata(m);
  ipc::message_metadata back = ipc::read_message_metadata(bytes);
  // Writing what was read gives the same bytes again.
  EXPECT_EQ(ipc::write_message_metadata(back), bytes);
  return back;
}

ipc::message_metadata schema_message_of(arrow::schema s, std::vector<ipc::dictionary_field> dicts = {}) {
  ipc::message_metadata m;
  m.header = ipc::schema_message{std::move(s), std::move(dicts), {}};
  return m;
}

// The error reading `bytes` gives: where, then reason.
std::pair<std::string, std::string> error_of(std::span<const std::byte> bytes) {
  try {
    ipc::read_message_metadata(bytes);
  } catch (const ipc::invalid_message& e) {
    EXPECT_EQ(std::string(e.what()), e.where() + ": " + e.reason());
    return {e.where(), e.reason()};
  }
  ADD_FAILURE() << "read_message_metadata accepted the input";
  return {};
}

// ---- raw FlatBuffers for inputs the writer never produces ---------------------

using offset = fb::builder::offset;

// A Message around a header built by `header` (which returns its offset).
std::vector<std::byte> raw_message(std::uint8_t header_type, const std::function<offset(fb::builder&)>& header,
                                   std::int16_t version = 4, std::int64_t body_length = 0) {
  fb::builder b;
  const offset h = header ? header(b) : 0;
  b.start_table();
  b.add_scalar<std::int64_t>(3, body_length, 0);
  b.add_offset(2, h);
  b.add_scalar<std::int16_t>(0, version, 0);
  b.add_scalar<std::uint8_t>(1, header_type, 0);
  return b.finish(b.end_table());
}

offset empty(fb::builder& b) {
  b.start_table();
  return b.end_table();
}

// A Field (name "f") of type `type_code` whose type table `type` builds.
offset raw_field(fb::builder& b, std::uint8_t type_code, const std::function<offset(fb::builder&)>& type,
                 std::vector<offset> children = {}) {
  const offset t = type ? type(b) : 0;
  const offset name = b.create_string("f");
  const offset kids = b.create_offset_vector(children);
  b.start_table();
  b.add_offset(5, kids);
  b.add_offset(3, t);
  b.add_offset(0, name);
  b.add_scalar<std::uint8_t>(2, type_code, 0);
  return b.end_table();
}

std::vector<std::byte> raw_schema(const std::function<std::vector<offset>(fb::builder&)>& fields,
                                  std::int16_t endianness = 0) {
  return raw_message(1, [&](fb::builder& b) {
    const offset v = b.create_offset_vector(fields(b));
    b.start_table();
    b.add_offset(1, v);
    b.add_scalar<std::int16_t>(0, endianness, 0);
    return b.end_table();
  });
}

std::vector<std::byte> one_field_schema(std::uint8_t type_code, const std::function<offset(fb::builder&)>& type) {
  return raw_schema([&](fb::builder& b) { return std::vector<offset>{raw_field(b, type_code, type)}; });
}

std::function<offset(fb::builder&)> int_type(std::int32_t bits, bool is_signed = true) {
  return [=](fb::builder& b) {
    b.start_table();
    b.add_scalar<std::int32_t>(0, bits, 0);
    b.add_bool(1, is_signed, false);
    return b.end_table();
  };
}

arrow::schema every_type_schema() {
  const auto f = [](std::string n, arrow::data_type t, bool nullable = true) {
    return field(std::move(n), std::move(t), nullable);
  };
  std::vector<field> fields = {
      f("null", arrow::null()),
      f("bool", arrow::boolean(), false),
      f("i8", arrow::int8()),
      f("u8", arrow::uint8()),
      f("i16", arrow::int16()),
      f("u16", arrow::uint16()),
      f("i32", arrow::int32()),
      f("u32", arrow::uint32()),
      f("i64", arrow::int64()),
      f("u64", arrow::uint64()),
      f("f16", arrow::float16()),
      f("f32", arrow::float32()),
      f("f64", arrow::float64()),
      f("d32", arrow::decimal(9, 3, 32)),
      f("d64", arrow::decimal(18, -2, 64)),
      f("d128", arrow::decimal(38, 10)),
      f("d256", arrow::decimal(76, 0, 256)),
      f("date32", arrow::date32()),
      f("date64", arrow::date64()),
      f("t32s", arrow::time32(time_unit::second)),
      f("t32ms", arrow::time32(time_unit::milli)),
      f("t64us", arrow::time64(time_unit::micro)),
      f("t64ns", arrow::time64(time_unit::nano)),
      f("ts", arrow::timestamp(time_unit::second)),
      f("ts_tz", arrow::timestamp(time_unit::nano, "America/New_York")),
      f("dur_s", arrow::duration(time_unit::second)),
      f("dur_ms", arrow::duration(time_unit::milli)),
      f("dur_us", arrow::duration(time_unit::micro)),
      f("dur_ns", arrow::duration(time_unit::nano)),
      f("months", arrow::interval_months()),
      f("day_time", arrow::interval_day_time()),
      f("mdn", arrow::interval_month_day_nano()),
      f("fsb", arrow::fixed_size_binary(16)),
      f("fsb0", arrow::fixed_size_binary(0)),
      f("bin", arrow::binary()),
      f("lbin", arrow::large_binary()),
      f("str", arrow::utf8()),
      f("lstr", arrow::large_utf8()),
      f("bview", arrow::binary_view()),
      f("sview", arrow::utf8_view()),
      f("list", arrow::list(field("item", arrow::int32(), false))),
      f("llist", arrow::large_list(field("x", arrow::utf8()))),
      f("lview", arrow::list_view(field("item", arrow::float32()))),
      f("llview", arrow::large_list_view(field("item", arrow::boolean()))),
      f("fsl", arrow::fixed_size_list(field("item", arrow::int16()), 3)),
      f("struct", arrow::struct_({field("a", arrow::int8()), field("b", arrow::list(field("i", arrow::utf8())))})),
      f("empty_struct", arrow::struct_({})),
      f("map", arrow::map(arrow::utf8(), arrow::float64(), true, false)),
      f("sunion", arrow::sparse_union({field("a", arrow::int32()), field("b", arrow::utf8())})),
      f("dunion", arrow::dense_union({field("a", arrow::int32()), field("b", arrow::null())}, {3, 127})),
      f("ree16", arrow::run_end_encoded(arrow::int16(), arrow::utf8())),
      f("ree64", arrow::run_end_encoded(arrow::int64(), arrow::list(field("item", arrow::int8())))),
      f("dict", arrow::dictionary(arrow::int16(), arrow::utf8())),
      f("dict_ordered", arrow::dictionary(arrow::uint64(), arrow::float64(), true)),
      f("dict_of_struct", arrow::dictionary(arrow::int32(), arrow::struct_({field("s", arrow::int64())}))),
      f("list_of_dict", arrow::list(field("item", arrow::dictionary(arrow::int8(), arrow::large_utf8())))),
      f("ext", arrow::int64(), true),
  };
  fields.back().metadata = {{"ARROW:extension:name", "my.uuid"}, {"ARROW:extension:metadata", "{}"}};
  fields[3].metadata = {{"k", "v"}, {"k", "duplicate keys kept"}, {"", ""}};
  arrow::schema s{std::move(fields), {{"schema", "metadata"}, {"second", "\x01\x02"}}};
  return s;
}

std::vector<ipc::dictionary_field> every_type_dictionaries() {
  return {{7, {52}}, {0, {53}}, {-3, {54}}, {100000000000, {55, 0}}};
}

}  // namespace

// ---- round trips --------------------------------------------------------------

TEST(IpcMetadata, SchemaOfEveryTypeRoundTrips) {
  auto m = schema_message_of(every_type_schema(), every_type_dictionaries());
  std::get<ipc::schema_message>(m.header).features = {1, 2};
  const auto back = round_trip(m);
  EXPECT_EQ(back.kind(), ipc::message_kind::schema);
  EXPECT_EQ(&back.schema_header("test"), &std::get<ipc::schema_message>(back.header));
  EXPECT_THROW((void)back.record_batch("test"), cuarrow::invalid_argument);
  EXPECT_THROW((void)back.dictionary_batch("test"), cuarrow::invalid_argument);
  const auto& s = std::get<ipc::schema_message>(back.header);
  const auto& expected = std::get<ipc::schema_message>(m.header);
  ASSERT_EQ(s.schema.fields.size(), expected.schema.fields.size());
  for (std::size_t i = 0; i < s.schema.fields.size(); ++i) {
    EXPECT_EQ(s.schema.fields[i], expected.schema.fields[i]) << expected.schema.fields[i].name;
  }
  EXPECT_EQ(s, expected);
  EXPECT_EQ(back.version, ipc::metadata_version::v5);
  EXPECT_EQ(back.body_length, 0);
}

TEST(IpcMetadata, EmptySchemaRoundTrips) {
  const auto back = round_trip(schema_message_of({}));
  EXPECT_EQ(std::get<ipc::schema_message>(back.header), ipc::schema_message{});
}

TEST(IpcMetadata, RecordBatchHeadersRoundTrip) {
  ipc::record_batch_header h;
  h.length = 5;
  h.nodes = {{5, 0}, {5, 5}, {0, 0}, {std::int64_t{1} << 40, 3}};
  h.buffers = {{0, 8}, {8, 0}, {8, 64}, {72, 1000}};
  h.variadic_buffer_counts = {0, 3};
  for (const auto codec : {std::optional<ipc::compression_codec>{}, std::optional(ipc::compression_codec::lz4_frame),
                           std::optional(ipc::compression_codec::zstd)}) {
    h.compression = codec;
    for (const auto version : {ipc::metadata_version::v4, ipc::metadata_version::v5}) {
      ipc::message_metadata m;
      m.version = version;
      m.header = h;
      m.body_length = 1072;
      m.custom_metadata = {{"batch", "metadata"}};
      const auto back = round_trip(m);
      EXPECT_EQ(back.kind(), ipc::message_kind::record_batch);
      EXPECT_EQ(std::get<ipc::record_batch_header>(back.header), h);
      EXPECT_EQ(back.version, version);
      EXPECT_EQ(back.body_length, 1072);
      EXPECT_EQ(back.custom_metadata, m.custom_metadata);
    }
  }
}

TEST(IpcMetadata, DictionaryBatchHeadersRoundTrip) {
  for (const bool delta : {false, true}) {
    ipc::dictionary_batch_header d;
    d.id = delta ? -1 : 42;
    d.is_delta = delta;
    d.data.length = 3;
    d.data.nodes = {{3, 1}};
    d.data.buffers = {{0, 8}, {8, 16}, {24, 8}};
    ipc::message_metadata m;
    m.header = d;
    m.body_length = 32;
    const auto back = round_trip(m);
    EXPECT_EQ(back.kind(), ipc::message_kind::dictionary_batch);
    EXPECT_EQ(std::get<ipc::dictionary_batch_header>(back.header), d);
  }
}

TEST(IpcMetadata, WriterRefusesWhatArrowCannotExpress) {
  // A dictionary field without an id.
  EXPECT_THROW(ipc::write_message_metadata(
                   schema_message_of({{field("d", arrow::dictionary(arrow::int8(), arrow::utf8()))}, {}}, {{1, {1}}})),
               cuarrow::invalid_argument);
  ipc::message_metadata m;
  EXPECT_THROW(ipc::write_message_metadata(m), cuarrow::invalid_argument);  // no header
  ipc::record_batch_header h;
  h.length = -1;
  m.header = h;
  EXPECT_THROW(ipc::write_message_metadata(m), cuarrow::invalid_argument);
  h.length = 0;
  h.buffers = {{-8, 8}};
  m.header = h;
  EXPECT_THROW(ipc::write_message_metadata(m), cuarrow::invalid_argument);
}

// ---- encapsulation ---------------------------------------------------------------

TEST(IpcEncapsulation, PadsToEightBytesAndReadsBothPrefixForms) {
  for (std::size_t n = 0; n < 20; ++n) {
    std::vector<std::byte> fbuf(n, std::byte{0x5A});
    const auto e = ipc::encapsulate(fbuf);
    EXPECT_EQ(e.size() % 8, 0u);
    EXPECT_GE(e.size(), n + 8);
    EXPECT_LT(e.size(), n + 16);
    const auto r = ipc::read_encapsulated_metadata(e);
    EXPECT_EQ(r.prefix.prefix_length, 8);
    EXPECT_EQ(static_cast<std::size_t>(r.prefix.size()), e.size());
    EXPECT_TRUE(std::equal(fbuf.begin(), fbuf.end(), r.flatbuffer.begin()));
    for (std::size_t i = 8 + n; i < e.size(); ++i) EXPECT_EQ(e[i], std::byte{0}) << "padding is zeros";
  }
  // Before Arrow 0.15: the length alone.
  const std::vector<std::byte> legacy = {std::byte{8}, std::byte{0}, std::byte{0}, std::byte{0},
                                         std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4},
                                         std::byte{5}, std::byte{6}, std::byte{7}, std::byte{8}};
  const auto r = ipc::read_encapsulated_metadata(legacy);
  EXPECT_EQ(r.prefix.prefix_length, 4);
  EXPECT_EQ(r.prefix.metadata_length, 8);
  EXPECT_EQ(r.flatbuffer.size(), 8u);
  // End of stream: both forms, and no bytes at all.
  EXPECT_TRUE(ipc::read_message_prefix(ipc::end_of_stream_marker()).end_of_stream());
  EXPECT_TRUE(ipc::read_message_prefix(std::vector<std::byte>(4, std::byte{0})).end_of_stream());
  EXPECT_TRUE(ipc::read_message_prefix({}).end_of_stream());
  EXPECT_EQ(ipc::end_of_stream_marker(),
            (std::vector<std::byte>{std::byte{0xFF}, std::byte{0xFF}, std::byte{0xFF}, std::byte{0xFF}, std::byte{0},
                                    std::byte{0}, std::byte{0}, std::byte{0}}));
}

TEST(IpcEncapsulation, RefusesTruncatedAndNegativePrefixes) {
  auto message = [](std::span<const std::byte> b) {
    try {
      ipc::read_encapsulated_metadata(b, "stream message 3");
    } catch (const ipc::invalid_message& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::byte ff{0xFF};
  EXPECT_EQ(message(std::vector<std::byte>{ff, ff}),
            "stream message 3: truncated: 2 bytes, a message starts with a 4- or 8-byte prefix");
  EXPECT_EQ(message(std::vector<std::byte>{ff, ff, ff, ff, std::byte{1}}),
            "stream message 3: truncated: 5 bytes, the continuation marker is followed by a 4-byte metadata length");
  EXPECT_EQ(message(std::vector<std::byte>{ff, ff, ff, ff, ff, ff, ff, std::byte{0x80}}),
            "stream message 3: metadata length is negative (-2130706433)");
  EXPECT_EQ(message(std::vector<std::byte>{ff, ff, ff, ff, std::byte{16}, std::byte{0}, std::byte{0}, std::byte{0},
                                           std::byte{0}}),
            "stream message 3: truncated: the metadata is 16 bytes, 1 follow the prefix");
}

// ---- the file format ----------------------------------------------------------------

namespace {

// A small file: magic, padding, one schema message, two batches, EOS, footer.
std::vector<std::byte> make_file(ipc::file_footer& footer) {
  std::vector<std::byte> file = {std::byte{'A'}, std::byte{'R'}, std::byte{'R'}, std::byte{'O'},
                                 std::byte{'W'}, std::byte{'1'}, std::byte{0},   std::byte{0}};
  auto append = [&](const std::vector<std::byte>& b) { file.insert(file.end(), b.begin(), b.end()); };
  footer.schema =
      std::get<ipc::schema_message>(schema_message_of(every_type_schema(), every_type_dictionaries()).header);
  append(ipc::write_encapsulated_metadata(schema_message_of(footer.schema.schema, footer.schema.dictionaries)));
  for (int i = 0; i < 2; ++i) {
    ipc::message_metadata m;
    ipc::record_batch_header h;
    h.length = 1;
    h.buffers = {{0, 8}};
    m.header = h;
    m.body_length = 8;
    const auto meta = ipc::write_encapsulated_metadata(m);
    footer.record_batches.push_back(
        {static_cast<std::int64_t>(file.size()), static_cast<std::int32_t>(meta.size()), m.body_length});
    append(meta);
    append(std::vector<std::byte>(8, std::byte{0x11}));
  }
  append(ipc::end_of_stream_marker());
  footer.custom_metadata = {{"file", "level"}};
  append(ipc::write_file_trailer(footer));
  return file;
}

std::string file_error(std::span<const std::byte> file) {
  try {
    ipc::read_file_footer(file);
  } catch (const ipc::invalid_message& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST(IpcFile, FooterRoundTripsAndNamesEveryBatch) {
  ipc::file_footer footer;
  const auto file = make_file(footer);
  const ipc::file_footer back = ipc::read_file_footer(file);
  EXPECT_EQ(back.schema, footer.schema);
  EXPECT_EQ(back.record_batches, footer.record_batches);
  EXPECT_TRUE(back.dictionaries.empty());
  EXPECT_EQ(back.custom_metadata, footer.custom_metadata);
  EXPECT_EQ(back.version, ipc::metadata_version::v5);
  EXPECT_EQ(ipc::write_footer(back), ipc::write_footer(footer));
}

TEST(IpcFile, RefusesBadMagicLengthsAndBlocks) {
  ipc::file_footer footer;
  const auto good = make_file(footer);
  auto bad = good;
  bad[0] = std::byte{'X'};
  EXPECT_EQ(file_error(bad), "file header: not an Arrow IPC file: it does not start with \"ARROW1\"");
  bad = good;
  bad.back() = std::byte{'2'};
  EXPECT_EQ(file_error(bad), "file trailer: not an Arrow IPC file: it does not end with \"ARROW1\"");
  bad = good;
  const std::int32_t huge = 1 << 30;
  std::memcpy(bad.data() + bad.size() - 10, &huge, 4);
  EXPECT_EQ(file_error(bad), "file trailer: footer length 1073741824 does not fit the " + std::to_string(good.size()) +
                                 "-byte file (at most " + std::to_string(good.size() - 18) + ")");
  EXPECT_EQ(file_error(std::span(good).first(12)), "file trailer: truncated: an Arrow IPC file is at least 18 bytes");
  // A block past the footer, a block inside the header.
  for (const std::int64_t offset : {std::int64_t{4}, static_cast<std::int64_t>(good.size())}) {
    ipc::file_footer f = footer;
    f.record_batches[1].offset = offset;
    const auto trailer = ipc::write_file_trailer(f);
    const auto old_trailer = ipc::write_file_trailer(footer);
    std::vector<std::byte> file(good.begin(), good.end() - static_cast<std::ptrdiff_t>(old_trailer.size()));
    file.insert(file.end(), trailer.begin(), trailer.end());
    const std::string e = file_error(file);
    EXPECT_EQ(e.rfind("Footer.recordBatches[1]: ", 0), 0u) << e;
  }
  // Every truncation of a file is refused, never read past.
  for (std::size_t n = 0; n < good.size(); ++n) {
    EXPECT_THROW(ipc::read_file_footer(std::span(good).first(n)), ipc::invalid_message) << n;
  }
}

// ---- hostile and malformed metadata -------------------------------------------------

TEST(IpcMetadataErrors, EveryTruncationIsRefused) {
  const auto bytes = ipc::write_message_metadata(schema_message_of(every_type_schema(), every_type_dictionaries()));
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(ipc::read_message_metadata(std::span(bytes).first(n)), ipc::invalid_message) << n;
  }
  EXPECT_EQ(error_of(std::span(bytes).first(3)),
            (std::pair<std::string, std::string>{"Message",
                                                 "truncated: 3 bytes, a FlatBuffer starts with a 4-byte root offset"}));
}

TEST(IpcMetadataErrors, OffsetsOutsideTheBufferOrMisaligned) {
  std::vector<std::byte> b(16, std::byte{0});
  b[0] = std::byte{0xFF};
  b[1] = std::byte{0xFF};
  EXPECT_EQ(error_of(b),
            (std::pair<std::string, std::string>{
                "Message", "offset at byte 0 points to byte 65535, past the end of the 16-byte FlatBuffer"}));
  b[0] = std::byte{6};
  b[1] = std::byte{0};
  EXPECT_EQ(error_of(b), (std::pair<std::string, std::string>{"Message", "table at byte 6 is not aligned to 4 bytes"}));
  b[0] = std::byte{0};
  EXPECT_EQ(error_of(b), (std::pair<std::string, std::string>{"Message", "offset at byte 0 is 0"}));
  // A table whose vtable lies before the buffer.
  b[0] = std::byte{8};
  b[8] = std::byte{0x40};
  EXPECT_EQ(error_of(b),
            (std::pair<std::string, std::string>{
                "Message", "the vtable of the table at byte 8 would be at byte -56, outside the 16-byte FlatBuffer"}));
  // A vtable that runs past the end.
  b[8] = std::byte{4};
  b[4] = std::byte{0xF0};
  EXPECT_EQ(error_of(b), (std::pair<std::string, std::string>{
                             "Message", "vtable at byte 4 (240 bytes) runs past the end of the 16-byte FlatBuffer"}));
}

TEST(IpcMetadataErrors, HugeVectorLengths) {
  ipc::record_batch_header h;
  h.nodes = {{1, 0}};
  ipc::message_metadata m;
  m.header = h;
  auto bytes = ipc::write_message_metadata(m);
  // The nodes vector: its length (1) precedes the 16-byte node {1, 0}.
  const std::byte node[16] = {std::byte{1}};
  std::size_t at = 0;
  for (std::size_t i = 4; i + 16 <= bytes.size(); i += 4) {
    if (std::memcmp(bytes.data() + i, node, 16) == 0) at = i - 4;
  }
  ASSERT_NE(at, 0u);
  const std::uint32_t n = 0x01000000;
  std::memcpy(bytes.data() + at, &n, 4);
  const auto [where, reason] = error_of(bytes);
  EXPECT_EQ(where, "Message.header(RecordBatch).nodes");
  EXPECT_EQ(reason, "vector of 16777216 elements at byte " + std::to_string(at + 4) +
                        " (268435456 bytes) runs past the end of the " + std::to_string(bytes.size()) +
                        "-byte FlatBuffer");
  const std::uint32_t larger_than_any = 0x7FFFFFFF;
  std::memcpy(bytes.data() + at, &larger_than_any, 4);
  EXPECT_EQ(error_of(bytes).second, "vector of 2147483647 elements of 16 bytes is larger than any FlatBuffer");
}

TEST(IpcMetadataErrors, StringsMustEndInTheirNul) {
  auto bytes = ipc::write_message_metadata(schema_message_of({{field("abcdef", arrow::int8())}, {}}));
  const char name[] = "abcdef";
  std::size_t at = 0;
  for (std::size_t i = 0; i + 7 <= bytes.size(); ++i) {
    if (std::memcmp(bytes.data() + i, name, 7) == 0) at = i;
  }
  ASSERT_NE(at, 0u);
  bytes[at + 6] = std::byte{'!'};
  EXPECT_EQ(error_of(bytes), (std::pair<std::string, std::string>{
                                 "Message.header(Schema).fields[0].name",
                                 "string of 6 bytes at byte " + std::to_string(at - 4) + " does not end in a NUL"}));
}

TEST(IpcMetadataErrors, NestingDeeperThanArrowReads) {
  // Arrow's reader allows 128 tables deep: Message, Schema, then a field and
  // its type table per level.
  auto nested = [](int levels) {
    arrow::data_type t = arrow::int8();
    for (int i = 0; i < levels; ++i) t = arrow::list(field("item", std::move(t)));
    return schema_message_of({{field("deep", std::move(t))}, {}});
  };
  EXPECT_NO_THROW(round_trip(nested(60)));
  const auto bytes = ipc::write_message_metadata(nested(200));
  const auto [where, reason] = error_of(bytes);
  EXPECT_EQ(reason, "tables nested deeper than 128");
  std::string expected = "Message.header(Schema).fields[0]";
  for (int i = 0; i < 126; ++i) expected += ".children[0]";
  EXPECT_EQ(where, expected);
}

TEST(IpcMetadataErrors, SharedTablesCannotMakeASmallBufferSlowToRead) {
  // Each level's children vector names one child K times: K^3 tables to
  // visit in a buffer of a few kilobytes.
  const auto bytes = raw_schema([](fb::builder& b) {
    offset f = raw_field(b, 6, empty);                                                                 // Bool
    for (int level = 0; level < 3; ++level) f = raw_field(b, 13, empty, std::vector<offset>(100, f));  // Struct_
    return std::vector<offset>{f};
  });
  ASSERT_LT(bytes.size(), 4096u);
  const auto [where, reason] = error_of(bytes);
  EXPECT_EQ(reason, "more than " + std::to_string(8 * bytes.size()) + " tables in one FlatBuffer");
}

TEST(IpcMetadataErrors, MessageLevelChecks) {
  using E = std::pair<std::string, std::string>;
  const auto batch = [](fb::builder& b) { return empty(b); };
  EXPECT_EQ(
      error_of(raw_message(3, batch, 2)),
      (E{"Message.version",
         "metadata version V3 is not supported: cuarrow reads V4 (Arrow 0.8 to 0.17) and V5 (Arrow 1.0 and later)"}));
  EXPECT_EQ(error_of(raw_message(3, batch, 9)), (E{"Message.version", "unknown metadata version 9 (V1..V5 are 0..4)"}));
  EXPECT_EQ(error_of(raw_message(9, batch)), (E{"Message.header_type", "unknown message header type 9"}));
  EXPECT_EQ(error_of(raw_message(0, nullptr)), (E{"Message.header_type", "the message has no header"}));
  EXPECT_EQ(error_of(raw_message(4, batch)),
            (E{"Message.header_type",
               "Tensor messages are not supported (schema, dictionary and record batch messages are)"}));
  EXPECT_EQ(error_of(raw_message(3, nullptr)),
            (E{"Message.header(RecordBatch)", "missing (the header type is set, its table is not)"}));
  EXPECT_EQ(error_of(raw_message(3, batch, 4, -1)), (E{"Message.bodyLength", "the body length is negative (-1)"}));
  EXPECT_EQ(error_of(raw_message(2, batch)),
            (E{"Message.header(DictionaryBatch).data", "missing: a dictionary batch needs its record batch"}));
}

TEST(IpcMetadataErrors, RecordBatchChecks) {
  using E = std::pair<std::string, std::string>;
  auto batch = [](std::int64_t length, std::vector<ipc::field_node> nodes, std::vector<ipc::body_range> buffers,
                  std::int64_t body) {
    return raw_message(
        3,
        [=](fb::builder& b) {
          std::vector<std::int64_t> w;
          for (const auto& n : nodes) w.insert(w.end(), {n.length, n.null_count});
          const offset nv = b.create_struct_vector(w.data(), nodes.size(), 16, 8);
          w.clear();
          for (const auto& r : buffers) w.insert(w.end(), {r.offset, r.length});
          const offset bv = b.create_struct_vector(w.data(), buffers.size(), 16, 8);
          b.start_table();
          b.add_scalar<std::int64_t>(0, length, 0);
          b.add_offset(2, bv);
          b.add_offset(1, nv);
          return b.end_table();
        },
        4, body);
  };
  EXPECT_EQ(error_of(batch(-5, {}, {}, 0)), (E{"Message.header(RecordBatch).length", "the length is negative (-5)"}));
  EXPECT_EQ(error_of(batch(1, {{1, 0}, {1, 2}}, {}, 0)),
            (E{"Message.header(RecordBatch).nodes[1]",
               "length 1 and null count 2: both must be non-negative and the null count at most the length"}));
  EXPECT_EQ(error_of(batch(1, {{-1, 0}}, {}, 0)).first, "Message.header(RecordBatch).nodes[0]");
  EXPECT_EQ(error_of(batch(1, {}, {{0, 8}, {8, 64}}, 64)),
            (E{"Message.header(RecordBatch).buffers[1]", "offset 8 and length 64 do not lie inside the 64-byte body"}));
  EXPECT_EQ(error_of(batch(1, {}, {{-8, 8}}, 64)).first, "Message.header(RecordBatch).buffers[0]");
  EXPECT_EQ(error_of(batch(1, {}, {{std::int64_t{1} << 62, std::int64_t{1} << 62}}, 64)).first,
            "Message.header(RecordBatch).buffers[0]");
  const auto codec = raw_message(3, [](fb::builder& b) {
    b.start_table();
    b.add_scalar<std::int8_t>(0, 5, 0);
    const offset c = b.end_table();
    b.start_table();
    b.add_offset(3, c);
    return b.end_table();
  });
  EXPECT_EQ(error_of(codec), (E{"Message.header(RecordBatch).compression.codec",
                                "unknown compression codec 5 (LZ4_FRAME, ZSTD are 0, 1)"}));
  const auto counts = raw_message(3, [](fb::builder& b) {
    const std::int64_t c[] = {2, -1};
    const offset v = b.create_scalar_vector(c, 2, 8);
    b.start_table();
    b.add_offset(4, v);
    return b.end_table();
  });
  EXPECT_EQ(error_of(counts),
            (E{"Message.header(RecordBatch).variadicBufferCounts[1]", "the buffer count is negative (-1)"}));
}

TEST(IpcMetadataErrors, SchemaChecks) {
  using E = std::pair<std::string, std::string>;
  const std::string f0 = "Message.header(Schema).fields[0]";
  EXPECT_EQ(error_of(raw_schema([](fb::builder&) { return std::vector<offset>{}; }, 1)),
            (E{"Message.header(Schema).endianness",
               "big-endian data is not supported (cuarrow reads little-endian IPC data only)"}));
  EXPECT_EQ(error_of(one_field_schema(99, empty)), (E{f0 + ".type_type", "unknown type code 99"}));
  EXPECT_EQ(error_of(one_field_schema(0, empty)), (E{f0 + ".type_type", "the field has no type"}));
  EXPECT_EQ(error_of(one_field_schema(2, nullptr)),
            (E{f0 + ".type(Int)", "missing (the type code is set, its table is not)"}));
  EXPECT_EQ(error_of(one_field_schema(2, int_type(12))),
            (E{f0 + ".type(Int).bitWidth", "integer width 12 is not 8, 16, 32 or 64"}));
  EXPECT_EQ(error_of(one_field_schema(9,
                                      [](fb::builder& b) {
                                        b.start_table();
                                        b.add_scalar<std::int32_t>(1, 64, 32);
                                        b.add_scalar<std::int16_t>(0, 1, 1);
                                        return b.end_table();
                                      })),
            (E{f0 + ".type(Time).bitWidth", "time in ms is 32 bits wide, not 64"}));
  EXPECT_EQ(error_of(one_field_schema(10,
                                      [](fb::builder& b) {
                                        b.start_table();
                                        b.add_scalar<std::int16_t>(0, 7, 0);
                                        return b.end_table();
                                      })),
            (E{f0 + ".type(Timestamp).unit", "unknown time unit 7 (SECOND..NANOSECOND are 0..3)"}));
  EXPECT_EQ(error_of(one_field_schema(7,
                                      [](fb::builder& b) {
                                        b.start_table();
                                        b.add_scalar<std::int32_t>(0, 50, 0);
                                        return b.end_table();
                                      }))
                .first,
            f0 + ".type(Decimal)");
  EXPECT_EQ(error_of(one_field_schema(12, empty)),
            (E{f0 + ".type(List)", "List needs 1 child field, the field has 0"}));
  EXPECT_EQ(error_of(raw_schema([](fb::builder& b) {
              const offset child = raw_field(b, 6, empty);
              return std::vector<offset>{raw_field(b, 6, empty, {child})};
            })),
            (E{f0 + ".type(Bool)", "Bool has no child fields, the field has 1"}));
  EXPECT_EQ(error_of(raw_schema([](fb::builder& b) {
              const offset child = raw_field(b, 6, empty);
              return std::vector<offset>{raw_field(b, 17, empty, {child})};
            })),
            (E{f0 + ".type(Map)", "a Map's child must be a struct of key and value, not bool"}));
  const auto union_codes = [](std::vector<std::int32_t> codes, int children) {
    return raw_schema([=](fb::builder& b) {
      std::vector<offset> kids;
      for (int i = 0; i < children; ++i) kids.push_back(raw_field(b, 6, empty));
      return std::vector<offset>{raw_field(
          b, 14,
          [&](fb::builder& bb) {
            const offset v = bb.create_scalar_vector(codes.data(), codes.size(), 4);
            bb.start_table();
            bb.add_offset(1, v);
            return bb.end_table();
          },
          kids)};
    });
  };
  EXPECT_EQ(error_of(union_codes({0, 200}, 2)),
            (E{f0 + ".type(Union).typeIds[1]", "union type code 200 is not 0..127"}));
  EXPECT_EQ(error_of(union_codes({0}, 2)), (E{f0 + ".type(Union).typeIds", "1 type codes for 2 child fields"}));
  EXPECT_EQ(error_of(union_codes({3, 3}, 2)).first, f0 + ".type(Union)");
  // A dictionary whose index type is missing, or not an integer width.
  auto dict_field = [](fb::builder& b, std::int64_t id, std::int32_t bits) {
    const offset t = empty(b);
    const offset index = bits == 0 ? 0 : int_type(bits)(b);
    b.start_table();
    b.add_scalar<std::int64_t>(0, id, 0);
    b.add_offset(1, index);
    const offset enc = b.end_table();
    const offset kids = b.create_offset_vector({});
    b.start_table();
    b.add_offset(5, kids);
    b.add_offset(4, enc);
    b.add_offset(3, t);
    b.add_scalar<std::uint8_t>(2, 5, 0);  // Utf8
    return b.end_table();
  };
  EXPECT_EQ(error_of(raw_schema([&](fb::builder& b) { return std::vector<offset>{dict_field(b, 1, 0)}; })),
            (E{f0 + ".dictionary.indexType", "missing: a dictionary needs its index type"}));
  EXPECT_EQ(error_of(raw_schema([&](fb::builder& b) { return std::vector<offset>{dict_field(b, 1, 24)}; })),
            (E{f0 + ".dictionary.indexType.bitWidth", "integer width 24 is not 8, 16, 32 or 64"}));
  EXPECT_EQ(error_of(raw_schema([&](fb::builder& b) {
              const offset a = dict_field(b, 4, 32);
              return std::vector<offset>{a, dict_field(b, 4, 8)};
            })),
            (E{"Message.header(Schema).fields[1].dictionary.id",
               "dictionary id 4 is also that of Message.header(Schema).fields[0]"}));
}
