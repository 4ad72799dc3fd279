// Whole objects shared with another process (include/cuarrow/ipc/share.hpp):
// the descriptor's wire format and its refusals, and share / open_shared
// across processes (the test binary runs itself again as the other process,
// tests/child_process.hpp): every sample type, dictionaries, slices, empty
// tables, each kind's shape, buffers; and the lifetimes: the exporter
// releasing early or exiting while the importer holds the data, and opening
// after the exporter released or exited.  The same in pool memory
// (share_memory::pool): the pool's descriptor goes to the child over a
// socketpair (tests/fd_passing.hpp), the child imports it once.
#include "cuarrow/ipc/share.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "arrow/arrow_test_util.hpp"
#include "child_process.hpp"
#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/ipc/stream.hpp"
#include "fd_passing.hpp"
#include "test_support.hpp"

namespace cuarrow_ipc_share_test {
namespace {

using namespace cuarrow::arrow;      // NOLINT
using namespace cuarrow_arrow_test;  // NOLINT
using cuarrow_test::child_result;
using cuarrow_test::from_hex;
using cuarrow_test::run_self;
using cuarrow_test::socket_pair;
using cuarrow_test::to_hex;
namespace ipc = cuarrow::ipc;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- the shared objects of a case, made alike in both processes --------------------------------

struct item {
  schema sch;
  std::vector<record_batch> batches;  // on the host
  ipc::shared_kind kind = ipc::shared_kind::table;
};

record_batch one_column(const std::string& name, const array_data& a) {
  record_batch b;
  b.schema.fields = {field(name, a.type)};
  b.num_rows = a.length;
  b.columns = {a};
  return b;
}

// "samples": every sample type (nested, dictionaries, views ...) as a table of
// two batches, the array and a random slice of it.  "kinds": each kind's
// shape, empty tables and batches of 0 rows.  "random": random nested
// batches (sliced children, padding).
std::vector<item> make_case(const std::string& name) {
  std::vector<item> out;
  if (name == "samples") {
    random_arrays r(7);
    for (auto& [n, a] : sample_arrays()) {
      item it;
      it.batches = {one_column("x", a), one_column("x", r.slice(a))};
      it.sch = it.batches[0].schema;
      out.push_back(std::move(it));
    }
  } else if (name == "kinds") {
    const array_data ints = primitive<std::int64_t>(int64(), {1, std::nullopt, 3, 4});
    const array_data strs = strings(utf8(), {"a", std::nullopt, "ccc", ""});
    record_batch two;
    two.schema.fields = {field("i", int64()), field("s", utf8())};
    two.num_rows = 4;
    two.columns = {ints, strs};
    out.push_back(item{two.schema, {two}, ipc::shared_kind::record_batch});
    out.push_back(item{one_column("values", strs).schema, {one_column("values", strs)}, ipc::shared_kind::array});
    const record_batch empty = one_column("values", ints.slice(4, 0));
    out.push_back(item{empty.schema,
                       {one_column("values", ints), empty, one_column("values", ints.slice(1, 2))},
                       ipc::shared_kind::chunked_array});
    out.push_back(item{two.schema, {}, ipc::shared_kind::table});  // no batch at all
    record_batch zero = two;
    zero.num_rows = 0;
    zero.columns = {ints.slice(0, 0), strs.slice(2, 0)};
    out.push_back(item{two.schema, {zero}, ipc::shared_kind::table});
  } else if (name == "random") {
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      random_arrays r(seed);
      item it;
      record_batch first = r.batch(4, r.uniform(0, 40), 3);
      it.sch = first.schema;
      it.batches.push_back(first);
      record_batch second;
      second.schema = first.schema;
      second.num_rows = r.uniform(0, 30);
      for (const field& f : first.schema.fields) second.columns.push_back(r.array(f.type, second.num_rows));
      it.batches.push_back(second);
      out.push_back(std::move(it));
    }
  }
  return out;
}

std::vector<ipc::shared_object> share_case(const std::vector<item>& items, const cuarrow::context& ctx,
                                           ipc::share_memory memory = ipc::share_memory::legacy) {
  std::vector<ipc::shared_object> out;
  for (const item& it : items) {
    const std::vector<record_batch> dev = to_device(std::span<const record_batch>(it.batches), ctx);
    out.push_back(ipc::share(it.sch, dev, ctx, {}, it.kind, ipc::share_options{memory}));
  }
  return out;
}

// Sends the pool of `s` (its descriptor, its id as the payload).
bool send_pool(int sock, const ipc::shared_object& s) {
  std::optional<cuarrow::shareable_pool> p = s.export_pool();
  if (!p) return false;
  const std::uint64_t id = p->pool_id();
  std::vector<std::byte> payload(8);
  std::memcpy(payload.data(), &id, 8);
  return cuarrow_test::send_fd(sock, p->fd(), payload);
}

struct received_pool {
  int fd = -1;
  std::uint64_t pool_id = 0;
};

received_pool receive_pool(int sock) {
  received_pool r;
  std::vector<std::byte> payload;
  r.fd = cuarrow_test::receive_fd(sock, &payload);
  if (payload.size() == 8) std::memcpy(&r.pool_id, payload.data(), 8);
  return r;
}

// Every buffer of `a` (children, dictionary) lies in `in`.
bool inside(const array_data& a, const cuarrow::buffer& in) {
  for (const cuarrow::buffer& b : a.buffers) {
    if (b.size() == 0) continue;
    if (b.address() < in.address() ||
        b.address() + static_cast<std::uintptr_t>(b.size()) > in.address() + static_cast<std::uintptr_t>(in.size())) {
      return false;
    }
  }
  for (const array_data& c : a.children) {
    if (!inside(c, in)) return false;
  }
  return !a.dictionary || inside(*a.dictionary, in);
}

std::vector<std::byte> write_and_read(const std::string& path, const std::string& text = {}) {
  if (!text.empty()) {
    std::ofstream(path + ".tmp") << text;
    std::filesystem::rename(path + ".tmp", path);
    return {};
  }
  std::ifstream in(path);
  std::string s;
  in >> s;
  return from_hex(s);
}

// Waits (up to 60 s) for a file another process writes.
bool wait_for(const std::string& path) {
  for (int i = 0; i < 6000; ++i) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string fresh_dir(const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("cuarrow-share-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

// ---- child modes ----------------------------------------------------------------------------

// Opens each descriptor of argv[1..] and checks it against make_case(argv[0]):
// same schema, kind and values, every buffer inside the one mapping, and no
// copy of the data (only small metadata reads).
// Checks what open(i) opened against items[i] (see share_check); returns 0 or 1.
template <class Open>
int check_items(const std::vector<item>& items, const cuarrow::context& ctx, Open&& open) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    ctx.reset_transfer_stats();
    const ipc::opened_shared o = open(i);
    const cuarrow::transfer_statistics t = ctx.transfer_stats();
    CHILD_CHECK(t.host_to_device_bytes == 0 && t.device_to_device_bytes == 0);
    CHILD_CHECK(t.device_to_host_bytes < 64 * 1024);  // metadata and a few offsets, never the data
    CHILD_CHECK(o.kind == items[i].kind);
    CHILD_CHECK(o.schema == items[i].sch);
    CHILD_CHECK(o.batches.size() == items[i].batches.size());
    CHILD_CHECK(o.data.type() == cuarrow::device_type::cuda);
    for (std::size_t b = 0; b < o.batches.size(); ++b) {
      CHILD_CHECK(o.batches[b].num_rows == items[i].batches[b].num_rows);
      for (const array_data& a : o.batches[b].columns) CHILD_CHECK(inside(a, o.data));
      const ::testing::AssertionResult same = same_values(items[i].batches[b], o.batches[b]);
      if (!same) std::printf("item %zu batch %zu: %s\n", i, b, same.message());
      CHILD_CHECK(same);
    }
  }
  return 0;
}

CUARROW_CHILD_MODE(share_check) {
  CHILD_CHECK(argc >= 1);
  const std::vector<item> items = make_case(argv[0]);
  CHILD_CHECK(static_cast<std::size_t>(argc - 1) == items.size());
  const cuarrow::context ctx = cuarrow::context::get(0);
  CHILD_CHECK(check_items(items, ctx, [&](std::size_t i) { return ipc::open_shared(ctx, from_hex(argv[i + 1])); }) ==
              0);
  std::printf("CHECKED %d\n", argc - 1);
  return 0;
}

// share_pool_check <socket> <case> <descriptors...>: receives the pool,
// checks that a descriptor does not open without it (a clear error naming
// import_shared_pool), then opens each through import_shared_pool (called
// for every descriptor: the pool is imported once) and checks it as
// share_check does.
CUARROW_CHILD_MODE(share_pool_check) {
  CHILD_CHECK(argc >= 2);
  const int sock = std::atoi(argv[0]);
  const std::vector<item> items = make_case(argv[1]);
  CHILD_CHECK(static_cast<std::size_t>(argc - 2) == items.size());
  const received_pool rp = receive_pool(sock);
  CHILD_CHECK(rp.fd >= 0 && rp.pool_id != 0);
  const cuarrow::context ctx = cuarrow::context::get(0);
  try {
    (void)ipc::open_shared(ctx, from_hex(argv[2]));
    CHILD_CHECK(!"a pool descriptor opened without its pool");
  } catch (const cuarrow::invalid_argument& e) {
    CHILD_CHECK(contains(e.what(), "pool memory") && contains(e.what(), "import_shared_pool"));
  }
  const std::size_t pools_before = cuarrow_test::emu().pool_count ? cuarrow_test::emu().pool_count() : 0;
  const cuarrow::imported_pool first = ipc::import_shared_pool(ctx, rp.fd, rp.pool_id);
  const int rc = check_items(items, ctx, [&](std::size_t i) {
    const cuarrow::imported_pool p = ipc::import_shared_pool(ctx, rp.fd, rp.pool_id);
    if (p.native_handle() != first.native_handle()) throw std::runtime_error("the pool was imported again");
    return ipc::open_shared(ctx, from_hex(argv[i + 2]), p);
  });
  CHILD_CHECK(rc == 0);
  if (cuarrow_test::emu().pool_count) {
    CHILD_CHECK(cuarrow_test::emu().pool_count() == pools_before + 1);  // one import for every open
  }
  close(rp.fd);
  std::printf("POOL CHECKED %d\n", argc - 2);
  return 0;
}

// Opens the descriptor argv[0] and prints what happened: "OPENED <kind>" or
// "REFUSED <error class>: <message>".
// With a socket as argv[1]: the pool comes over it and the descriptor is
// opened through it.
CUARROW_CHILD_MODE(share_try_open) {
  CHILD_CHECK(argc == 1 || argc == 2);
  try {
    const cuarrow::context ctx = cuarrow::context::get(0);
    std::optional<ipc::opened_shared> o;
    if (argc == 2) {
      const received_pool rp = receive_pool(std::atoi(argv[1]));
      CHILD_CHECK(rp.fd >= 0);
      const cuarrow::imported_pool p = ipc::import_shared_pool(ctx, rp.fd, rp.pool_id);
      close(rp.fd);
      o = ipc::open_shared(ctx, from_hex(argv[0]), p);
    } else {
      o = ipc::open_shared(ctx, from_hex(argv[0]));
    }
    std::printf("OPENED %s\n", ipc::to_string(o->kind));
  } catch (const cuarrow::cuda_error& e) {
    std::printf("REFUSED cuda_error: %s\n", e.what());
  } catch (const ipc::invalid_message& e) {
    std::printf("REFUSED invalid_message: %s\n", e.what());
  } catch (const cuarrow::invalid_argument& e) {
    std::printf("REFUSED invalid_argument: %s\n", e.what());
  }
  return 0;
}

// The exporter: shares make_case("kinds")'s first item, writes its
// descriptor to <dir>/desc, waits for <dir>/go unless argv[1] is "exit",
// then exits without releasing (the process's end frees everything).
CUARROW_CHILD_MODE(share_export) {
  CHILD_CHECK(argc == 2);
  const std::string dir = argv[0];
  const cuarrow::context ctx = cuarrow::context::get(0);
  std::vector<ipc::shared_object> shared = share_case(make_case("kinds"), ctx);
  write_and_read(dir + "/desc", to_hex(shared[0].descriptor()));
  if (std::string(argv[1]) != "exit") CHILD_CHECK(wait_for(dir + "/go"));
  std::printf("EXPORTER DONE\n");
  return 0;
}

// The importer that holds: opens <dir>/desc (through the pool that comes
// over the socket argv[1], if given), writes <dir>/opened, waits for
// <dir>/released, then reads the batch and compares it.
CUARROW_CHILD_MODE(share_hold) {
  CHILD_CHECK(argc == 1 || argc == 2);
  const std::string dir = argv[0];
  const item expected = make_case("kinds")[0];
  const cuarrow::context ctx = cuarrow::context::get(0);
  std::optional<ipc::opened_shared> opened;
  if (argc == 2) {
    const received_pool rp = receive_pool(std::atoi(argv[1]));
    CHILD_CHECK(rp.fd >= 0);
    opened = ipc::open_shared(ctx, write_and_read(dir + "/desc"), ipc::import_shared_pool(ctx, rp.fd, rp.pool_id));
    close(rp.fd);
  } else {
    opened = ipc::open_shared(ctx, write_and_read(dir + "/desc"));
  }
  const ipc::opened_shared& o = *opened;
  write_and_read(dir + "/opened", "1");
  CHILD_CHECK(wait_for(dir + "/released"));
  CHILD_CHECK(o.batches.size() == 1);
  const record_batch host = to_host(o.batches[0]);  // must not crash, whatever the driver
  if (cuarrow::driver_is_emulated()) {
    const ::testing::AssertionResult same = same_values(expected.batches[0], host);
    if (!same) std::printf("%s\n", same.message());
    CHILD_CHECK(same);
    std::printf("SAME VALUES\n");
  }
  std::printf("READ %lld ROWS\n", static_cast<long long>(host.num_rows));
  return 0;
}

// ---- the descriptor ---------------------------------------------------------------------------

ipc::shared_object sample_share(const cuarrow::context& ctx) {
  return std::move(share_case(make_case("kinds"), ctx)[0]);
}

// Rewrites the checksum (bytes 128-135) after a test edited a descriptor.
void reseal(std::vector<std::byte>& d) { cuarrow_test::reseal_checksum(d, 128); }

std::string refusal(const std::vector<std::byte>& d) {
  return message_of([&] { (void)ipc::read_shared_descriptor(d); });
}

TEST(Share, DescriptorCarriesKindAndTheHandleOfThePackedStream) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  ipc::shared_object s = sample_share(ctx);
  EXPECT_FALSE(s.released());
  EXPECT_EQ(s.kind(), ipc::shared_kind::record_batch);
  const std::vector<std::byte> d = s.descriptor();
  ASSERT_EQ(d.size(), ipc::shared_object::descriptor_size);
  EXPECT_EQ(std::memcmp(d.data(), "CUARSHR\0", 8), 0);
  const ipc::shared_descriptor r = ipc::read_shared_descriptor(d);
  EXPECT_EQ(r.kind, ipc::shared_kind::record_batch);
  EXPECT_EQ(r.handle.size(), s.data().size());
  EXPECT_TRUE(r.handle.exported_by_this_process());
  // The packed stream is an IPC stream of the batch, in cuMemAlloc memory.
  const std::vector<record_batch> back = ipc::stream_reader(s.data()).read_all();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(same_values(make_case("kinds")[0].batches[0], back[0]));
  // Opening it here is refused: descriptors are for other processes.
  const std::string m = message_of([&] { (void)ipc::open_shared(ctx, d); });
  EXPECT_TRUE(contains(m, "other processes")) << m;
}

TEST(Share, DamagedOrForgedDescriptorsSayWhatIsWrong) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  ipc::shared_object s = sample_share(ctx);
  const std::vector<std::byte> good = s.descriptor();
  auto edited = [&](std::size_t at, std::byte v, bool seal) {
    std::vector<std::byte> d = good;
    d[at] = v;
    if (seal) reseal(d);
    return d;
  };
  EXPECT_TRUE(contains(refusal({}), "0 bytes: a descriptor is 136 bytes"));
  EXPECT_TRUE(contains(refusal(std::vector<std::byte>(good.begin(), good.end() - 1)), "135 bytes"));
  EXPECT_TRUE(contains(refusal(edited(0, std::byte{'X'}, true)), "wrong magic"));
  EXPECT_TRUE(contains(refusal(edited(8, std::byte{2}, true)), "version 2"));
  EXPECT_TRUE(contains(refusal(edited(40, std::byte{0x55}, false)), "checksum does not match"));
  EXPECT_TRUE(contains(refusal(edited(10, std::byte{0}, true)), "unknown kind 0"));
  EXPECT_TRUE(contains(refusal(edited(10, std::byte{9}, true)), "unknown kind 9"));
  EXPECT_TRUE(contains(refusal(edited(11, std::byte{1}, true)), "reserved byte"));
  EXPECT_TRUE(contains(refusal(edited(12, std::byte{72}, true)), "IPC handle of 72 bytes"));
  // The handle inside damaged, the descriptor resealed: the handle's own check.
  const std::string inner = refusal(edited(16 + 20, std::byte{0x7f}, true));
  EXPECT_TRUE(contains(inner, "its IPC handle is malformed")) << inner;
  for (const std::string& m : {refusal({}), inner}) {
    EXPECT_TRUE(contains(m, "shared object descriptor of")) << m;
  }
  EXPECT_THROW((void)ipc::open_shared(ctx, edited(40, std::byte{0x55}, false)), cuarrow::invalid_argument);
}

