// Arrow IPC record batch bodies (include/cuarrow/ipc/record_batch.hpp):
// write-then-read round trips over every type, sliced, nested, with
// dictionaries; the layout Arrow C++'s writer makes; bodies in host and
// device memory; adversarial headers, each check with its message.
#include <gtest/gtest.h>

#include <cuarrow/ipc/record_batch.hpp>

#include <cstring>
#include <limits>

#include "../fault_api.hpp"
#include "arrow/arrow_test_util.hpp"

namespace cuarrow_arrow_test {
namespace {

using namespace cuarrow::arrow;  // NOLINT
namespace ipc = cuarrow::ipc;

// ---- helpers -------------------------------------------------------------------------

// The dictionary fields of `t` at `path` and below, depth first, each given
// the next id, with its dictionary from `a` (when given).
void collect_dictionaries(const data_type& t, const array_data* a, std::vector<int>& path, std::int64_t& next,
                          ipc::schema_message& sm, std::vector<std::pair<std::int64_t, array_data>>& dicts) {
  if (t.id == type_id::dictionary) {
    const std::int64_t id = next++;
    sm.dictionaries.push_back({id, path});
    if (a && a->dictionary) dicts.emplace_back(id, *a->dictionary);
    // Dictionaries nested in the values.
    const data_type& v = *t.value_type;
    for (std::size_t i = 0; i < v.children.size(); ++i) {
      path.push_back(static_cast<int>(i));
      const array_data* c =
          a && a->dictionary && i < a->dictionary->children.size() ? &a->dictionary->children[i] : nullptr;
      collect_dictionaries(v.children[i].type, c, path, next, sm, dicts);
      path.pop_back();
    }
    return;
  }
  for (std::size_t i = 0; i < t.children.size(); ++i) {
    path.push_back(static_cast<int>(i));
    const array_data* c = a && i < a->children.size() ? &a->children[i] : nullptr;
    collect_dictionaries(t.children[i].type, c, path, next, sm, dicts);
    path.pop_back();
  }
}

struct with_dictionaries {
  ipc::schema_message schema;
  ipc::dictionary_memo memo;
};

// The schema message of `batch` (dictionary ids depth first) and a memo
// holding the batch's dictionaries.  A dictionary nested in another's values
// is taken from the first array that holds one.
with_dictionaries dictionaries_of(const record_batch& batch) {
  with_dictionaries out;
  out.schema.schema = batch.schema;
  std::vector<std::pair<std::int64_t, array_data>> dicts;
  std::int64_t next = 0;
  for (std::size_t i = 0; i < batch.columns.size(); ++i) {
    std::vector<int> path{static_cast<int>(i)};
    collect_dictionaries(batch.schema.fields[i].type, &batch.columns[i], path, next, out.schema, dicts);
  }
  out.memo = ipc::dictionary_memo(out.schema);
  for (auto& [id, d] : dicts) {
    if (!out.memo.get(id)) out.memo.set(id, d);
  }
  return out;
}

record_batch one_column(const std::string& name, const array_data& a) {
  record_batch b;
  b.schema.fields.emplace_back(name, a.type);
  b.num_rows = a.length;
  b.columns = {a};
  return b;
}

// `b` copied into ordinary host memory.
cuarrow::buffer host_copy(const cuarrow::buffer& b) {
  cuarrow::buffer h = cuarrow::allocate_host(b.size());
  if (b.size() > 0) cuarrow::copy_to_host(h.mutable_host_data(), b, 0, b.size());
  return h;
}

// Writes `batch` into a device body and reads it back from there, or from a
// host copy (for a batch in host memory: its dictionaries are there too).
record_batch round_trip(const record_batch& batch, bool host_body = false) {
  cuarrow::context ctx = cuarrow::context::get(0);
  with_dictionaries d = dictionaries_of(batch);
  ipc::body_layout layout = ipc::layout_body(batch);
  cuarrow::buffer body = ipc::write_body(layout, ctx);
  if (host_body) body = host_copy(body);
  return ipc::read_record_batch(layout.header, d.schema, body, d.memo);
}

bool within(const cuarrow::buffer& b, const cuarrow::buffer& body) {
  return b.size() == 0 || (b.address() >= body.address() && b.address() + b.size() <= body.address() + body.size());
}

// Every buffer of `a` (not its dictionary) lies in `body`.
bool all_within(const array_data& a, const cuarrow::buffer& body) {
  for (const auto& b : a.buffers) {
    if (!within(b, body)) return false;
  }
  for (const auto& c : a.children) {
    if (!all_within(c, body)) return false;
  }
  return true;
}

// Variants of `a`: itself, sliced at odd offsets, empty.
std::vector<std::pair<std::string, array_data>> variants(const array_data& a) {
  std::vector<std::pair<std::string, array_data>> v{{"whole", a}};
  if (a.length >= 2) v.emplace_back("slice(1, n-1)", a.slice(1, a.length - 1));
  if (a.length >= 5) v.emplace_back("slice(3, n-4)", a.slice(3, a.length - 4));
  if (a.length >= 9) v.emplace_back("slice(8, n-8)", a.slice(8, a.length - 8));
  if (a.length >= 3) v.emplace_back("slice(n-1, 1)", a.slice(a.length - 1, 1));
  v.emplace_back("slice(n/2, 0)", a.slice(a.length / 2, 0));
  return v;
}

std::vector<std::uint8_t> bytes_of(const cuarrow::buffer& b) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(b.size()));
  if (!v.empty()) cuarrow::copy_to_host(v.data(), b, 0, b.size());
  return v;
}

// ---- round trips ----------------------------------------------------------------------

