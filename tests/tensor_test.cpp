// The tensor reader (include/cuarrow/tensor.hpp): DLPack structs and
// __cuda_array_interface__ descriptions from outside.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cuarrow/buffer.hpp"
#include "cuarrow/context.hpp"
#include "cuarrow/error.hpp"
#include "cuarrow/tensor.hpp"
#include "test_support.hpp"

namespace {

using namespace cuarrow;  // NOLINT

struct dl {
  std::vector<std::int64_t> shape, strides;
  dlpack::DLTensor t{};
  dl(std::vector<std::int64_t> sh, std::vector<std::int64_t> st = {}, dlpack::DLDataType dt = {dlpack::kDLFloat, 32, 1})
      : shape(std::move(sh)), strides(std::move(st)) {
    t.data = reinterpret_cast<void*>(std::uintptr_t{0x10000});
    t.device = {dlpack::kDLCUDA, 0};
    t.ndim = static_cast<std::int32_t>(shape.size());
    t.dtype = dt;
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
  }
};

std::string refusal(const dlpack::DLTensor& t) {
  try {
    read_dlpack(t);
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string refusal(const cuda_array_interface& c) {
  try {
    read_cuda_array_interface(c);
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Tensor, CompactTensorsAreReadWithTheirSpan) {
  dl a({3, 4});
  const tensor_info t = read_dlpack(a.t);
  EXPECT_EQ(t.elements, 12);
  EXPECT_EQ(t.itemsize, 4);
  EXPECT_EQ(t.strides, (std::vector<std::int64_t>{16, 4}));
  EXPECT_EQ(t.span_offset, 0);
  EXPECT_EQ(t.span_length, 48);
  EXPECT_TRUE(t.c_contiguous);
  EXPECT_TRUE(t.contiguous);
  EXPECT_EQ(t.typestr, "<f4");
  // Transposed (Fortran order): contiguous, not C-contiguous.
  dl f({3, 4}, {1, 3});
  const tensor_info ft = read_dlpack(f.t);
  EXPECT_FALSE(ft.c_contiguous);
  EXPECT_TRUE(ft.contiguous);
  EXPECT_EQ(ft.span_length, 48);
  // Reversed: the span starts before data.
  dl r({5}, {-1});
  const tensor_info rt = read_dlpack(r.t);
  EXPECT_EQ(rt.span_offset, -16);
  EXPECT_EQ(rt.span_length, 20);
  EXPECT_FALSE(rt.c_contiguous);
  EXPECT_TRUE(rt.contiguous);
  // Every other element: neither.
  dl g({5}, {2});
  EXPECT_FALSE(read_dlpack(g.t).contiguous);
  EXPECT_EQ(read_dlpack(g.t).span_length, 36);
  // Broadcast (stride 0) overlaps: not contiguous.
  dl b({4, 3}, {0, 1});
  EXPECT_FALSE(read_dlpack(b.t).contiguous);
}

// Dimensions of extent 1 are never stepped over, so their strides do not
// matter, and a tensor with an extent 0 has no bytes at all: both are
// C-contiguous whatever their strides (PyTorch gives such dimensions
// arbitrary strides).  A previous check compared every stride.
TEST(Tensor, ExtentOneAndEmptyDimensionsAreContiguousWhateverTheirStrides) {
  dl one({1, 4}, {99, 1});
  EXPECT_TRUE(read_dlpack(one.t).c_contiguous);
  dl one_last({4, 1}, {1, 7});
  EXPECT_TRUE(read_dlpack(one_last.t).c_contiguous);
  dl empty({0, 4}, {123, -5});
  const tensor_info e = read_dlpack(empty.t);
  EXPECT_TRUE(e.c_contiguous);
  EXPECT_TRUE(e.contiguous);
  EXPECT_EQ(e.elements, 0);
  EXPECT_EQ(e.span_length, 0);
  dl scalar({});
  EXPECT_EQ(read_dlpack(scalar.t).elements, 1);
  EXPECT_EQ(read_dlpack(scalar.t).span_length, 4);
}

TEST(Tensor, BadDLPackTensorsAreRefused) {
  dl a({3});
  a.t.ndim = -1;
  EXPECT_EQ(refusal(a.t), "DLPack tensor: negative number of dimensions (-1)");
  a.t.ndim = 65;
  EXPECT_EQ(refusal(a.t), "DLPack tensor: 65 dimensions (at most 64)");
  dl n({3, -2});
  EXPECT_EQ(refusal(n.t), "DLPack tensor: extent -2 of dimension 1 is negative");
  dl big({std::int64_t{1} << 40, std::int64_t{1} << 40});
  EXPECT_EQ(refusal(big.t), "DLPack tensor: the element count overflows 64 bits");
  dl bytes({std::int64_t{1} << 62}, {1}, {dlpack::kDLFloat, 64, 1});
  EXPECT_EQ(refusal(bytes.t), "DLPack tensor: the size in bytes overflows 64 bits");
  dl st({3}, {std::numeric_limits<std::int64_t>::max() / 2});
  EXPECT_EQ(refusal(st.t), "DLPack tensor: a stride in bytes overflows 64 bits");
  dl reach({3}, {std::numeric_limits<std::int64_t>::max() / 4});
  EXPECT_EQ(refusal(reach.t), "DLPack tensor: a stride times its extent overflows 64 bits");
  dl below({3}, {-0x10000});
  EXPECT_EQ(refusal(below.t), "DLPack tensor: negative strides reach below address 0");
  dl past({3});
  past.t.data = reinterpret_cast<void*>(std::numeric_limits<std::uintptr_t>::max() - 4);
  EXPECT_EQ(refusal(past.t), "DLPack tensor: the tensor's bytes run past the end of the address space");
  dl off({3});
  off.t.byte_offset = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(refusal(off.t), "DLPack tensor: data + byte_offset overflows the address space");
  dl null({3});
  null.t.data = nullptr;
  EXPECT_EQ(refusal(null.t), "DLPack tensor: the data pointer is null for a tensor of 3 elements");
  null.shape[0] = 0;
  EXPECT_EQ(refusal(null.t), "(accepted)");
  dl noshape({3});
  noshape.t.shape = nullptr;
  EXPECT_EQ(refusal(noshape.t), "DLPack tensor: shape is NULL for 1 dimensions");
  dl code({3}, {}, {3, 64, 1});
  EXPECT_EQ(refusal(code.t), "DLPack tensor: unknown dtype code 3");
  dl nib({3}, {}, {dlpack::kDLInt, 4, 1});
  EXPECT_EQ(refusal(nib.t), "DLPack tensor: elements of 4 bits are not whole bytes");
  dl lanes({3}, {}, {dlpack::kDLInt, 8, 0});
  EXPECT_EQ(refusal(lanes.t), "DLPack tensor: dtype of 0 lanes");

  dlpack::DLManagedTensorVersioned v{};
  v.version = {2, 0};
  v.dl_tensor = dl({1}).t;
  EXPECT_THROW(read_dlpack(v), invalid_argument);
}

TEST(Tensor, CudaArrayInterfacesAreReadAndAMaskIsRefused) {
  cuda_array_interface c;
  c.version = 3;
  c.data = 0x20000;
  c.typestr = "<i8";
  c.shape = {2, 3};
  tensor_info t = read_cuda_array_interface(c);
  EXPECT_EQ(t.itemsize, 8);
  EXPECT_EQ(t.strides, (std::vector<std::int64_t>{24, 8}));
  EXPECT_TRUE(t.c_contiguous);
  EXPECT_EQ(t.span_length, 48);
  c.strides = std::vector<std::int64_t>{8, 16};
  t = read_cuda_array_interface(c);
  EXPECT_FALSE(t.c_contiguous);
  EXPECT_TRUE(t.contiguous);

  c.has_mask = true;
  EXPECT_EQ(refusal(c).rfind("__cuda_array_interface__: a mask is not supported", 0), 0u) << refusal(c);
  c.has_mask = false;
  c.strides = std::vector<std::int64_t>{8};
  EXPECT_EQ(refusal(c), "__cuda_array_interface__: 1 strides for 2 dimensions");
  c.strides.reset();
  c.version = 4;
  EXPECT_EQ(refusal(c), "__cuda_array_interface__: unsupported version 4 (cuarrow reads 0 to 3)");
  c.version = 3;
  c.stream = 0;
  EXPECT_EQ(refusal(c), "__cuda_array_interface__: stream 0 is invalid (ambiguous); see the CAI v3 spec");
  c.stream.reset();
  for (const char* bad : {"", "<", "<f", "<q4", "!f4", "<f0", "<f4x", "<m4[s]", "<M8[", "<b2", "<f99999999"}) {
    c.typestr = bad;
    EXPECT_NE(refusal(c), "(accepted)") << bad;
  }
  for (const char* good : {"|u1", "<M8[ns]", ">f8", "<m8", "|b1", "<c16", "|V16"}) {
    c.typestr = good;
    EXPECT_EQ(refusal(c), "(accepted)") << good;
  }
  c.typestr = "<f4";
  c.data = 0;
  EXPECT_EQ(refusal(c), "__cuda_array_interface__: the data pointer is null for a tensor of 6 elements");
}

// ---- tensors and buffers -------------------------------------------------------

// A producer's tensor over `b`'s memory, read by the core's reader.
tensor_info tensor_over(const buffer& b, std::vector<std::int64_t> shape, std::vector<std::int64_t> strides = {}) {
  dl d(std::move(shape), std::move(strides));
  d.t.data = reinterpret_cast<void*>(b.address());
  d.t.device = b.type() == device_type::cuda_host ? dlpack::DLDevice{dlpack::kDLCUDAHost, 0}
                                                  : dlpack::DLDevice{dlpack::kDLCUDA, b.device_id()};
  return read_dlpack(d.t);
}

TEST(Tensor, WrapViewsTheSpanAndKeepsTheOwner) {
  const context ctx = context::get(0);
  const buffer mem = allocate_device(ctx, 4096);
  auto owner = std::make_shared<int>(7);
  std::weak_ptr<int> alive = owner;
  // A transposed 3x4 float32 tensor: strides (4, 12 ... in elements) span 48 bytes without gaps.
  buffer view = wrap_tensor(ctx, tensor_over(mem, {4, 3}, {1, 4}), std::move(owner));
  EXPECT_EQ(view.address(), mem.address());
  EXPECT_EQ(view.size(), 48);
  EXPECT_EQ(view.type(), device_type::cuda);
  EXPECT_TRUE(view.is_mutable());
  EXPECT_FALSE(alive.expired());
  buffer part = view.slice(4, 8);
  view = buffer();
  EXPECT_FALSE(alive.expired()) << "a slice of the view keeps the producer's owner";
  part = buffer();
  EXPECT_TRUE(alive.expired());

  // Negative strides: the view starts at the lowest byte the elements cover.
  dl reversed({4}, {-1});
  reversed.t.data = reinterpret_cast<void*>(mem.address() + 12);
  view = wrap_tensor(ctx, read_dlpack(reversed.t, /*read_only=*/true), nullptr);
  EXPECT_EQ(view.address(), mem.address());
  EXPECT_EQ(view.size(), 16);
  EXPECT_FALSE(view.is_mutable()) << "a read-only tensor gives a read-only view";

  // An empty tensor: an empty device buffer of the context, the owner not kept.
  owner = std::make_shared<int>(0);
  alive = owner;
  view = wrap_tensor(ctx, tensor_over(mem, {0, 3}), std::move(owner));
  EXPECT_EQ(view.size(), 0);
  EXPECT_EQ(view.type(), device_type::cuda);
  EXPECT_TRUE(alive.expired());
}

// A legacy managed tensor of float32 over `mem` whose deleter counts its
// calls.
struct counted_tensor {
  dl d;
  dlpack::DLManagedTensor m{};
  int deleted = 0;
  counted_tensor(const buffer& mem, std::vector<std::int64_t> shape) : d(std::move(shape)) {
    d.t.data = reinterpret_cast<void*>(mem.address());
    m.dl_tensor = d.t;
    m.manager_ctx = this;
    m.deleter = [](dlpack::DLManagedTensor* self) { ++static_cast<counted_tensor*>(self->manager_ctx)->deleted; };
  }
};

// from_dlpack takes a managed tensor over once it is accepted: the deleter
// runs (through the caller's hook, when given) when the last handle of the
// view goes, at once for an empty tensor; a refused tensor stays the
// caller's.
TEST(Tensor, FromDLPackTakesTheTensorOverOnceItIsAccepted) {
  const context ctx = context::get(0);
  const buffer mem = allocate_device(ctx, 256);
  counted_tensor c(mem, {16});
  buffer view = from_dlpack(ctx, &c.m);
  EXPECT_EQ(view.address(), mem.address());
  EXPECT_EQ(view.size(), 64);
  buffer part = view.slice(8, 8);
  view = buffer();
  EXPECT_EQ(c.deleted, 0) << "a slice of the view keeps the tensor";
  part = buffer();
  EXPECT_EQ(c.deleted, 1);

  counted_tensor on_host(mem, {16});
  on_host.m.dl_tensor.device = {dlpack::kDLCPU, 0};
  EXPECT_THROW((void)from_dlpack(ctx, &on_host.m), memory_kind_error);
  EXPECT_EQ(on_host.deleted, 0) << "a refused tensor stays the caller's";

  counted_tensor empty(mem, {0});
  EXPECT_EQ(from_dlpack(ctx, &empty.m).size(), 0);
  EXPECT_EQ(empty.deleted, 1);

  const std::vector<std::int64_t> shape{4, 4};
  int hooked = 0;
  view = from_dlpack(ctx, export_dlpack_versioned(mem, 16, {dlpack::kDLFloat, 32, 1}, shape),
                     [&](const std::function<void()>& deleter) {
                       ++hooked;
                       deleter();
                     });
  EXPECT_EQ(view.address(), mem.address() + 16);
  EXPECT_EQ(view.size(), 64);
  EXPECT_EQ(hooked, 0);
  view = buffer();
  EXPECT_EQ(hooked, 1);
  EXPECT_THROW((void)from_dlpack(ctx, static_cast<dlpack::DLManagedTensor*>(nullptr)), invalid_argument);
}

TEST(Tensor, WrapViewsPinnedMemoryAtItsDeviceAddress) {
  const context ctx = context::get(0);
  const buffer pinned = allocate_pinned(ctx, 256);
  const buffer view = wrap_tensor(ctx, tensor_over(pinned, {16}), nullptr);
  EXPECT_EQ(view.address(), ctx.get_device_address(reinterpret_cast<const void*>(pinned.address())));
  EXPECT_EQ(view.size(), 64);
}

TEST(Tensor, WrapRefusesWhatTheDeviceCannotUse) {
  const context ctx = context::get(0);
  const buffer mem = allocate_device(ctx, 256);
  tensor_info t = tensor_over(mem, {8});
  t.device_type = dlpack::kDLCPU;
  try {
    (void)wrap_tensor(ctx, t, nullptr);
    ADD_FAILURE() << "host memory accepted";
  } catch (const memory_kind_error& e) {
    EXPECT_STREQ(e.what(),
                 "cannot create device buffer view from a DLPack tensor on device type 1 (only CUDA, CUDA host and "
                 "CUDA managed memory)");
  }
  t.device_type = dlpack::kDLCUDA;
  t.device_id = 1;
  try {
    (void)wrap_tensor(ctx, t, nullptr);
    ADD_FAILURE() << "another device's memory accepted";
  } catch (const device_mismatch& e) {
    EXPECT_STREQ(e.what(), "the DLPack tensor is on device 1, the context is for device 0; use Context(1)");
  }
  try {
    (void)wrap_tensor(ctx, tensor_over(mem, {4}, {2}), nullptr);  // every other element: gaps
    ADD_FAILURE() << "a tensor with gaps accepted";
  } catch (const invalid_argument& e) {
    EXPECT_STREQ(e.what(), "array data is non-contiguous");
  }
}

// ---- __cuda_array_interface__ views ----------------------------------------------

// A CAI of `shape` over `b`'s memory, `offset` bytes in (int32 elements).
cuda_array_interface cai_over(const buffer& b, std::vector<std::int64_t> shape,
                              std::optional<std::vector<std::int64_t>> strides = std::nullopt,
                              std::int64_t offset = 0) {
  cuda_array_interface c;
  c.version = 3;
  c.data = b.address() + static_cast<std::uintptr_t>(offset);
  c.typestr = "<i4";
  c.shape = std::move(shape);
  c.strides = std::move(strides);
  return c;
}

TEST(Tensor, LocateAsksTheDriverWhereTheMemoryIs) {
  const context ctx = context::get(0);
  const buffer mem = allocate_device(ctx, 256);
  std::optional<dlpack::DLDevice> where = locate_cuda_array_interface(read_cuda_array_interface(cai_over(mem, {8})));
  ASSERT_TRUE(where.has_value());
  EXPECT_EQ(where->device_type, dlpack::kDLCUDA);
  EXPECT_EQ(where->device_id, 0);
  // Negative strides: the data pointer is the last element's, still this memory.
  where = locate_cuda_array_interface(read_cuda_array_interface(cai_over(mem, {8}, {{-4}}, 28)));
  ASSERT_TRUE(where.has_value());
  EXPECT_EQ(where->device_type, dlpack::kDLCUDA);

  const buffer pinned = allocate_pinned(ctx, 256);
  where = locate_cuda_array_interface(read_cuda_array_interface(cai_over(pinned, {8})));
  ASSERT_TRUE(where.has_value());
  EXPECT_EQ(where->device_type, dlpack::kDLCUDAHost);
  EXPECT_EQ(where->device_id, 0);

  // An empty tensor covers no memory (its pointer may even be null).
  cuda_array_interface empty = cai_over(mem, {0, 4});
  empty.data = 0;
  EXPECT_FALSE(locate_cuda_array_interface(read_cuda_array_interface(empty)).has_value());

  // Ordinary host memory: the driver does not know it, the device cannot reach it.
  std::vector<std::int32_t> host(8);
  cuda_array_interface h = cai_over(mem, {8});
  h.data = reinterpret_cast<std::uintptr_t>(host.data());
  try {
    (void)locate_cuda_array_interface(read_cuda_array_interface(h));
    ADD_FAILURE() << "pageable host memory located";
  } catch (const cuda_error& e) {
    EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_VALUE);
    EXPECT_NE(std::string(e.what()).find("is not memory the CUDA driver knows (ordinary host memory"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)wrap_cuda_array_interface(h, nullptr, ctx), cuda_error);
}

TEST(Tensor, LocateNamesTheDeviceOfTheMemory) {
  CUARROW_REQUIRE_DEVICES(2);
  const buffer on1 = allocate_device(context::get(1), 64);
  const std::optional<dlpack::DLDevice> where =
      locate_cuda_array_interface(read_cuda_array_interface(cai_over(on1, {16})));
  ASSERT_TRUE(where.has_value());
  EXPECT_EQ(where->device_type, dlpack::kDLCUDA);
  EXPECT_EQ(where->device_id, 1);
}

TEST(Tensor, WrapCudaArrayInterfaceViewsTheExactSpan) {
  const context ctx = context::get(0);
  const buffer mem = allocate_device(ctx, 4096);
  auto owner = std::make_shared<int>(1);
  std::weak_ptr<int> alive = owner;
  // Fortran order, 3x4 int32: 48 bytes without gaps, from 16 bytes in.
  buffer view = wrap_cuda_array_interface(cai_over(mem, {3, 4}, {{4, 12}}, 16), std::move(owner), ctx);
  EXPECT_EQ(view.address(), mem.address() + 16);
  EXPECT_EQ(view.size(), 48);
  EXPECT_EQ(view.type(), device_type::cuda);
  EXPECT_EQ(view.device_id(), 0);
  EXPECT_TRUE(view.is_mutable());
  EXPECT_FALSE(alive.expired());
  view = buffer();
  EXPECT_TRUE(alive.expired()) << "the view released the producer's owner";

  // Negative strides, read-only: the view starts at the lowest element.
  cuda_array_interface rev = cai_over(mem, {4}, {{-4}}, 12);
  rev.read_only = true;
  view = wrap_cuda_array_interface(rev, nullptr, ctx);
  EXPECT_EQ(view.address(), mem.address());
  EXPECT_EQ(view.size(), 16);
  EXPECT_FALSE(view.is_mutable());

  // A dimension of extent 1 steps nowhere: its stride does not matter.
  EXPECT_EQ(wrap_cuda_array_interface(cai_over(mem, {1, 5}, {{999, 4}}), nullptr, ctx).size(), 20);

  // Zero-size: an empty buffer of the context, the owner not kept.
  owner = std::make_shared<int>(2);
  alive = owner;
  view = wrap_cuda_array_interface(cai_over(mem, {0, 5}, {{20, 4}}), std::move(owner), ctx);
  EXPECT_EQ(view.size(), 0);
  EXPECT_EQ(view.type(), device_type::cuda);
  EXPECT_TRUE(alive.expired());

  // Gaps (every other element) and overlaps (stride 0) are refused.
  for (const std::vector<std::int64_t>& strides : {std::vector<std::int64_t>{8}, std::vector<std::int64_t>{0}}) {
    try {
      (void)wrap_cuda_array_interface(cai_over(mem, {12}, strides), nullptr, ctx);
      ADD_FAILURE() << "a tensor with gaps or overlaps accepted";
    } catch (const invalid_argument& e) {
      EXPECT_STREQ(e.what(), "array data is non-contiguous");
    }
  }
  // The reader's refusals come first.
  cuda_array_interface masked = cai_over(mem, {4});
  masked.has_mask = true;
  EXPECT_THROW((void)wrap_cuda_array_interface(masked, nullptr, ctx), invalid_argument);

  // Pinned memory is viewed at its device address.
  const buffer pinned = allocate_pinned(ctx, 64);
  view = wrap_cuda_array_interface(cai_over(pinned, {16}), nullptr);
  EXPECT_EQ(view.address(), ctx.get_device_address(reinterpret_cast<const void*>(pinned.address())));
  EXPECT_EQ(view.type(), device_type::cuda_host);
}

TEST(Tensor, WrapCudaArrayInterfaceChoosesOrChecksTheDevice) {
  CUARROW_REQUIRE_DEVICES(2);
  const buffer on1 = allocate_device(context::get(1), 64);
  // No context given: the memory's device.
  const buffer view = wrap_cuda_array_interface(cai_over(on1, {16}), nullptr);
  EXPECT_EQ(view.device_id(), 1);
  EXPECT_EQ(view.address(), on1.address());
  try {
    (void)wrap_cuda_array_interface(cai_over(on1, {16}), nullptr, context::get(0));
    ADD_FAILURE() << "another device's memory accepted";
  } catch (const device_mismatch& e) {
    EXPECT_STREQ(e.what(),
                 "__cuda_array_interface__: the data is memory of device 1, the context is for device 0; use "
                 "Context(1)");
  }
  // An empty tensor is on whichever device was asked for.
  EXPECT_EQ(wrap_cuda_array_interface(cai_over(on1, {0}), nullptr, context::get(1)).device_id(), 1);
  EXPECT_EQ(wrap_cuda_array_interface(cai_over(on1, {0}), nullptr).device_id(), 0);
}

TEST(Tensor, WrapCudaArrayInterfaceWaitsForTheProducersStream) {
  const context ctx = context::get(0);
  const buffer mem = allocate_device(ctx, 1 << 16);
  fill(mem, 0, mem.size(), 0);
  const stream producer(ctx);  // non-blocking: the legacy default stream does not wait for it by itself
  std::vector<std::uint8_t> got(static_cast<std::size_t>(mem.size()));
  {
    const cuarrow_test::scoped_op_delay slow(20000);
    fill_async(mem, 0, mem.size(), 0xab, producer);
    cuda_array_interface c = cai_over(mem, {mem.size() / 4});
    c.stream = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(producer.handle()));
    const buffer view = wrap_cuda_array_interface(c, nullptr, ctx, stream_view());
    copy_to_host(got.data(), view, 0, view.size());  // on the legacy default stream, the consumer
  }
  EXPECT_EQ(got, std::vector<std::uint8_t>(got.size(), 0xab)) << "the copy ran before the producer's fill";

  // Without a consumer stream the host waits: the view is then safe on any
  // stream, even a non-blocking one that nothing orders after the producer.
  const stream consumer(ctx);
  {
    const cuarrow_test::scoped_op_delay slow(20000);
    fill_async(mem, 0, mem.size(), 0x5e, producer);
    cuda_array_interface c = cai_over(mem, {mem.size() / 4});
    c.stream = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(producer.handle()));
    const buffer view = wrap_cuda_array_interface(c, nullptr, ctx);
    copy_to_host(got.data(), view, 0, view.size(), consumer);
  }
  EXPECT_EQ(got, std::vector<std::uint8_t>(got.size(), 0x5e)) << "the copy ran before the producer's fill";

  // A consumer stream given waits without blocking the host.
  {
    const cuarrow_test::scoped_op_delay slow(20000);
    fill_async(mem, 0, mem.size(), 0xcd, producer);
    cuda_array_interface c = cai_over(mem, {mem.size() / 4});
    c.stream = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(producer.handle()));
    const buffer view = wrap_cuda_array_interface(c, nullptr, ctx, consumer);
    copy_to_host(got.data(), view, 0, view.size(), consumer);
  }
  EXPECT_EQ(got, std::vector<std::uint8_t>(got.size(), 0xcd));

  // Stream 1 (the legacy default stream) is the consumer's own: accepted;
  // 0 and negative numbers are no streams.
  cuda_array_interface c = cai_over(mem, {4});
  c.stream = 1;
  EXPECT_EQ(wrap_cuda_array_interface(c, nullptr, ctx).size(), 16);
  for (std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}}) {
    c.stream = bad;
    EXPECT_THROW((void)wrap_cuda_array_interface(c, nullptr, ctx), invalid_argument) << bad;
  }
}