TEST(Share, KindsMustMatchTheirShape) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const item two = make_case("kinds")[0];
  const std::vector<record_batch> dev = to_device(std::span<const record_batch>(two.batches), ctx);
  const std::vector<record_batch> twice = {dev[0], dev[0]};
  EXPECT_THROW((void)ipc::share(two.sch, twice, ctx, {}, ipc::shared_kind::record_batch), cuarrow::invalid_argument);
  EXPECT_THROW((void)ipc::share(two.sch, dev, ctx, {}, ipc::shared_kind::array), cuarrow::invalid_argument);
  EXPECT_THROW((void)ipc::share(two.sch, dev, ctx, {}, ipc::shared_kind::chunked_array), cuarrow::invalid_argument);
  EXPECT_THROW((void)ipc::share(two.sch, dev, ctx, {}, ipc::shared_kind::buffer), cuarrow::invalid_argument);
  EXPECT_NO_THROW((void)ipc::share(two.sch, twice, ctx, {}, ipc::shared_kind::table));
}

TEST(Share, KindAndMemoryNamesReadBack) {
  for (auto k : {ipc::shared_kind::table, ipc::shared_kind::record_batch, ipc::shared_kind::array,
                 ipc::shared_kind::chunked_array, ipc::shared_kind::buffer}) {
    EXPECT_EQ(ipc::shared_kind_of(ipc::to_string(k)), k);
  }
  for (auto m : {ipc::share_memory::legacy, ipc::share_memory::pool})
    EXPECT_EQ(ipc::share_memory_of(ipc::to_string(m)), m);
  EXPECT_THROW((void)ipc::shared_kind_of("tensor"), cuarrow::invalid_argument);
  EXPECT_THROW((void)ipc::share_memory_of("managed"), cuarrow::invalid_argument);
}