TEST(IpcBody, EverySampleRoundTripsThroughADeviceBody) {
  cuarrow::context ctx = cuarrow::context::get(0);
  int checked = 0;
  for (auto& [name, a] : sample_arrays()) {
    for (auto& [how, x] : variants(a)) {
      SCOPED_TRACE(name + " " + how);
      for (bool on_device : {false, true}) {
        const record_batch batch = one_column(name, on_device ? to_device(x, ctx) : x);
        // Every slice is written, what Arrow computes computed on the host.
        const ipc::body_layout layout = ipc::layout_body(batch);
        EXPECT_EQ(layout.body_length % 8, 0);
        with_dictionaries d = dictionaries_of(batch);
        // A host batch (and its dictionaries) is read from a host copy of the body.
        cuarrow::buffer body = ipc::write_body(layout, ctx);
        if (!on_device) body = host_copy(body);
        record_batch back = ipc::read_record_batch(layout.header, d.schema, body, d.memo);
        EXPECT_TRUE(all_within(back.columns[0], body));
        const placement p = placement_of(back.columns[0]);
        if (on_device) {
          EXPECT_TRUE(p.type == cuarrow::device_type::cuda || p.device_id == -1);  // -1: no buffer at all
        } else {
          EXPECT_TRUE(cuarrow::is_host_accessible(p.type));
        }
        EXPECT_TRUE(same_values(one_column(name, x), to_host(back)));
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 500);
}

TEST(IpcBody, AHostBodyReadsAsHostArrays) {
  for (auto& [name, a] : sample_arrays()) {
    SCOPED_TRACE(name);
    const record_batch batch = one_column(name, a);
    record_batch back = round_trip(batch, /*host_body=*/true);
    EXPECT_TRUE(cuarrow::is_host_accessible(placement_of(back.columns[0]).type));
    EXPECT_TRUE(same_values(batch, back));
    EXPECT_NO_THROW(validate(back, {validation_level::full}));
  }
}

TEST(IpcBody, RandomNestedBatchesRoundTrip) {
  cuarrow::context ctx = cuarrow::context::get(0);
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    random_arrays r(seed);
    record_batch host = r.batch(static_cast<int>(r.uniform(1, 4)), r.uniform(0, 40), 3);
    record_batch batch = seed % 2 ? to_device(host, ctx) : host;
    record_batch back = round_trip(batch, /*host_body=*/seed % 2 == 0);
    EXPECT_TRUE(same_values(host, to_host(back)));
  }
}

TEST(IpcBody, FullValidationOnRequest) {
  // Offsets that cheap validation accepts (first and last in range) but
  // that decrease in the middle: only full validation reads them.
  array_data s = strings(utf8(), {"ab", "cd", "ef"});
  const record_batch batch = one_column("s", s);
  ipc::body_layout layout = ipc::layout_body(batch);
  std::vector<std::uint8_t> bytes = bytes_of(ipc::write_body(layout, cuarrow::context::get(0)));
  const std::int32_t bad = 5;  // offsets {0, 5, 4, 6}
  std::memcpy(bytes.data() + layout.header.buffers[1].offset + 4, &bad, 4);
  cuarrow::buffer body =
      cuarrow::copy_to_device(cuarrow::context::get(0), bytes.data(), static_cast<std::int64_t>(bytes.size()));
  with_dictionaries d = dictionaries_of(batch);
  EXPECT_NO_THROW(ipc::read_record_batch(layout.header, d.schema, body, d.memo));
  ipc::read_options full;
  full.validation = validation_level::full;
  const std::string m = message_of([&] { ipc::read_record_batch(layout.header, d.schema, body, d.memo, full); });
  EXPECT_NE(m.find("column \"s\""), std::string::npos) << m;
  EXPECT_NE(m.find("offset"), std::string::npos) << m;
}

// ---- the layout Arrow's writer makes ----------------------------------------------------------

TEST(IpcBodyLayout, BuffersArePaddedToEightBytesAndTheValidityOmittedWithoutNulls) {
  array_data with_nulls = primitive<std::int32_t>(int32(), {1, std::nullopt, 3});
  array_data no_nulls = primitive<std::int32_t>(int32(), {1, 2, 3});
  record_batch b;
  b.schema.fields = {field("a", int32()), field("b", int32())};
  b.num_rows = 3;
  b.columns = {with_nulls, no_nulls};
  ipc::body_layout l = ipc::layout_body(b);
  EXPECT_EQ(l.header.length, 3);
  ASSERT_EQ(l.header.nodes.size(), 2u);
  EXPECT_EQ(l.header.nodes[0], (ipc::field_node{3, 1}));
  EXPECT_EQ(l.header.nodes[1], (ipc::field_node{3, 0}));
  // validity 1 byte at 0, values 12 bytes at 8, validity 0 bytes at 24, values at 24.
  const std::vector<ipc::body_range> want{{0, 1}, {8, 12}, {24, 0}, {24, 12}};
  EXPECT_EQ(l.header.buffers, want);
  EXPECT_EQ(l.body_length, 40);
  EXPECT_TRUE(l.header.variadic_buffer_counts.empty());
  EXPECT_FALSE(l.header.compression);
}

void known_null_counts(array_data& a) {
  a.null_count = compute_null_count(a);
  for (array_data& c : a.children) known_null_counts(c);
}

// Many batches laid out together (what a writer of a table does): the same
// bodies as one by one, and their offsets in device memory read in one round
// per level of nesting for all of them, not one round per batch.
TEST(IpcBodyLayout, ManyBatchesAreLaidOutTogether) {
  cuarrow::context ctx = cuarrow::context::get(0);
  random_arrays r(20261204);
  record_batch proto;
  proto.schema.fields = {field("s", utf8()), field("l", list(field("item", utf8()))), field("i", int32())};
  auto make = [&](bool sliced) {
    std::vector<record_batch> out;
    for (int i = 0; i < 40; ++i) {
      record_batch host;
      host.schema = proto.schema;
      host.num_rows = r.uniform(1, 50);
      for (const auto& f : proto.schema.fields) {
        host.columns.push_back(r.array(f.type, host.num_rows + 3).slice(sliced && i % 2 ? 3 : 0, host.num_rows));
        // Unsliced: null counts known, as a table moved from pyarrow has
        // them; sliced: unknown, counted from the device bitmaps.
        if (!sliced) known_null_counts(host.columns.back());
      }
      out.push_back(to_device(host, ctx));
    }
    return out;
  };
  const cuarrow_test::fault_api& f = cuarrow_test::faults();
  auto syncs = [&] { return f.calls("cuStreamSynchronize") + f.calls("cuCtxSynchronize"); };
  for (bool sliced : {false, true}) {
    SCOPED_TRACE(sliced ? "half of them sliced" : "unsliced");
    const std::vector<record_batch> batches = make(sliced);
    ctx.synchronize();
    if (f.available()) f.reset_calls();
    const std::vector<ipc::body_layout> together = ipc::layout_bodies(batches);
    const std::size_t rounds_together = f.available() ? syncs() : 0;
    ASSERT_EQ(together.size(), batches.size());
    if (f.available()) f.reset_calls();
    std::vector<ipc::body_layout> each;
    for (const record_batch& b : batches) each.push_back(ipc::layout_body(b));
    const std::size_t rounds_each = f.available() ? syncs() : 0;
    for (std::size_t i = 0; i < batches.size(); ++i) {
      EXPECT_EQ(together[i].body_length, each[i].body_length) << i;
      ASSERT_EQ(together[i].header.nodes.size(), each[i].header.nodes.size()) << i;
      for (std::size_t n = 0; n < each[i].header.nodes.size(); ++n) {
        EXPECT_EQ(together[i].header.nodes[n].length, each[i].header.nodes[n].length) << i << " node " << n;
        EXPECT_EQ(together[i].header.nodes[n].null_count, each[i].header.nodes[n].null_count) << i << " node " << n;
      }
      EXPECT_EQ(bytes_of(ipc::write_body(together[i], ctx)), bytes_of(ipc::write_body(each[i], ctx))) << i;
    }
    if (f.available()) {
      // One by one, each batch makes at least one round of offset reads;
      // together, two rounds in all (the list's offsets, then its strings'),
      // and one read for every computed buffer of every batch (offsets not
      // starting at 0 rebased, bitmaps shifted) and one of the null counts.
      EXPECT_GE(rounds_each, rounds_together + batches.size() - 2)
          << "one by one " << rounds_each << ", together " << rounds_together;
    }
  }
  EXPECT_TRUE(ipc::layout_bodies({}).empty());
}

// A table sliced off its start (every column's offsets rebased, every
// bitmap shifted, null counts unknown; list views, dense unions and run
// ends rebased as Arrow's writer does): what the writer reads to compute
// them is read for all batches in batched rounds, so the synchronizations
// do not grow with the number of batches (one each made thousands for a
// sliced table), and the bodies equal those of the same slices in host
// memory.
TEST(IpcBodyLayout, ComputedBuffersOfManySlicedBatchesAreReadTogether) {
  const cuarrow_test::fault_api& f = cuarrow_test::faults();
  if (!f.available()) GTEST_SKIP() << "counts driver calls: needs the host emulation's call counters";
  cuarrow::context ctx = cuarrow::context::get(0);
  random_arrays r(20261205);
  auto syncs = [&] { return f.calls("cuStreamSynchronize") + f.calls("cuCtxSynchronize"); };
  std::vector<std::size_t> rounds;
  for (int n : {10, 60}) {
    SCOPED_TRACE(std::to_string(n) + " batches");
    std::vector<record_batch> host, device;
    for (int i = 0; i < n; ++i) {
      record_batch b;
      b.schema.fields = {field("s", utf8()),
                         field("i", int32()),
                         field("b", binary()),
                         field("lv", list_view(field("item", int32()))),
                         field("du", dense_union({field("x", int32()), field("y", utf8())}, {0, 5})),
                         field("ree", run_end_encoded(int32(), utf8()))};
      const std::int64_t rows = r.uniform(1, 40);
      b.num_rows = rows + 5;
      for (const auto& fl : b.schema.fields) b.columns.push_back(r.array(fl.type, b.num_rows));
      // Sliced where they live, the host's of the device's buffers (to_device
      // copies a string array's values up to its last offset only, and
      // Arrow's truncation rules depend on a buffer's size).
      const record_batch on_device = to_device(b, ctx);
      host.push_back(to_host(on_device).slice(3, rows));
      device.push_back(on_device.slice(3, rows));
    }
    ctx.synchronize();
    f.reset_calls();
    const std::vector<ipc::body_layout> laid = ipc::layout_bodies(device);
    rounds.push_back(syncs());
    const std::vector<ipc::body_layout> expected = ipc::layout_bodies(host);
    ASSERT_EQ(laid.size(), expected.size());
    for (std::size_t i = 0; i < laid.size(); ++i) {
      EXPECT_EQ(bytes_of(ipc::write_body(laid[i], ctx)), bytes_of(ipc::write_body(expected[i], ctx))) << i;
    }
  }
  // A round of offsets, null counts and ranges per level of nesting (a
  // slice's offsets and run ends read whole in its level's round): 3
  // whatever the number of batches (605 for the 60 batches when each range
  // and computed buffer was a copy of its own).
  EXPECT_EQ(rounds[0], rounds[1]);
  EXPECT_LE(rounds[1], 3u);
}

TEST(IpcBodyLayout, ThePaddingIsZero) {
  cuarrow::context ctx = cuarrow::context::get(0);
  array_data a = to_device(strings(utf8(), {"abc", std::nullopt, "de"}), ctx);
  // Fill the pool with non-zero bytes first, so that padding left unwritten shows.
  { cuarrow::fill_async(cuarrow::allocate_device(ctx, 4096), 0, 4096, 0xAB, {}); }
  ipc::body_layout l = ipc::layout_body(one_column("s", a));
  std::vector<std::uint8_t> bytes = bytes_of(ipc::write_body(l, ctx));
  std::vector<bool> covered(bytes.size(), false);
  for (const auto& r : l.header.buffers) {
    for (std::int64_t i = r.offset; i < r.offset + r.length; ++i) covered[static_cast<std::size_t>(i)] = true;
  }
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (!covered[i]) {
      EXPECT_EQ(bytes[i], 0) << "byte " << i;
    }
  }
}