TEST(Tensor, ExportDescribesPartOfABuffer) {
  const context ctx = context::get(0);
  const buffer mem = allocate_device(ctx, 256);
  const std::vector<std::int64_t> shape{3, 4};
  dlpack::DLManagedTensorVersioned* v =
      export_dlpack_versioned(mem.as_read_only(), 16, {dlpack::kDLFloat, 32, 1}, shape, true);
  const dlpack::DLTensor& t = v->dl_tensor;
  EXPECT_EQ(v->version.major, 1u);
  EXPECT_EQ(v->flags, dlpack::kFlagReadOnly | dlpack::kFlagIsCopied);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data), mem.address() + 16);
  EXPECT_EQ(t.device.device_type, dlpack::kDLCUDA);
  EXPECT_EQ(t.device.device_id, 0);
  ASSERT_EQ(t.ndim, 2);
  EXPECT_EQ(t.shape[0], 3);
  EXPECT_EQ(t.shape[1], 4);
  EXPECT_EQ(t.strides[0], 4);
  EXPECT_EQ(t.strides[1], 1);
  EXPECT_EQ(t.byte_offset, 0u);
  // What the core's reader makes of it: the 48 bytes from offset 16.
  const tensor_info back = read_dlpack(*v);
  EXPECT_EQ(back.span_length, 48);
  EXPECT_TRUE(back.c_contiguous);
  v->deleter(v);

  dlpack::DLManagedTensor* legacy =
      export_dlpack(allocate_pinned(ctx, 8), 0, {dlpack::kDLUInt, 8, 1}, std::vector<std::int64_t>{8});
  EXPECT_EQ(legacy->dl_tensor.device.device_type, dlpack::kDLCUDAHost);
  EXPECT_EQ(legacy->dl_tensor.shape[0], 8);
  legacy->deleter(legacy);
}