TEST(Share, ReleaseDropsTheMemoryAndTheDescriptor) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t before = ctx.bytes_allocated();
  ipc::shared_object s = sample_share(ctx);
  EXPECT_GT(ctx.bytes_allocated(), before);
  ipc::shared_object moved = std::move(s);
  EXPECT_TRUE(s.released());  // NOLINT(bugprone-use-after-move): a moved-from share holds nothing
  EXPECT_FALSE(moved.released());
  moved.release();
  moved.release();  // idempotent
  EXPECT_TRUE(moved.released());
  EXPECT_EQ(moved.data().size(), 0);
  EXPECT_THROW((void)moved.descriptor(), cuarrow::invalid_argument);
  EXPECT_EQ(ctx.bytes_allocated(), before);
}

TEST(Share, BuffersShareAsThemselvesOrAsACuMemAllocCopy) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::vector<std::uint8_t> bytes = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const cuarrow::buffer plain =
      cuarrow::allocate_device(ctx, 9, {}, std::make_shared<cuarrow::plain_device_resource>());
  cuarrow::copy_from_host(plain, 0, bytes.data(), 9);
  const ipc::shared_object itself = ipc::share(plain.slice(2, 5));
  EXPECT_EQ(itself.kind(), ipc::shared_kind::buffer);
  EXPECT_EQ(itself.data().address(), plain.address() + 2) << "plain memory is shared as it is";
  const cuarrow::buffer pooled = cuarrow::copy_to_device(ctx, bytes.data(), 9);
  const ipc::shared_object copied = ipc::share(pooled);
  if (ctx.properties().memory_pools_supported) {
    EXPECT_NE(copied.data().address(), pooled.address()) << "pool memory is shared as a cuMemAlloc copy";
  }
  EXPECT_EQ(cuarrow_test::to_vector(copied.data()), bytes);
  EXPECT_THROW((void)ipc::share(cuarrow::allocate_host(4)), cuarrow::invalid_argument);
  child_result r = run_self("share_try_open", {to_hex(copied.descriptor())});
  ASSERT_TRUE(r.ok()) << r.output;
  EXPECT_TRUE(contains(r.output, "OPENED buffer")) << r.output;
}