TEST(IpcBodyLayout, SlicesAreTruncatedAsArrowTruncatesThem) {
  cuarrow::context ctx = cuarrow::context::get(0);
  for (bool on_device : {false, true}) {
    SCOPED_TRACE(on_device ? "device" : "host");
    // int64 values 0..19 sliced at 3: values from byte 24, 8-byte padded, as
    // many bytes as the buffer has after the slice's start, at most.
    std::vector<std::optional<std::int64_t>> v;
    for (int i = 0; i < 20; ++i) v.push_back(i % 7 == 0 ? std::nullopt : std::optional<std::int64_t>(i));
    array_data ints = primitive<std::int64_t>(int64(), v);
    if (on_device) ints = to_device(ints, ctx);
    ipc::body_layout l = ipc::layout_body(one_column("x", ints.slice(8, 5)));
    // 8..12 has no nulls: a 0-length validity buffer.
    EXPECT_EQ(l.header.nodes[0], (ipc::field_node{5, 0}));
    EXPECT_EQ(l.header.buffers[0].length, 0);
    EXPECT_EQ(l.header.buffers[1].length, 40);
    EXPECT_EQ(l.pieces[0].source_offset, 64);
    // The bitmap at bit 6: computed, shifted to bit 0.
    ipc::body_layout l2 = ipc::layout_body(one_column("x", ints.slice(6, 10)));
    EXPECT_EQ(l2.header.nodes[0], (ipc::field_node{10, 2}));  // 7 and 14
    EXPECT_EQ(l2.header.buffers[0].length, 2);
    EXPECT_EQ(l2.header.buffers[1].length, 80);
    ASSERT_EQ(l2.pieces.size(), 2u);
    EXPECT_TRUE(l2.pieces[0].source.is_cpu());  // computed on the host
    std::vector<std::uint8_t> bits = bytes_of(l2.pieces[0].source);
    // Values 6..15: nulls at 7 and 14 -> bits 1 and 8 clear.
    EXPECT_EQ(bits[0], 0xFD);
    EXPECT_EQ(bits[1], 0x02);
    EXPECT_EQ(l2.pieces[1].source_offset, 48);

    // utf8 sliced: offsets rebased to 0 on the host, data from the first value.
    array_data s = strings(utf8(), {"aa", "bbb", "c", "dddd", "ee"});
    if (on_device) s = to_device(s, ctx);
    ipc::body_layout ls = ipc::layout_body(one_column("s", s.slice(2, 2)));
    ASSERT_EQ(ls.header.buffers.size(), 3u);
    EXPECT_EQ(ls.header.buffers[1].length, 12);
    // Data from the first value, 8-byte padded where the buffer goes on (Arrow's "send padding if available").
    EXPECT_EQ(ls.header.buffers[2].length, std::min<std::int64_t>(8, s.buffers[2].size() - 5));
    std::vector<std::uint8_t> offs = bytes_of(ls.pieces[0].source);
    std::int32_t o[3];
    std::memcpy(o, offs.data(), 12);
    EXPECT_EQ(o[0], 0);
    EXPECT_EQ(o[1], 1);
    EXPECT_EQ(o[2], 5);
    EXPECT_EQ(ls.pieces[1].source_offset, 5);
  }
}

