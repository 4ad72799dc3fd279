// The FlatBuffers builder's layout rules (FlatBufferBuilder's, which the
// golden tests compare against pyarrow's bytes as a whole) and the reader's
// checks on a buffer of known shape.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuarrow/ipc/format.hpp"
#include "ipc_format/flatbuffer.hpp"

namespace fb = cuarrow::ipc::fb;
using offset = fb::builder::offset;

namespace {

std::uint32_t u32(const std::vector<std::byte>& b, std::size_t at) {
  std::uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}

}  // namespace

TEST(FlatBuffer, FieldsEqualToTheirDefaultAreOmitted) {
  fb::builder b;
  b.start_table();
  b.add_scalar<std::int32_t>(0, 7, 0);
  b.add_scalar<std::int32_t>(1, 5, 5);  // the default: not written
  const auto bytes = b.finish(b.end_table());
  fb::reader r(bytes);
  const fb::table t = r.root("T");
  EXPECT_TRUE(t.has(0));
  EXPECT_FALSE(t.has(1));
  EXPECT_EQ(t.scalar<std::int32_t>(0, "a", 0), 7);
  EXPECT_EQ(t.scalar<std::int32_t>(1, "b", 5), 5);
  EXPECT_EQ(t.scalar<std::int32_t>(9, "beyond the vtable", -1), -1);
}

TEST(FlatBuffer, IdenticalVtablesAreShared) {
  // Two tables of two int32 fields: same fields, same inline size (a
  // table's size counts the padding before it, so tables of one shape but
  // other padding keep their own vtables, as in FlatBufferBuilder).
  fb::builder b;
  std::vector<offset> tables;
  for (std::int32_t v : {1, 2}) {
    b.start_table();
    b.add_scalar<std::int32_t>(0, v, 0);
    b.add_scalar<std::int32_t>(1, -v, 0);
    tables.push_back(b.end_table());
  }
  const offset vec = b.create_offset_vector(tables);
  b.start_table();
  b.add_offset(0, vec);
  const auto bytes = b.finish(b.end_table());
  fb::reader r(bytes);
  const auto v = r.root("Root").vec(0, "items", 4, 4);
  ASSERT_TRUE(v);
  ASSERT_EQ(v->size(), 2u);
  std::int64_t vtables[2];
  for (std::uint32_t i = 0; i < 2; ++i) {
    const fb::table t = v->table_at(i);
    EXPECT_EQ(t.scalar<std::int32_t>(0, "a", 0), static_cast<std::int32_t>(i + 1));
    EXPECT_EQ(t.scalar<std::int32_t>(1, "b", 0), -static_cast<std::int32_t>(i + 1));
    const std::uint64_t elem = v->element(i);
    const std::uint64_t table_pos = elem + u32(bytes, elem);
    std::int32_t s;
    std::memcpy(&s, bytes.data() + table_pos, 4);
    vtables[i] = static_cast<std::int64_t>(table_pos) - s;
  }
  EXPECT_EQ(vtables[0], vtables[1]);
}

TEST(FlatBuffer, TheBufferIsAlignedToItsLargestScalar) {
  fb::builder b;
  const offset s = b.create_string("x");  // 6 bytes: the int64 after it needs padding
  b.start_table();
  b.add_scalar<std::int64_t>(0, 42, 0);
  b.add_offset(1, s);
  const auto bytes = b.finish(b.end_table());
  EXPECT_EQ(bytes.size() % 8, 0u);
  const std::uint64_t table_pos = u32(bytes, 0);
  std::int32_t so;
  std::memcpy(&so, bytes.data() + table_pos, 4);
  std::uint16_t field_off;
  std::memcpy(&field_off, bytes.data() + table_pos - static_cast<std::uint64_t>(so) + 4, 2);
  EXPECT_EQ((table_pos + field_off) % 8, 0u);
  fb::reader r(bytes);
  EXPECT_EQ(r.root("T").scalar<std::int64_t>(0, "v", 0), 42);
}

TEST(FlatBuffer, StringsAndScalarVectors) {
  fb::builder b;
  const offset s = b.create_string("hello");
  const std::int16_t values[] = {1, -2, 3};
  const offset v = b.create_scalar_vector(values, 3, 2);
  b.start_table();
  b.add_offset(1, v);
  b.add_offset(0, s);
  const auto bytes = b.finish(b.end_table());
  fb::reader r(bytes);
  const fb::table t = r.root("T");
  EXPECT_EQ(t.string(0, "s"), "hello");
  const auto vec = t.vec(1, "v", 2, 2);
  ASSERT_TRUE(vec);
  ASSERT_EQ(vec->size(), 3u);
  EXPECT_EQ(vec->scalar<std::int16_t>(1), -2);
  EXPECT_EQ(vec->element_path(2), "T.v[2]");
  EXPECT_FALSE(t.string(5, "absent"));
}

TEST(FlatBuffer, TheBlockGrowsWithoutChangingTheBytes) {
  // The same buffer built in a block of 64 bytes (grown many times, a
  // string longer than the block among them) and in one large enough:
  // byte for byte the same, vtables shared across growths.
  auto build = [](std::size_t initial) {
    fb::builder b(initial);
    std::vector<offset> items;
    for (int i = 0; i < 40; ++i) {
      const offset name = b.create_string(std::string(static_cast<std::size_t>(i % 7) * 30, 'a' + (i % 26)));
      const std::int64_t words[] = {i, -i, 2 * i};
      const offset v = b.create_scalar_vector(words, 3, 8);
      b.start_table();
      b.add_offset(2, v);
      b.add_offset(1, name);
      b.add_scalar<std::int16_t>(0, static_cast<std::int16_t>(i % 3), 0);
      items.push_back(b.end_table());
    }
    const offset vec = b.create_offset_vector(items);
    b.start_table();
    b.add_offset(0, vec);
    return b.finish(b.end_table());
  };
  const auto small = build(64);
  const auto large = build(1 << 16);
  EXPECT_EQ(small, large);
  fb::reader r(small);
  const auto v = r.root("Root").vec(0, "items", 4, 4);
  ASSERT_TRUE(v);
  ASSERT_EQ(v->size(), 40u);
  EXPECT_EQ(v->table_at(39).string(1, "name"), std::string(4 * 30, 'a' + 13));
  EXPECT_EQ(v->table_at(39).vec(2, "v", 8, 8)->scalar<std::int64_t>(2), 78);
}

TEST(FlatBuffer, MisalignedScalarsAreRefused) {
  // A table whose int32 field the vtable places at an odd position.
  fb::builder b;
  b.start_table();
  b.add_scalar<std::int32_t>(0, 1, 0);
  auto bytes = b.finish(b.end_table());
  fb::reader ok(bytes);
  const std::uint64_t table_pos = u32(bytes, 0);
  std::int32_t s;
  std::memcpy(&s, bytes.data() + table_pos, 4);
  const std::uint64_t vt = table_pos - static_cast<std::uint64_t>(s);
  std::uint16_t field_off;
  std::memcpy(&field_off, bytes.data() + vt + 4, 2);
  field_off = static_cast<std::uint16_t>(field_off - 1);
  std::memcpy(bytes.data() + vt + 4, &field_off, 2);
  fb::reader r(bytes);
  try {
    r.root("T").scalar<std::int32_t>(0, "x", 0);
    FAIL() << "accepted";
  } catch (const cuarrow::ipc::invalid_message& e) {
    EXPECT_EQ(e.where(), "T.x");
    EXPECT_EQ(e.reason(), "scalar at byte " + std::to_string(table_pos + field_off) + " is not aligned to 4 bytes");
  }
}