// ---- across processes -----------------------------------------------------------------------

void check_case_in_child(const std::string& name) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::vector<item> items = make_case(name);
  std::vector<ipc::shared_object> shared = share_case(items, ctx);
  std::vector<std::string> args = {name};
  for (const ipc::shared_object& s : shared) args.push_back(to_hex(s.descriptor()));
  child_result r = run_self("share_check", args);
  ASSERT_TRUE(r.ok()) << r.output;
  EXPECT_TRUE(contains(r.output, "CHECKED " + std::to_string(items.size()))) << r.output;
}

TEST(Share, EverySampleTypeOpensInAnotherProcessZeroCopy) { check_case_in_child("samples"); }
TEST(Share, EachKindAndEmptyTablesOpenInAnotherProcess) { check_case_in_child("kinds"); }
TEST(Share, RandomNestedSlicedBatchesOpenInAnotherProcess) { check_case_in_child("random"); }

TEST(Share, OpeningAfterTheExporterReleasedIsAClearError) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  ipc::shared_object s = sample_share(ctx);
  const std::vector<std::byte> d = s.descriptor();
  s.release();
  child_result r = run_self("share_try_open", {to_hex(d)});
  ASSERT_TRUE(r.ok()) << r.output;
  // The real driver refuses the handle of freed memory; the emulation maps
  // the freed range, where release() blanked the stream's start.
  EXPECT_TRUE(contains(r.output, "REFUSED cuda_error: cuIpcOpenMemHandle failed") ||
              contains(r.output,
                       "REFUSED invalid_message: shared record_batch: no readable stream at the shared "
                       "memory (did the exporter release it?)"))
      << r.output;
}