TEST(Tensor, ExportRefusesWhatItCannotDescribe) {
  const buffer mem = allocate_device(context::get(0), 64);
  auto refusal_of = [&](std::int64_t offset, dlpack::DLDataType dtype, std::vector<std::int64_t> shape) {
    try {
      dlpack::DLManagedTensor* t = export_dlpack(mem, offset, dtype, shape);
      t->deleter(t);
    } catch (const out_of_range& e) {
      return "out_of_range: " + std::string(e.what());
    } catch (const invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const dlpack::DLDataType f32{dlpack::kDLFloat, 32, 1};
  EXPECT_EQ(refusal_of(0, f32, {16}), "(accepted)");
  EXPECT_EQ(refusal_of(4, f32, {16}),
            "out_of_range: a DLPack tensor of 64 bytes at offset 4 overruns a buffer of 64 bytes");
  EXPECT_EQ(refusal_of(-1, f32, {1}),
            "out_of_range: a DLPack tensor of 4 bytes at offset -1 overruns a buffer of 64 bytes");
  EXPECT_EQ(refusal_of(64, f32, {0}), "(accepted)") << "an empty tensor at the end";
  EXPECT_EQ(refusal_of(0, f32, {}), "a DLPack export has 1 to 64 dimensions, not 0");
  EXPECT_EQ(refusal_of(0, f32, {2, -1}), "negative extent -1 in a DLPack export");
  EXPECT_EQ(refusal_of(0, {dlpack::kDLBool, 1, 1}, {8}),
            "bad DLPack element type: 1 bits, 1 lanes (whole bytes, one lane)");
  EXPECT_EQ(refusal_of(0, {dlpack::kDLFloat, 32, 2}, {8}),
            "bad DLPack element type: 32 bits, 2 lanes (whole bytes, one lane)");
  const std::int64_t big = std::int64_t{1} << 40;
  EXPECT_EQ(refusal_of(0, f32, {big, big}), "a DLPack export's size overflows 64 bits");
}

}  // namespace