TEST(IpcBodyLayout, SlicedRunEndEncodedArraysGetTheirRunsRebased) {
  // Runs [0, 2) [2, 3) [3, 6) sliced to elements 1..3: three runs, ending at 1, 2, 3.
  for (auto& [name, a] : sample_arrays()) {
    if (name != "ree_int32") continue;
    for (bool on_device : {false, true}) {
      const array_data x = on_device ? to_device(a, cuarrow::context::get(0)) : a;
      ipc::body_layout l = ipc::layout_body(one_column("r", x.slice(1, 3)));
      ASSERT_GE(l.header.nodes.size(), 2u);
      EXPECT_EQ(l.header.nodes[0], (ipc::field_node{3, 0}));
      EXPECT_EQ(l.header.nodes[1], (ipc::field_node{3, 0}));
      // run ends: validity (none), values computed on the host.
      EXPECT_EQ(l.header.buffers[0].length, 0);
      EXPECT_EQ(l.header.buffers[1].length, 12);
      std::vector<std::uint8_t> raw = bytes_of(l.pieces[0].source);
      std::int32_t ends[3];
      std::memcpy(ends, raw.data(), 12);
      EXPECT_EQ(ends[0], 1);
      EXPECT_EQ(ends[1], 2);
      EXPECT_EQ(ends[2], 3);
    }
  }
}