TEST(Share, OpeningAfterTheExporterExitedIsACudaError) {
  const std::string dir = fresh_dir("exited");
  child_result exporter = run_self("share_export", {dir, "exit"});
  ASSERT_TRUE(exporter.ok()) << exporter.output;
  child_result r = run_self("share_try_open", {to_hex(write_and_read(dir + "/desc"))});
  ASSERT_TRUE(r.ok()) << r.output;
  EXPECT_TRUE(contains(r.output, "REFUSED cuda_error: cuIpcOpenMemHandle failed")) << r.output;
  EXPECT_TRUE(contains(r.output, "the exporting process may have exited")) << r.output;
  std::filesystem::remove_all(dir);
}

// The importer (this process) holds the batch; the exporter exits; the
// batch stays readable (the emulation's mapping keeps the memory).
TEST(Share, ImporterKeepsReadingAfterTheExporterExited) {
  const std::string dir = fresh_dir("died");
  child_result exporter;
  std::thread t([&] { exporter = run_self("share_export", {dir, "wait"}); });
  ASSERT_TRUE(wait_for(dir + "/desc"));
  std::optional<ipc::opened_shared> o;
  try {
    o = ipc::open_shared(cuarrow::context::get(0), write_and_read(dir + "/desc"));
  } catch (...) {
    write_and_read(dir + "/go", "1");
    t.join();
    throw;
  }
  write_and_read(dir + "/go", "1");
  t.join();
  ASSERT_TRUE(exporter.ok()) << exporter.output;
  ASSERT_EQ(o->batches.size(), 1u);
  const record_batch host = to_host(o->batches[0]);  // never a crash
  if (cuarrow::driver_is_emulated()) {
    EXPECT_TRUE(same_values(make_case("kinds")[0].batches[0], host));
  }
  o.reset();
  if (cuarrow_test::emu().ipc_mapping_count) {
    EXPECT_EQ(cuarrow_test::emu().ipc_mapping_count(), 0u) << "the last batch closed the mapping";
  }
  std::filesystem::remove_all(dir);
}

