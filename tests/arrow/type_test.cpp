// Types, format strings and ArrowSchema export/import.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "arrow_test_util.hpp"

namespace cuarrow_arrow_test {
namespace {

using namespace cuarrow::arrow;  // NOLINT

TEST(ArrowType, FormatStringsOfTheSpecTable) {
  const std::vector<std::pair<data_type, std::string>> cases = {
      {null(), "n"},
      {boolean(), "b"},
      {int8(), "c"},
      {uint8(), "C"},
      {int16(), "s"},
      {uint16(), "S"},
      {int32(), "i"},
      {uint32(), "I"},
      {int64(), "l"},
      {uint64(), "L"},
      {float16(), "e"},
      {float32(), "f"},
      {float64(), "g"},
      {binary(), "z"},
      {large_binary(), "Z"},
      {binary_view(), "vz"},
      {utf8(), "u"},
      {large_utf8(), "U"},
      {utf8_view(), "vu"},
      {decimal(19, 10), "d:19,10"},
      {decimal(7, -2, 32), "d:7,-2,32"},
      {decimal(18, 3, 64), "d:18,3,64"},
      {decimal(40, 5, 256), "d:40,5,256"},
      {fixed_size_binary(16), "w:16"},
      {date32(), "tdD"},
      {date64(), "tdm"},
      {time32(time_unit::second), "tts"},
      {time32(time_unit::milli), "ttm"},
      {time64(time_unit::micro), "ttu"},
      {time64(time_unit::nano), "ttn"},
      {timestamp(time_unit::second), "tss:"},
      {timestamp(time_unit::milli, "UTC"), "tsm:UTC"},
      {timestamp(time_unit::micro, "America/New_York"), "tsu:America/New_York"},
      {timestamp(time_unit::nano, "+01:00"), "tsn:+01:00"},
      {duration(time_unit::second), "tDs"},
      {duration(time_unit::milli), "tDm"},
      {duration(time_unit::micro), "tDu"},
      {duration(time_unit::nano), "tDn"},
      {interval_months(), "tiM"},
      {interval_day_time(), "tiD"},
      {interval_month_day_nano(), "tin"},
  };
  for (const auto& [type, format] : cases) {
    EXPECT_EQ(to_format(type), format) << type.to_string();
    EXPECT_EQ(parse_format(format), type) << format;
  }
  EXPECT_EQ(to_format(list(field("item", int32()))), "+l");
  EXPECT_EQ(to_format(large_list(field("item", int32()))), "+L");
  EXPECT_EQ(to_format(list_view(field("item", int32()))), "+vl");
  EXPECT_EQ(to_format(large_list_view(field("item", int32()))), "+vL");
  EXPECT_EQ(to_format(fixed_size_list(field("item", int32()), 4)), "+w:4");
  EXPECT_EQ(to_format(struct_({})), "+s");
  EXPECT_EQ(to_format(map(utf8(), int32())), "+m");
  EXPECT_EQ(to_format(dense_union({field("a", int8()), field("b", utf8())}, {3, 9})), "+ud:3,9");
  EXPECT_EQ(to_format(sparse_union({field("a", int8())})), "+us:0");
  EXPECT_EQ(to_format(run_end_encoded(int32(), utf8())), "+r");
  EXPECT_EQ(to_format(dictionary(int16(), utf8())), "s");
  EXPECT_EQ(parse_format("+ud:").type_codes.size(), 0u);
  EXPECT_EQ(parse_format("+us:1,5,127").type_codes, (std::vector<std::int8_t>{1, 5, 127}));
}

TEST(ArrowType, ToStringNamesParameters) {
  EXPECT_EQ(list(field("item", int32())).to_string(), "list<item: int32>");
  EXPECT_EQ(timestamp(time_unit::micro, "UTC").to_string(), "timestamp[us, tz=UTC]");
  EXPECT_EQ(decimal(10, 2).to_string(), "decimal128(10, 2)");
  EXPECT_EQ(struct_({field("a", int32(), false), field("b", utf8())}).to_string(),
            "struct<a: int32 not null, b: string>");
  EXPECT_EQ(dictionary(int8(), utf8(), true).to_string(), "dictionary<values=string, indices=int8, ordered=1>");
  EXPECT_EQ(map(utf8(), int64(), true).to_string(), "map<string, int64, keys_sorted>");
}

TEST(ArrowType, FactoriesRefuseBadParameters) {
  EXPECT_THROW(decimal(0, 0), cuarrow::invalid_argument);
  EXPECT_THROW(decimal(10, 0, 32), cuarrow::invalid_argument);
  EXPECT_THROW(decimal(5, 0, 48), cuarrow::invalid_argument);
  EXPECT_THROW(time32(time_unit::nano), cuarrow::invalid_argument);
  EXPECT_THROW(time64(time_unit::second), cuarrow::invalid_argument);
  EXPECT_THROW(dense_union({field("a", int8()), field("b", int8())}, {1, 1}), cuarrow::invalid_argument);
  EXPECT_THROW(sparse_union({field("a", int8())}, {-1}), cuarrow::invalid_argument);
  EXPECT_THROW(run_end_encoded(uint32(), utf8()), cuarrow::invalid_argument);
  EXPECT_THROW(dictionary(utf8(), utf8()), cuarrow::invalid_argument);
  EXPECT_THROW(fixed_size_binary(-1), cuarrow::invalid_argument);
}

TEST(ArrowType, BadFormatStringsNameTheFormatAndThePath) {
  const std::vector<std::string> bad = {
      "",    "x",  "d:38", "d:a,2", "d:10,2,48", "d:0,0",   "w:", "w:-1", "tsx:", "tss",   "tt",
      "tDx", "ti", "+w:",  "+ud:a", "+us:1,1",   "+ud:200", "+x", "vx",   "ii",   "d:39,0"};
  for (const std::string& f : bad) {
    try {
      parse_format(f, "column \"b\"");
      ADD_FAILURE() << "accepted \"" << f << "\"";
    } catch (const invalid_format& e) {
      EXPECT_EQ(e.format(), f);
      EXPECT_EQ(e.path(), "column \"b\"");
      const std::string what = e.what();
      EXPECT_NE(what.find("\"" + f + "\""), std::string::npos) << what;
      EXPECT_NE(what.find("column \"b\""), std::string::npos) << what;
    }
  }
  // An invalid_format is an invalid_argument.
  EXPECT_THROW(parse_format("?"), cuarrow::invalid_argument);
}

TEST(ArrowType, LayoutsOfEveryKind) {
  auto roles = [](const data_type& t) {
    std::vector<buffer_role> r;
    for (const buffer_spec& s : layout_of(t).buffers) r.push_back(s.role);
    return r;
  };
  using R = buffer_role;
  EXPECT_TRUE(roles(null()).empty());
  EXPECT_EQ(roles(boolean()), (std::vector<R>{R::validity, R::bitmap}));
  EXPECT_EQ(roles(int32()), (std::vector<R>{R::validity, R::values}));
  EXPECT_EQ(layout_of(decimal(40, 0, 256)).buffers[1].byte_width, 32);
  EXPECT_EQ(layout_of(interval_month_day_nano()).buffers[1].byte_width, 16);
  EXPECT_EQ(layout_of(fixed_size_binary(7)).buffers[1].byte_width, 7);
  EXPECT_EQ(roles(utf8()), (std::vector<R>{R::validity, R::offsets, R::data}));
  EXPECT_EQ(layout_of(large_binary()).buffers[1].byte_width, 8);
  EXPECT_EQ(roles(utf8_view()), (std::vector<R>{R::validity, R::views}));
  EXPECT_TRUE(layout_of(binary_view()).variadic);
  EXPECT_EQ(roles(list(field("item", int8()))), (std::vector<R>{R::validity, R::offsets}));
  EXPECT_EQ(roles(large_list_view(field("item", int8()))),
            (std::vector<R>{R::validity, R::list_offsets, R::list_sizes}));
  EXPECT_EQ(roles(fixed_size_list(field("item", int8()), 2)), (std::vector<R>{R::validity}));
  EXPECT_EQ(roles(struct_({})), (std::vector<R>{R::validity}));
  EXPECT_EQ(roles(map(int8(), int8())), (std::vector<R>{R::validity, R::offsets}));
  EXPECT_EQ(roles(sparse_union({})), (std::vector<R>{R::type_ids}));
  EXPECT_EQ(roles(dense_union({})), (std::vector<R>{R::type_ids, R::union_offsets}));
  EXPECT_TRUE(roles(run_end_encoded(int32(), int8())).empty());
  EXPECT_EQ(layout_of(dictionary(int16(), utf8())).buffers[1].byte_width, 2);
}

// ---- ArrowSchema round trips ------------------------------------------------------------------

field round_trip(const field& f) {
  owned_schema c;
  export_field(f, c.get());
  EXPECT_FALSE(c.is_released());
  field back = read_field(*c.get());
  return back;
}

TEST(ArrowSchemaExport, EveryTypeRoundTrips) {
  for (const data_type& t : sample_types()) {
    field f("col", t, true, {{"k", "v"}});
    EXPECT_EQ(round_trip(f), f) << t.to_string();
    field g("", t, false);
    EXPECT_EQ(round_trip(g), g) << t.to_string();
  }
}

TEST(ArrowSchemaExport, RandomTypesRoundTrip) {
  random_arrays gen(20240601);
  for (int i = 0; i < 300; ++i) {
    field f = gen.field("f", 4);
    EXPECT_EQ(round_trip(f), f) << f.type.to_string();
  }
}

TEST(ArrowSchemaExport, FlagsAndMetadataAreTheSpecs) {
  owned_schema c;
  field f("m", map(utf8(), int32(), true), false,
          {{"ARROW:extension:name", "my.ext"}, {"ARROW:extension:metadata", "x"}});
  export_field(f, c.get());
  EXPECT_STREQ(c->format, "+m");
  EXPECT_STREQ(c->name, "m");
  EXPECT_EQ(c->flags, ARROW_FLAG_MAP_KEYS_SORTED);
  ASSERT_NE(c->metadata, nullptr);
  std::int32_t n;
  std::memcpy(&n, c->metadata, 4);
  EXPECT_EQ(n, 2);
  std::int32_t kl;
  std::memcpy(&kl, c->metadata + 4, 4);
  EXPECT_EQ(std::string(c->metadata + 8, static_cast<std::size_t>(kl)), "ARROW:extension:name");
  ASSERT_EQ(c->n_children, 1);
  EXPECT_STREQ(c->children[0]->format, "+s");
  EXPECT_EQ(c->children[0]->flags, 0);               // entries: not nullable
  EXPECT_EQ(c->children[0]->children[0]->flags, 0);  // key: not nullable
  EXPECT_EQ(c->children[0]->children[1]->flags, ARROW_FLAG_NULLABLE);
  EXPECT_EQ(read_field(*c.get()).extension_name(), "my.ext");

  owned_schema d;
  export_field(field("d", dictionary(int32(), utf8(), true)), d.get());
  EXPECT_STREQ(d->format, "i");
  EXPECT_EQ(d->flags, ARROW_FLAG_NULLABLE | ARROW_FLAG_DICTIONARY_ORDERED);
  ASSERT_NE(d->dictionary, nullptr);
  EXPECT_STREQ(d->dictionary->format, "u");
  EXPECT_EQ(d->metadata, nullptr);  // absent metadata is NULL, not empty
}

TEST(ArrowSchemaExport, SchemaRoundTripsWithMetadata) {
  schema s;
  s.fields = {field("a", int32(), false), field("b", list(field("item", utf8())))};
  s.metadata = {{"origin", "test"}};
  owned_schema c;
  export_schema(s, c.get());
  EXPECT_STREQ(c->format, "+s");
  EXPECT_EQ(read_schema(*c.get()), s);
  EXPECT_EQ(import_schema(c.get()), s);
  EXPECT_TRUE(c.is_released());  // import consumed it
}

TEST(ArrowSchemaExport, ChildrenCanBeMovedOutBeforeTheParentIsReleased) {
  owned_schema c;
  export_field(field("s", struct_({field("a", int32()), field("b", utf8())})), c.get());
  // Move child 1 out (bitwise copy, mark released), release the parent.
  ArrowSchema moved = *c->children[1];
  c->children[1]->release = nullptr;
  c.reset();
  owned_schema keep;
  *keep.get() = moved;
  EXPECT_EQ(read_field(*keep.get()), field("b", utf8()));
}

TEST(ArrowSchemaImport, ReleasedAndMalformedSchemasAreRefused) {
  owned_schema released;
  EXPECT_THROW(import_field(released.get()), invalid_data);
  try {
    read_field(*released.get());
    FAIL();
  } catch (const invalid_data& e) {
    EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
  }

  // A list schema without its child.
  owned_schema c;
  export_field(field("l", list(field("item", int32()))), c.get());
  c->n_children = 0;
  try {
    read_field(*c.get());
    FAIL();
  } catch (const invalid_data& e) {
    EXPECT_NE(std::string(e.what()).find("field \"l\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected 1"), std::string::npos) << e.what();
  }
  c->n_children = 1;

  // A union whose format declares more type codes than children.
  owned_schema u;
  export_field(field("u", dense_union({field("a", int8()), field("b", utf8())}, {0, 1})), u.get());
  u->n_children = 1;
  EXPECT_THROW(read_field(*u.get()), invalid_data);
  u->n_children = 2;

  // A bad format deep inside: the message names the path.
  schema s;
  s.fields = {field("b", list(field("item", struct_({field("x", int32())}))))};
  owned_schema top;
  export_schema(s, top.get());
  top->children[0]->children[0]->children[0]->format = "d:38";
  try {
    read_schema(*top.get());
    FAIL();
  } catch (const invalid_format& e) {
    EXPECT_EQ(e.format(), "d:38");
    EXPECT_EQ(e.path(), "column \"b\" \u2192 child 0 (\"item\") \u2192 child 0 (\"x\")");
  }
  top->children[0]->children[0]->children[0]->format = "i";  // let release free the real string

  // A dictionary whose index format is not an integer.
  owned_schema d;
  export_field(field("d", dictionary(int32(), utf8())), d.get());
  d->format = "g";
  EXPECT_THROW(read_field(*d.get()), invalid_format);
  d->format = "i";

  // Import consumes even what it refuses.
  owned_schema bad;
  export_field(field("x", list(field("item", int32()))), bad.get());
  bad->n_children = 0;
  EXPECT_THROW(import_field(bad.get()), invalid_data);
  EXPECT_TRUE(bad.is_released());
}

// An ArrowSchema::metadata blob built by hand: counts and lengths may lie.
struct metadata_blob {
  std::string bytes;
  metadata_blob& i32(std::int32_t v) {
    char b[4];
    std::memcpy(b, &v, 4);
    bytes.append(b, 4);
    return *this;
  }
  metadata_blob& raw(const std::string& b) {
    bytes += b;
    return *this;
  }
  metadata_blob& pair(const std::string& k, const std::string& v) {
    i32(static_cast<std::int32_t>(k.size())).bytes += k;
    i32(static_cast<std::int32_t>(v.size())).bytes += v;
    return *this;
  }
};

// The reason read_field gives for refusing field "m" carrying `blob`, or ""
// when it accepts it.  Every blob used here ends where the decoder stops, so
// nothing is read past its end (the tests run under AddressSanitizer).
std::string metadata_refusal(const metadata_blob& blob) {
  owned_schema c;
  export_field(field("m", int32()), c.get());
  c->metadata = blob.bytes.data();
  std::string reason;
  try {
    read_field(*c.get());
  } catch (const invalid_data& e) {
    EXPECT_EQ(e.path(), "field \"m\"");
    reason = e.reason();
  }
  c->metadata = nullptr;
  return reason;
}

TEST(ArrowSchemaImport, NegativeMetadataCountsAndLengthsAreRefused) {
  EXPECT_EQ(metadata_refusal(metadata_blob().i32(-1)), "metadata pair count is negative (-1) at byte 0");
  EXPECT_EQ(metadata_refusal(metadata_blob().i32(std::numeric_limits<std::int32_t>::min())),
            "metadata pair count is negative (-2147483648) at byte 0");
  // Pair 0 is "k" = "v" (bytes 4..13); pair 1's key length sits at byte 14.
  EXPECT_EQ(metadata_refusal(metadata_blob().i32(2).pair("k", "v").i32(-3)),
            "metadata key length of pair 1 is negative (-3) at byte 14");
  EXPECT_EQ(metadata_refusal(metadata_blob().i32(1).i32(1).raw("k").i32(-1)),
            "metadata value length of pair 0 is negative (-1) at byte 9");
}

TEST(ArrowSchemaImport, MetadataClaimsAreBoundedBeforeAnythingIsRead) {
  // A blob claiming 2^31 - 1 pairs (or a key or value of 2 GiB) used to be
  // read for as long as its claims held, far past its end: claims beyond
  // the bounds are refused after reading only the claim itself.
  const auto huge = std::numeric_limits<std::int32_t>::max();
  EXPECT_EQ(metadata_refusal(metadata_blob().i32(huge)),
            "metadata pair count 2147483647 at byte 0 is more than the 65536 accepted");
  EXPECT_EQ(metadata_refusal(metadata_blob().i32(max_metadata_pairs + 1)),
            "metadata pair count 65537 at byte 0 is more than the 65536 accepted");
  EXPECT_EQ(metadata_refusal(metadata_blob().i32(1).i32(huge)),
            "metadata key length of pair 0 2147483647 at byte 4 is more than the 67108864 accepted");
  EXPECT_EQ(metadata_refusal(metadata_blob().i32(1).pair("k", "").i32(0).i32(0)), "");
  EXPECT_EQ(metadata_refusal(metadata_blob().i32(1).i32(1).raw("k").i32(max_metadata_length + 1)),
            "metadata value length of pair 0 67108865 at byte 9 is more than the 67108864 accepted");
  // Each length within its bound, but the blob as a whole would not be.
  EXPECT_EQ(metadata_refusal(metadata_blob().i32(1).i32(max_metadata_length)),
            "metadata key of pair 0 at byte 8 (67108864 bytes) would end past the largest metadata accepted "
            "(67108864 bytes)");

  // The largest count accepted is still not allocated up front: one real
  // pair, then a negative length stops the decoder inside the blob.
  EXPECT_EQ(metadata_refusal(metadata_blob().i32(max_metadata_pairs).pair("key", "value").i32(-1)),
            "metadata key length of pair 1 is negative (-1) at byte 20");
  EXPECT_EQ(metadata_refusal(metadata_blob().i32(max_metadata_pairs).pair("key", "value").i32(0).i32(-7)),
            "metadata value length of pair 1 is negative (-7) at byte 24");

  // Schema-level metadata goes through the same checks, and import still
  // releases what it refuses.
  schema s;
  s.fields = {field("a", int32())};
  owned_schema c;
  export_schema(s, c.get());
  const metadata_blob bad = metadata_blob().i32(huge).i32(-2);
  c->metadata = bad.bytes.data();
  try {
    import_schema(c.get());
    FAIL();
  } catch (const invalid_data& e) {
    EXPECT_EQ(e.path(), "schema");
    EXPECT_EQ(e.reason(), "metadata pair count 2147483647 at byte 0 is more than the 65536 accepted");
  }
  EXPECT_TRUE(c.is_released());
}

TEST(ArrowSchemaImport, WellFormedMetadataBlobsAreRead) {
  // Empty keys and values, embedded NUL bytes and a zero count are all valid.
  const std::string nul("a\0b", 3);
  const key_value_metadata md = {{"k", "v"}, {"", "empty key"}, {"empty value", ""}, {nul, nul}};
  metadata_blob blob;
  blob.i32(4);
  for (const auto& [k, v] : md) blob.pair(k, v);

  owned_schema c;
  export_field(field("m", int32(), true, md), c.get());
  ASSERT_NE(c->metadata, nullptr);
  EXPECT_EQ(std::string(c->metadata, blob.bytes.size()), blob.bytes);  // export writes the same bytes
  EXPECT_EQ(read_field(*c.get()).metadata, md);

  const char* exported = c->metadata;
  c->metadata = blob.bytes.data();
  EXPECT_EQ(read_field(*c.get()).metadata, md);
  const metadata_blob none = metadata_blob().i32(0);
  c->metadata = none.bytes.data();
  EXPECT_TRUE(read_field(*c.get()).metadata.empty());
  c->metadata = exported;
  EXPECT_EQ(import_field(c.get()), field("m", int32(), true, md));
}

TEST(ArrowSchemaImport, RecordBatchSchemaMustBeAStruct) {
  owned_schema c;
  export_type(int32(), c.get());
  EXPECT_THROW(read_schema(*c.get()), invalid_format);
}

}  // namespace
}  // namespace cuarrow_arrow_test