TEST(IpcBodyLayout, AnEmptyListMayPointPastItsValues) {
  // Valid (no list is read), and written with empty values: the fuzz target
  // found layout_body slicing the child at the first offset, past its end.
  array_data child = primitive<std::int32_t>(int32(), {1});
  array_data l = list_array(list(field("item", int32())), {2}, {}, child);
  EXPECT_NO_THROW(validate(l, {validation_level::full}));
  const record_batch batch = one_column("l", l);
  ipc::body_layout layout = ipc::layout_body(batch);
  ASSERT_EQ(layout.header.nodes.size(), 2u);
  EXPECT_EQ(layout.header.nodes[1], (ipc::field_node{0, 0}));
  EXPECT_TRUE(same_values(batch, round_trip(batch, /*host_body=*/true)));
}

TEST(IpcBodyLayout, ViewsCountTheirDataBuffers) {
  array_data v = string_views(utf8_view(), {"a long string for the views", "x", "another long one, in a block"}, 30);
  ipc::body_layout l = ipc::layout_body(one_column("v", v));
  ASSERT_EQ(l.header.variadic_buffer_counts.size(), 1u);
  EXPECT_EQ(l.header.variadic_buffer_counts[0], static_cast<std::int64_t>(v.buffers.size() - 2));
  EXPECT_EQ(l.header.buffers.size(), v.buffers.size());
}

TEST(IpcBodyLayout, NullAndUnionsHaveNoValidityBuffer) {
  array_data n;
  n.type = null();
  n.length = 3;
  n.null_count = 3;
  ipc::body_layout l = ipc::layout_body(one_column("n", n));
  EXPECT_EQ(l.header.nodes, (std::vector<ipc::field_node>{{3, 3}}));
  EXPECT_TRUE(l.header.buffers.empty());
  EXPECT_EQ(l.body_length, 0);
  for (auto& [name, a] : sample_arrays()) {
    if (a.type.id != type_id::sparse_union) continue;
    ipc::body_layout u = ipc::layout_body(one_column(name, a));
    // type ids, then the children's (int32: validity + values, utf8: validity + offsets + data).
    EXPECT_EQ(u.header.buffers.size(), 1u + 2u + 3u);
    EXPECT_EQ(u.header.buffers[0].length, 4);
  }
}

// ---- dictionaries ---------------------------------------------------------------------------

array_data dictionary_array(data_type index, std::vector<std::optional<std::int32_t>> idx, array_data values) {
  array_data a = primitive<std::int32_t>(int32(), idx);
  a.type = dictionary(int32(), values.type);
  (void)index;
  a.dictionary = std::make_shared<const array_data>(std::move(values));
  return a;
}

TEST(IpcDictionaries, ABatchPointsAtTheMemosDictionary) {
  array_data values = strings(utf8(), {"x", "y", "z"});
  array_data a = dictionary_array(int32(), {0, 2, std::nullopt, 1}, values);
  record_batch batch = one_column("d", a);
  with_dictionaries d = dictionaries_of(batch);
  ipc::body_layout l = ipc::layout_body(batch);
  cuarrow::buffer body = host_copy(ipc::write_body(l, cuarrow::context::get(0)));
  record_batch back = ipc::read_record_batch(l.header, d.schema, body, d.memo);
  EXPECT_EQ(back.columns[0].dictionary.get(), d.memo.get(0).get());
  EXPECT_TRUE(same_values(batch, to_host(back)));
}

TEST(IpcDictionaries, DictionaryBatchesSetAndReplace) {
  cuarrow::context ctx = cuarrow::context::get(0);
  array_data first = strings(utf8(), {"x", "y"});
  array_data second = strings(utf8(), {"p", "q", "r"});
  ipc::schema_message sm;
  sm.schema.fields.emplace_back("d", dictionary(int32(), utf8()));
  sm.dictionaries.push_back({7, {0}});
  ipc::dictionary_memo memo(sm);
  EXPECT_TRUE(memo.knows(7));
  EXPECT_FALSE(memo.get(7));
  EXPECT_EQ(memo.value_type(7), utf8());
  for (const array_data* v : {&first, &second}) {
    const record_batch vb = one_column("dictionary", to_device(*v, ctx));
    ipc::body_layout l = ipc::layout_body(vb);
    ipc::dictionary_batch_header h{7, l.header, false};
    memo.read(h, ipc::write_body(l, ctx));
    ASSERT_TRUE(memo.get(7));
    EXPECT_TRUE(same_values(*v, to_host(*memo.get(7))));
  }
}

TEST(IpcDictionaries, TheMemoChecksTheSchemasDictionaryFields) {
  ipc::schema_message sm;
  sm.schema.fields = {field("d", dictionary(int8(), utf8())), field("i", int32())};
  sm.dictionaries = {{1, {5}}};
  EXPECT_EQ(message_of([&] { ipc::dictionary_memo m(sm); }),
            "schema dictionary id 1: path {5} names no field of the schema");
  sm.dictionaries = {{1, {1}}};
  EXPECT_EQ(message_of([&] { ipc::dictionary_memo m(sm); }),
            "schema dictionary id 1: path {1} names field \"i\" of type int32, which is not dictionary-encoded");
  sm.dictionaries = {{1, {0}}, {1, {0}}};
  EXPECT_EQ(message_of([&] { ipc::dictionary_memo m(sm); }), "schema dictionary id 1: the id is used by two fields");
  sm.dictionaries = {{1, {0}}};
  ipc::dictionary_memo m(sm);
  EXPECT_EQ(message_of([&] { (void)m.value_type(2); }),
            "dictionary id 2: the schema has no dictionary field with this id");
  EXPECT_NE(message_of([&] { m.set(1, strings(binary(), {"a"})); }).find("holds string, not binary"),
            std::string::npos);
}