// The exporter (this process) releases while an importer holds the batch.
TEST(Share, ExporterReleasingEarlyLeavesTheImporterValidMemory) {
  const std::string dir = fresh_dir("early");
  const cuarrow::context ctx = cuarrow::context::get(0);
  ipc::shared_object s = sample_share(ctx);
  write_and_read(dir + "/desc", to_hex(s.descriptor()));
  child_result importer;
  std::thread t([&] { importer = run_self("share_hold", {dir}); });
  const bool opened = wait_for(dir + "/opened");
  s.release();
  write_and_read(dir + "/released", "1");
  t.join();
  ASSERT_TRUE(opened) << importer.output;
  ASSERT_TRUE(importer.ok()) << importer.output;
  EXPECT_TRUE(contains(importer.output, "READ 4 ROWS")) << importer.output;
  if (cuarrow::driver_is_emulated()) {
    EXPECT_TRUE(contains(importer.output, "SAME VALUES")) << importer.output;
  }
  std::filesystem::remove_all(dir);
}

// ---- pool memory ------------------------------------------------------------------------------

TEST(SharePool, DescriptorIsVersion2WithAHandleOfTheProcessWidePool) {
  REQUIRE_SHAREABLE_POOLS();
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::vector<ipc::shared_object> shared = share_case(make_case("kinds"), ctx, ipc::share_memory::pool);
  const ipc::shared_object& s = shared[0];
  EXPECT_EQ(s.memory(), ipc::share_memory::pool);
  const std::vector<std::byte> d = s.descriptor();
  ASSERT_EQ(d.size(), ipc::shared_object::pool_descriptor_size);
  EXPECT_EQ(std::memcmp(d.data(), "CUARSHR\0", 8), 0);
  EXPECT_EQ(static_cast<int>(d[8]), 2);
  const ipc::shared_descriptor r = ipc::read_shared_descriptor(d);
  EXPECT_EQ(r.kind, ipc::shared_kind::record_batch);
  EXPECT_EQ(r.memory, ipc::share_memory::pool);
  EXPECT_EQ(r.handle.kind(), cuarrow::ipc_handle_kind::pool);
  const std::shared_ptr<cuarrow::ipc_pool_resource> pool = cuarrow::ipc_pool_resource::shared_for(ctx);
  EXPECT_EQ(pool, cuarrow::ipc_pool_resource::shared_for(ctx)) << "one pool per device for the process";
  EXPECT_EQ(r.handle.pool_id(), pool->pool_id());
  std::optional<cuarrow::shareable_pool> sp = s.export_pool();
  ASSERT_TRUE(sp.has_value());
  EXPECT_GE(sp->fd(), 0);
  EXPECT_EQ(sp->pool_id(), pool->pool_id());
  for (const ipc::shared_object& other : shared) EXPECT_EQ(other.export_pool()->pool_id(), pool->pool_id());
  // The stream is the batch's.
  const std::vector<record_batch> back = ipc::stream_reader(s.data()).read_all();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(same_values(make_case("kinds")[0].batches[0], back[0]));
  // Legacy shares have no pool to send.
  EXPECT_FALSE(sample_share(ctx).export_pool().has_value());
  // Opening it here is refused, with or without the pool: descriptors are
  // for other processes (share_pool_check sees the error without the pool).
  const std::string m = message_of([&] { (void)ipc::open_shared(ctx, d); });
  EXPECT_TRUE(contains(m, "other processes")) << m;
  EXPECT_THROW((void)ipc::open_shared(ctx, d), cuarrow::invalid_argument);
  EXPECT_THROW((void)ipc::import_shared_pool(ctx, 3, 0), cuarrow::invalid_argument);
}