TEST(IpcDictionaries, NestedDictionariesAreRenumberedUnderTheValues) {
  // dictionary<int32, struct<k: dictionary<int8, utf8>>>: the inner id is
  // nested under the outer's values.
  data_type inner = dictionary(int8(), utf8());
  data_type outer = dictionary(int32(), struct_({field("k", inner)}));
  ipc::schema_message sm;
  sm.schema.fields = {field("d", outer)};
  sm.dictionaries = {{0, {0}}, {1, {0, 0}}};
  ipc::dictionary_memo m(sm);
  const ipc::schema_message& values = m.dictionary_schema(0);
  ASSERT_EQ(values.schema.fields.size(), 1u);
  EXPECT_EQ(values.schema.fields[0].type, *outer.value_type);
  EXPECT_EQ(values.dictionaries, (std::vector<ipc::dictionary_field>{{1, {0, 0}}}));
  EXPECT_EQ(m.value_type(1), utf8());
}

// Dictionary `id` (of `values`' type) in a memo of its own, first `first`.
ipc::dictionary_memo memo_with(const array_data& first) {
  ipc::schema_message sm;
  sm.schema.fields.emplace_back("d", dictionary(int32(), first.type));
  sm.dictionaries.push_back({0, {0}});
  ipc::dictionary_memo memo(sm);
  memo.set(0, first);
  return memo;
}

TEST(IpcDictionaries, DeltasAppendInTheDictionarysMemory) {
  cuarrow::context ctx = cuarrow::context::get(0);
  random_arrays r(7);
  struct join_case {
    std::string name;
    array_data first, delta;
  };
  std::vector<join_case> cases;
  // Lengths that are not multiples of 8 (the bitmaps join at a bit offset), sliced inputs, nested values.
  cases.push_back({"int32", primitive<std::int32_t>(int32(), {1, std::nullopt, 3}),
                   primitive<std::int32_t>(int32(), {std::nullopt, 5, 6, 7, 8, 9, std::nullopt, 11, 12})});
  cases.push_back(
      {"int64 without nulls", primitive<std::int64_t>(int64(), {1, 2}), primitive<std::int64_t>(int64(), {3})});
  cases.push_back({"bool", booleans({true, false, std::nullopt}), booleans({false, true, true, std::nullopt, true})});
  cases.push_back({"utf8 sliced", strings(utf8(), {"skip", "a", std::nullopt, "ccc"}).slice(1, 3),
                   strings(utf8(), {"dd", "skip"}).slice(0, 1)});
  cases.push_back({"large_binary", strings(large_binary(), {"x"}), strings(large_binary(), {"", "yz", std::nullopt})});
  cases.push_back({"decimal128", r.array(decimal(20, 2), 5), r.array(decimal(20, 2), 11)});
  const data_type nested =
      struct_({field("l", list(field("item", utf8()))), field("f", fixed_size_list(field("item", int16()), 2))});
  cases.push_back({"struct<list<utf8>, fixed_size_list<int16>>", r.array(nested, 6), r.array(nested, 9)});
  const data_type m = map(utf8(), int64());
  cases.push_back({"map", r.array(m, 4), r.array(m, 3)});
  for (const auto& c : cases) {
    for (bool on_device : {false, true}) {
      SCOPED_TRACE(c.name + (on_device ? " device" : " host"));
      ipc::dictionary_memo memo = memo_with(on_device ? to_device(c.first, ctx) : c.first);
      memo.append(0, on_device ? to_device(c.delta, ctx) : c.delta);
      const array_data joined = *memo.get(0);
      EXPECT_EQ(joined.length, c.first.length + c.delta.length);
      EXPECT_EQ(placement_of(joined).type == cuarrow::device_type::cuda, on_device);
      EXPECT_NO_THROW(validate(to_host(joined), {validation_level::full}));
      // The same values as the first, then the delta's.
      EXPECT_TRUE(same_values(c.first, to_host(joined.slice(0, c.first.length))));
      EXPECT_TRUE(same_values(c.delta, to_host(joined.slice(c.first.length, c.delta.length))));
    }
  }
}

TEST(IpcDictionaries, ADeltaBatchIsReadAndAppended) {
  cuarrow::context ctx = cuarrow::context::get(0);
  ipc::dictionary_memo memo = memo_with(to_device(strings(utf8(), {"a", "b"}), ctx));
  const array_data delta = strings(utf8(), {"c", std::nullopt});
  const record_batch vb = one_column("dictionary", to_device(delta, ctx));
  ipc::body_layout l = ipc::layout_body(vb);
  memo.read({0, l.header, true}, ipc::write_body(l, ctx));
  EXPECT_TRUE(same_values(strings(utf8(), {"a", "b", "c", std::nullopt}), to_host(*memo.get(0))));
  // A delta before any dictionary, a delta of a type not supported yet.
  ipc::schema_message sm;
  sm.schema.fields.emplace_back("d", dictionary(int32(), utf8_view()));
  sm.dictionaries.push_back({3, {0}});
  ipc::dictionary_memo views(sm);
  const array_data v = string_views(utf8_view(), {"a"});
  EXPECT_EQ(message_of([&] { views.append(3, v); }), "dictionary 3: a delta for a dictionary that has not been sent");
  views.set(3, v);
  EXPECT_EQ(message_of([&] { views.append(3, v); }),
            "dictionary 3: a delta of string_view values cannot be appended yet (not supported: views, list views, "
            "unions, run-end encoded and dictionary-encoded values)");
  EXPECT_NE(message_of([&] { views.append(3, strings(utf8(), {"a"})); }).find("the delta holds string"),
            std::string::npos);
}