TEST(SharePool, VersionSizeAndHandleKindMustAgree) {
  REQUIRE_SHAREABLE_POOLS();
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::vector<ipc::shared_object> shared = share_case(make_case("kinds"), ctx, ipc::share_memory::pool);
  const std::vector<std::byte> pool_d = shared[0].descriptor();
  const std::vector<std::byte> legacy_d = sample_share(ctx).descriptor();
  auto resealed = [](std::vector<std::byte> d) {
    cuarrow_test::reseal_checksum(d, d.size() - 8);
    return d;
  };
  std::vector<std::byte> v1_of_pool = pool_d;
  v1_of_pool[8] = std::byte{1};
  EXPECT_TRUE(contains(refusal(resealed(v1_of_pool)), "version 1 descriptors are 136 bytes"))
      << refusal(resealed(v1_of_pool));
  std::vector<std::byte> v3 = pool_d;
  v3[8] = std::byte{3};
  EXPECT_TRUE(contains(refusal(resealed(v3)), "version 3, this cuarrow reads versions 1 and 2"));
  EXPECT_TRUE(contains(refusal(std::vector<std::byte>(pool_d.begin(), pool_d.end() - 1)),
                       "a descriptor is 136 bytes (legacy memory) or 144 bytes (pool memory)"));
  std::vector<std::byte> damaged = pool_d;
  damaged[100] ^= std::byte{1};
  EXPECT_TRUE(contains(refusal(damaged), "checksum does not match"));
  // A legacy handle inside a version 2 descriptor (grown to 144 bytes): refused.
  std::vector<std::byte> legacy_in_v2(legacy_d.begin(), legacy_d.end() - 8);
  legacy_in_v2.resize(ipc::shared_object::pool_descriptor_size - 8, std::byte{0});
  legacy_in_v2.resize(ipc::shared_object::pool_descriptor_size);
  legacy_in_v2[8] = std::byte{2};
  legacy_in_v2[12] = std::byte{120};
  const std::string m = refusal(resealed(legacy_in_v2));
  EXPECT_TRUE(contains(m, "shared object descriptor of 144 bytes")) << m;
}

void check_pool_case_in_child(const std::string& name) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::vector<item> items = make_case(name);
  std::vector<ipc::shared_object> shared = share_case(items, ctx, ipc::share_memory::pool);
  std::vector<std::string> args;
  socket_pair sp;
  ASSERT_GE(sp.parent, 0);
  ASSERT_TRUE(send_pool(sp.parent, shared[0]));
  args = {std::to_string(sp.child), name};
  for (const ipc::shared_object& s : shared) args.push_back(to_hex(s.descriptor()));
  child_result r = run_self("share_pool_check", args);
  ASSERT_TRUE(r.ok()) << r.output;
  EXPECT_TRUE(contains(r.output, "POOL CHECKED " + std::to_string(items.size()))) << r.output;
}

TEST(SharePool, EverySampleTypeOpensInAnotherProcessThroughThePool) {
  REQUIRE_SHAREABLE_POOLS();
  check_pool_case_in_child("samples");
}
TEST(SharePool, EachKindOpensInAnotherProcessImportingThePoolOnce) {
  REQUIRE_SHAREABLE_POOLS();
  check_pool_case_in_child("kinds");
}
TEST(SharePool, RandomNestedSlicedBatchesOpenInAnotherProcess) {
  REQUIRE_SHAREABLE_POOLS();
  check_pool_case_in_child("random");
}