// ---- adversarial headers ----------------------------------------------------------------------

// A batch with a struct, a list, a view and a dictionary column, and its body.
struct fixture {
  record_batch batch;
  with_dictionaries dicts;
  ipc::body_layout layout;
  cuarrow::buffer body;

  fixture() {
    array_data ints = primitive<std::int32_t>(int32(), {1, std::nullopt, 3, 4});
    array_data st = struct_array({field("a", int32()), field("b", utf8())},
                                 {ints, strings(utf8(), {"p", "q", std::nullopt, "s"})}, {true, true, true, true});
    array_data li = list_array(list(field("item", int32())), {0, 1, 1, 3, 4}, {true, false, true, true}, ints);
    array_data vw = string_views(utf8_view(), {"short", "a string longer than twelve", std::nullopt, "x"});
    array_data dc = dictionary_array(int32(), {1, 0, std::nullopt, 1}, strings(utf8(), {"u", "v"}));
    batch.schema.fields = {field("st", st.type), field("li", li.type), field("vw", vw.type), field("dc", dc.type)};
    batch.num_rows = 4;
    batch.columns = {st, li, vw, dc};
    dicts = dictionaries_of(batch);
    layout = ipc::layout_body(batch);
    body = host_copy(ipc::write_body(layout, cuarrow::context::get(0)));
  }

  std::string read(const ipc::record_batch_header& h) const {
    return message_of([&] { ipc::read_record_batch(h, dicts.schema, body, dicts.memo); });
  }
  std::string read(const ipc::record_batch_header& h, const ipc::schema_message& sm,
                   const ipc::dictionary_memo& memo) const {
    return message_of([&] { ipc::read_record_batch(h, sm, body, memo); });
  }
};

TEST(IpcBodyAdversarial, TheFixtureReads) {
  fixture f;
  // st(3 nodes) li(2) vw(1) dc(1)
  EXPECT_EQ(f.layout.header.nodes.size(), 7u);
  EXPECT_EQ(f.read(f.layout.header), "(no exception)");
}

TEST(IpcBodyAdversarial, NodeCountsAgainstTheSchemaTree) {
  fixture f;
  ipc::record_batch_header h = f.layout.header;
  h.nodes.pop_back();
  EXPECT_EQ(f.read(h),
            "column \"dc\": no field node left: the header has 6 field nodes, fewer than the schema has "
            "arrays");
  h = f.layout.header;
  h.nodes.push_back({4, 0});
  EXPECT_EQ(f.read(h), "record batch header: 8 field nodes, the schema's 4 columns take 7");
}

TEST(IpcBodyAdversarial, NodeValues) {
  fixture f;
  ipc::record_batch_header h = f.layout.header;
  h.nodes[1].length = -1;
  EXPECT_EQ(f.read(h), "column \"st\" \u2192 child 0 (\"a\"): field node 1: negative length -1");
  h = f.layout.header;
  h.nodes[2].null_count = -2;
  EXPECT_EQ(f.read(h), "column \"st\" \u2192 child 1 (\"b\"): field node 2: negative null count -2");
  h = f.layout.header;
  h.nodes[3].null_count = 5;
  EXPECT_EQ(f.read(h), "column \"li\": field node 3: null count 5 exceeds the length 4");
  h = f.layout.header;
  h.nodes[5].length = 3;
  h.nodes[5].null_count = 0;
  EXPECT_EQ(f.read(h), "column \"vw\": length 3, the batch's length is 4");
  h = f.layout.header;
  h.length = -4;
  EXPECT_EQ(f.read(h), "record batch header: negative length -4");
  // A child shorter than its parent needs: cheap validation, same exception type.
  h = f.layout.header;
  h.nodes[1].length = 2;
  h.nodes[1].null_count = 0;
  const std::string m = f.read(h);
  EXPECT_NE(m.find("column \"st\" \u2192 child 0 (\"a\")"), std::string::npos) << m;
  EXPECT_THROW(ipc::read_record_batch(h, f.dicts.schema, f.body, f.dicts.memo), ipc::invalid_message);
}

TEST(IpcBodyAdversarial, BufferCountsAgainstTheLayout) {
  fixture f;
  ipc::record_batch_header h = f.layout.header;
  h.buffers.pop_back();
  EXPECT_EQ(f.read(h), "column \"dc\": no buffer left for the values buffer: the header has " +
                           std::to_string(h.buffers.size()) + " buffers, fewer than the schema's arrays take");
  h = f.layout.header;
  h.buffers.push_back({0, 0});
  EXPECT_EQ(f.read(h), "record batch header: " + std::to_string(h.buffers.size()) +
                           " buffers, the schema's arrays take " + std::to_string(h.buffers.size() - 1));
}

TEST(IpcBodyAdversarial, EveryRangeInsideTheBody) {
  fixture f;
  const std::int64_t size = f.body.size();
  auto with = [&](std::size_t i, ipc::body_range r) {
    ipc::record_batch_header h = f.layout.header;
    h.buffers[i] = r;
    return f.read(h);
  };
  EXPECT_EQ(with(1, {-8, 4}), "record batch header buffers[1]: negative offset -8");
  EXPECT_EQ(with(1, {0, -4}), "record batch header buffers[1]: negative length -4");
  EXPECT_EQ(with(1, {std::numeric_limits<std::int64_t>::max() - 7, 16}),
            "record batch header buffers[1]: offset 9223372036854775800 + length 16 overflows");
  EXPECT_EQ(with(1, {size - 8, 16}), "record batch header buffers[1]: bytes " + std::to_string(size - 8) + ".." +
                                         std::to_string(size + 8) + " lie outside the body of " + std::to_string(size) +
                                         " bytes");
  EXPECT_EQ(with(1, {4, 4}), "record batch header buffers[1]: offset 4 is not a multiple of 8");
  // An empty range may lie anywhere in the body, aligned or not.
  ipc::record_batch_header h = f.layout.header;
  ASSERT_EQ(h.buffers[0].length, 0);  // the struct has no nulls: 0-length validity
  h.buffers[0] = {3, 0};
  EXPECT_EQ(f.read(h), "(no exception)");
  // A buffer too small for its array: cheap validation.
  h = f.layout.header;
  h.buffers[2].length = 8;  // column "st" child "a" values: 16 bytes needed
  const std::string m = f.read(h);
  EXPECT_NE(m.find("column \"st\" \u2192 child 0 (\"a\")"), std::string::npos) << m;
}

TEST(IpcBodyAdversarial, VariadicCountsAgainstViewFields) {
  fixture f;
  ipc::record_batch_header h = f.layout.header;
  h.variadic_buffer_counts.clear();
  EXPECT_EQ(f.read(h),
            "column \"vw\": no variadic buffer count left: the header has 0, fewer than the schema has "
            "view arrays");
  h = f.layout.header;
  h.variadic_buffer_counts.push_back(0);
  EXPECT_EQ(f.read(h), "record batch header: 2 variadic buffer counts, the schema has 1 view arrays");
  h = f.layout.header;
  h.variadic_buffer_counts[0] = -1;
  EXPECT_EQ(f.read(h), "column \"vw\": variadic buffer count 0 is negative: -1");
  h = f.layout.header;
  h.variadic_buffer_counts[0] = 1000000;
  EXPECT_NE(f.read(h).find("column \"vw\": variadic buffer count 0 is 1000000, more than the"), std::string::npos);
}

TEST(IpcBodyAdversarial, DictionaryIdsAndDictionaries) {
  fixture f;
  ipc::schema_message sm = f.dicts.schema;
  sm.dictionaries.clear();
  ipc::dictionary_memo empty_memo(sm);
  EXPECT_EQ(f.read(f.layout.header, sm, empty_memo),
            "column \"dc\": a dictionary-encoded field without a dictionary id in the schema message (path {3})");
  ipc::dictionary_memo no_dictionary(f.dicts.schema);
  EXPECT_EQ(f.read(f.layout.header, f.dicts.schema, no_dictionary),
            "column \"dc\": dictionary id 0 has no dictionary (no dictionary batch with this id came before the "
            "record batch)");
}

TEST(IpcBodyAdversarial, CompressedBodiesNeedAHook) {
  fixture f;
  ipc::record_batch_header h = f.layout.header;
  h.compression = ipc::compression_codec::zstd;
  EXPECT_EQ(f.read(h),
            "record batch header: the body is compressed (ZSTD): compressed bodies are read by the file "
            "reader, or with a decompress hook (read_options::decompress)");
}

TEST(IpcBody, ADecompressHookGetsEachBuffer) {
  // A body whose buffers are each "stored uncompressed" (length -1, then
  // the bytes), as Arrow's writer stores buffers compression does not shrink.
  fixture f;
  std::vector<std::uint8_t> plain = bytes_of(f.body);
  std::vector<std::uint8_t> packed;
  ipc::record_batch_header h = f.layout.header;
  h.compression = ipc::compression_codec::lz4_frame;
  for (auto& r : h.buffers) {
    if (r.length == 0) continue;
    const std::int64_t at = static_cast<std::int64_t>(packed.size());
    const std::int64_t minus_one = -1;
    packed.resize(packed.size() + 8);
    std::memcpy(packed.data() + at, &minus_one, 8);
    packed.insert(packed.end(), plain.begin() + r.offset, plain.begin() + r.offset + r.length);
    packed.resize((packed.size() + 7) / 8 * 8, 0);
    r = {at, r.length + 8};
  }
  cuarrow::buffer body = host_bytes(packed.data(), packed.size());
  int calls = 0;
  ipc::read_options o;
  o.decompress = [&](ipc::compression_codec c, const cuarrow::buffer& b) {
    EXPECT_EQ(c, ipc::compression_codec::lz4_frame);
    std::int64_t n;
    std::memcpy(&n, b.host_data(), 8);
    EXPECT_EQ(n, -1);
    ++calls;
    return b.slice(8);
  };
  record_batch back = ipc::read_record_batch(h, f.dicts.schema, body, f.dicts.memo, o);
  EXPECT_EQ(calls, static_cast<int>(std::count_if(h.buffers.begin(), h.buffers.end(),
                                                  [](const ipc::body_range& r) { return r.length > 0; })));
  EXPECT_TRUE(same_values(f.batch, back));
}

TEST(IpcBodyAdversarial, RecursionIsBounded) {
  data_type t = int32();
  for (int i = 0; i < 70; ++i) t = list(field("item", t));
  ipc::schema_message sm;
  sm.schema.fields = {field("deep", t)};
  ipc::record_batch_header h;
  h.length = 0;
  for (int i = 0; i < 71; ++i) h.nodes.push_back({0, 0});
  for (int i = 0; i < 142; ++i) h.buffers.push_back({0, 0});
  const std::string m = message_of([&] { ipc::read_record_batch(h, sm, cuarrow::buffer(), ipc::dictionary_memo()); });
  EXPECT_NE(m.find("nested deeper than 64"), std::string::npos) << m;
}

}  // namespace
}  // namespace cuarrow_arrow_test