TEST(SharePool, BuffersShareAsThemselvesInThePoolElseAsACopyThere) {
  REQUIRE_SHAREABLE_POOLS();
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::vector<std::uint8_t> bytes = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const ipc::share_options pool{ipc::share_memory::pool};
  const cuarrow::buffer plain =
      cuarrow::allocate_device(ctx, 9, {}, std::make_shared<cuarrow::plain_device_resource>());
  cuarrow::copy_from_host(plain, 0, bytes.data(), 9);
  const ipc::shared_object copied = ipc::share(plain, {}, pool);
  EXPECT_NE(copied.data().address(), plain.address()) << "cuMemAlloc memory goes to the pool as a copy";
  EXPECT_EQ(copied.memory(), ipc::share_memory::pool);
  EXPECT_EQ(cuarrow_test::to_vector(copied.data()), bytes);
  const cuarrow::buffer in_pool = cuarrow::allocate_device(ctx, 9, {}, cuarrow::ipc_pool_resource::shared_for(ctx));
  cuarrow::copy_from_host(in_pool, 0, bytes.data(), 9);
  const ipc::shared_object itself = ipc::share(in_pool.slice(2, 5), {}, pool);
  EXPECT_EQ(itself.data().address(), in_pool.address() + 2) << "memory of the share pool is shared as it is";
  // The legacy path never carries a pool handle: pool memory goes as a cuMemAlloc copy.
  const ipc::shared_object legacy = ipc::share(in_pool);
  EXPECT_EQ(legacy.memory(), ipc::share_memory::legacy);
  EXPECT_NE(legacy.data().address(), in_pool.address());
  EXPECT_EQ(legacy.descriptor().size(), ipc::shared_object::descriptor_size);
  socket_pair sp;
  ASSERT_GE(sp.parent, 0);
  ASSERT_TRUE(send_pool(sp.parent, copied));
  child_result r = run_self("share_try_open", {to_hex(copied.descriptor()), std::to_string(sp.child)});
  ASSERT_TRUE(r.ok()) << r.output;
  EXPECT_TRUE(contains(r.output, "OPENED buffer")) << r.output;
}

TEST(SharePool, ReleaseFreesThePoolMemoryInStreamOrder) {
  REQUIRE_SHAREABLE_POOLS();
  const cuarrow::context ctx = cuarrow::context::get(0);
  ctx.synchronize();
  const std::int64_t before = ctx.bytes_allocated();
  std::vector<ipc::shared_object> shared = share_case(make_case("kinds"), ctx, ipc::share_memory::pool);
  EXPECT_GT(ctx.bytes_allocated(), before);
  for (ipc::shared_object& s : shared) {
    s.release();
    EXPECT_THROW((void)s.export_pool(), cuarrow::invalid_argument);
    EXPECT_THROW((void)s.descriptor(), cuarrow::invalid_argument);
  }
  ctx.synchronize();
  EXPECT_EQ(ctx.bytes_allocated(), before);
}

TEST(SharePool, OpeningAfterTheExporterReleasedIsAClearError) {
  REQUIRE_SHAREABLE_POOLS();
  const cuarrow::context ctx = cuarrow::context::get(0);
  std::vector<ipc::shared_object> shared = share_case(make_case("kinds"), ctx, ipc::share_memory::pool);
  const std::vector<std::byte> d = shared[0].descriptor();
  socket_pair sp;
  ASSERT_GE(sp.parent, 0);
  ASSERT_TRUE(send_pool(sp.parent, shared[0]));
  shared[0].release();
  ctx.synchronize();
  child_result r = run_self("share_try_open", {to_hex(d), std::to_string(sp.child)});
  ASSERT_TRUE(r.ok()) << r.output;
  EXPECT_TRUE(contains(r.output, "REFUSED cuda_error") ||
              contains(r.output, "REFUSED invalid_message: shared record_batch: no readable stream"))
      << r.output;
}

// The exporter (this process) releases while an importer holds the batch
// (CUDA asks importers to be done first and does not say what they read
// otherwise: this checks only that reading does not crash).
TEST(SharePool, ExporterReleasingEarlyLeavesTheImporterReading) {
  REQUIRE_SHAREABLE_POOLS();
  const std::string dir = fresh_dir("pool-early");
  const cuarrow::context ctx = cuarrow::context::get(0);
  std::vector<ipc::shared_object> shared = share_case(make_case("kinds"), ctx, ipc::share_memory::pool);
  write_and_read(dir + "/desc", to_hex(shared[0].descriptor()));
  socket_pair sp;
  ASSERT_GE(sp.parent, 0);
  ASSERT_TRUE(send_pool(sp.parent, shared[0]));
  child_result importer;
  std::thread t([&] { importer = run_self("share_hold", {dir, std::to_string(sp.child)}); });
  const bool opened = wait_for(dir + "/opened");
  shared[0].release();
  ctx.synchronize();
  write_and_read(dir + "/released", "1");
  t.join();
  ASSERT_TRUE(opened) << importer.output;
  ASSERT_TRUE(importer.ok()) << importer.output;
  EXPECT_TRUE(contains(importer.output, "READ 4 ROWS")) << importer.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cuarrow_ipc_share_test
