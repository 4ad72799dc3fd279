// Tensors and buffers (tensor.hpp): a view of a checked tensor's bytes, and
// DLPack tensors over a buffer's bytes for export.
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "buffer_factory.hpp"
#include "cuarrow/error.hpp"
#include "cuarrow/tensor.hpp"
#include "runtime/runtime.hpp"

namespace cuarrow {
namespace {

// Who describes the tensor, for messages.
struct tensor_source {
  const char* noun;       // "a DLPack tensor": what cannot be viewed
  const char* on_device;  // "the DLPack tensor is on": followed by " device N"
  const char* name;       // "DLPack tensor": what the view's errors name
};
constexpr tensor_source dlpack_source{"a DLPack tensor", "the DLPack tensor is on", "DLPack tensor"};
constexpr tensor_source cai_source{"a __cuda_array_interface__", "__cuda_array_interface__: the data is memory of",
                                   "__cuda_array_interface__"};

// The one view of a checked, located tensor's span (wrap_tensor).
buffer view_of(const context& ctx, const tensor_info& t, std::shared_ptr<const void> owner, const tensor_source& src) {
  using namespace dlpack;
  const std::int32_t type = t.device_type;
  if (type != kDLCUDA && type != kDLCUDAHost && type != kDLCUDAManaged) {
    throw memory_kind_error(std::string("cannot create device buffer view from ") + src.noun + " on device type " +
                            std::to_string(type) + " (only CUDA, CUDA host and CUDA managed memory)");
  }
  if (type == kDLCUDA && t.device_id != ctx.device_number()) {
    throw device_mismatch(std::string(src.on_device) + " device " + std::to_string(t.device_id) +
                          ", the context is for device " + std::to_string(ctx.device_number()) + "; use Context(" +
                          std::to_string(t.device_id) + ")");
  }
  if (!t.contiguous) throw invalid_argument("array data is non-contiguous");
  if (t.span_length == 0) return allocate_device(ctx, 0);
  // span_offset <= 0: the lowest byte the elements cover (the readers keep
  // data + span_offset inside the address space).
  std::uintptr_t address = t.data - static_cast<std::uintptr_t>(-t.span_offset);
  if (type == kDLCUDAHost) address = ctx.get_device_address(reinterpret_cast<const void*>(address));
  return detail::wrap_device_as(src.name, ctx, address, t.span_length, std::move(owner), !t.read_only);
}

}  // namespace

buffer wrap_tensor(const context& ctx, const tensor_info& t, std::shared_ptr<const void> owner) {
  return view_of(ctx, t, std::move(owner), dlpack_source);
}

namespace {

// The owner of a managed tensor from_dlpack imports: calls its deleter
// (through `run`, when given) once the import has taken it.
template <class Managed>
struct managed_owner {
  Managed* t;
  deleter_call run;
  bool taken = false;
  ~managed_owner() {
    if (!taken || t->deleter == nullptr) return;
    const std::function<void()> call = [m = t] { m->deleter(m); };
    run ? run(call) : call();
  }
};

template <class Managed>
buffer import_managed(const context& ctx, Managed* t, const tensor_info& info, deleter_call run) {
  auto owner = std::make_shared<managed_owner<Managed>>(managed_owner<Managed>{t, std::move(run)});
  buffer view = wrap_tensor(ctx, info, owner);
  owner->taken = true;
  return view;
}

}  // namespace

buffer from_dlpack(const context& ctx, dlpack::DLManagedTensorVersioned* t, deleter_call run) {
  if (t == nullptr) throw invalid_argument("from_dlpack: a null DLManagedTensorVersioned");
  return import_managed(ctx, t, read_dlpack(*t), std::move(run));
}

buffer from_dlpack(const context& ctx, dlpack::DLManagedTensor* t, deleter_call run) {
  if (t == nullptr) throw invalid_argument("from_dlpack: a null DLManagedTensor");
  return import_managed(ctx, t, read_dlpack(*t), std::move(run));
}

std::optional<dlpack::DLDevice> locate_cuda_array_interface(const tensor_info& t) {
  if (t.span_length == 0) return std::nullopt;
  const detail::pointer_attributes a = detail::query_pointer(t.data);
  if (!a.known) {
    throw cuda_error(CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "cuPointerGetAttributes",
                     "__cuda_array_interface__: address " + detail::hex_address(t.data) +
                         " is not memory the CUDA driver knows (ordinary host memory, or no memory): the device "
                         "cannot reach it; copy the data to the device, or pin it, first");
  }
  if (a.managed) return dlpack::DLDevice{dlpack::kDLCUDAManaged, a.device >= 0 ? a.device : 0};
  if (a.memory_type == CU_MEMORYTYPE_HOST) return dlpack::DLDevice{dlpack::kDLCUDAHost, 0};
  return dlpack::DLDevice{dlpack::kDLCUDA, a.device};
}

buffer wrap_cuda_array_interface(const cuda_array_interface& cai, std::shared_ptr<const void> owner,
                                 const std::optional<context>& ctx, std::optional<stream_view> consumer) {
  tensor_info t = read_cuda_array_interface(cai);
  const std::optional<dlpack::DLDevice> where = locate_cuda_array_interface(t);
  const context chosen =
      ctx ? *ctx : context::get(where && where->device_type != dlpack::kDLCUDAHost ? where->device_id : 0);
  if (!where) return allocate_device(chosen, 0);  // empty: no memory to view, no work to wait for
  t.device_type = where->device_type;
  t.device_id = where->device_id;
  buffer view = view_of(chosen, t, std::move(owner), cai_source);
  if (cai.stream) {
    // The producer's work on its stream must be done before the data is
    // read: order the consumer's stream after it (stream 1 on the legacy
    // default consumer is the same stream: nothing to do), or, with no
    // consumer stream, wait on the host.
    const stream_view producer(reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(*cai.stream)));
    if (consumer) {
      consumer->wait_for(producer, chosen);
    } else {
      producer.synchronize(chosen);
    }
  }
  return view;
}

namespace {

// The manager of an exported tensor: a handle of the memory, and the shape
// and strides the DLTensor points to.
struct export_state {
  buffer buf;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements, compact row-major
};

dlpack::DLDevice dlpack_device(const buffer& b) {
  switch (b.type()) {
    case device_type::cuda: return {dlpack::kDLCUDA, b.device_id()};
    case device_type::cuda_host: return {dlpack::kDLCUDAHost, 0};
    case device_type::cuda_managed: return {dlpack::kDLCUDAManaged, b.device_id()};
    default: return {dlpack::kDLCPU, 0};
  }
}

// The checked state and DLTensor of an export (see export_dlpack).
std::unique_ptr<export_state> describe(const buffer& b, std::int64_t byte_offset, dlpack::DLDataType dtype,
                                       std::span<const std::int64_t> shape, dlpack::DLTensor& t) {
  if (shape.empty() || shape.size() > static_cast<std::size_t>(max_tensor_ndim)) {
    throw invalid_argument("a DLPack export has 1 to " + std::to_string(max_tensor_ndim) + " dimensions, not " +
                           std::to_string(shape.size()));
  }
  if (dtype.bits == 0 || dtype.bits % 8 != 0 || dtype.lanes != 1) {
    throw invalid_argument("bad DLPack element type: " + std::to_string(dtype.bits) + " bits, " +
                           std::to_string(dtype.lanes) + " lanes (whole bytes, one lane)");
  }
  std::int64_t count = 1;
  for (std::int64_t n : shape) {
    if (n < 0) throw invalid_argument("negative extent " + std::to_string(n) + " in a DLPack export");
    if (__builtin_mul_overflow(count, n, &count)) throw invalid_argument("a DLPack export's size overflows 64 bits");
  }
  std::int64_t nbytes = 0;
  if (__builtin_mul_overflow(count, std::int64_t{dtype.bits / 8}, &nbytes)) {
    throw invalid_argument("a DLPack export's size overflows 64 bits");
  }
  if (byte_offset < 0 || (count > 0 && (byte_offset > b.size() || nbytes > b.size() - byte_offset))) {
    throw out_of_range("a DLPack tensor of " + std::to_string(nbytes) + " bytes at offset " +
                       std::to_string(byte_offset) + " overruns a buffer of " + std::to_string(b.size()) + " bytes");
  }
  auto st = std::make_unique<export_state>();
  st->buf = b;
  st->shape.assign(shape.begin(), shape.end());
  st->strides.assign(shape.size(), 1);
  for (std::size_t i = shape.size() - 1; i > 0; --i) {
    if (__builtin_mul_overflow(st->strides[i], shape[i], &st->strides[i - 1])) {
      throw invalid_argument("a DLPack export's strides overflow 64 bits");
    }
  }
  t.data = reinterpret_cast<void*>(count > 0 ? b.address() + static_cast<std::uintptr_t>(byte_offset) : b.address());
  t.device = dlpack_device(b);
  t.ndim = static_cast<std::int32_t>(shape.size());
  t.dtype = dtype;
  t.shape = st->shape.data();
  t.strides = st->strides.data();
  t.byte_offset = 0;  // the offset is in data, which every consumer reads right
  return st;
}

template <class Managed>
void delete_managed(Managed* self) {
  delete static_cast<export_state*>(self->manager_ctx);
  delete self;
}

}  // namespace

dlpack::DLManagedTensorVersioned* export_dlpack_versioned(const buffer& b, std::int64_t byte_offset,
                                                          dlpack::DLDataType dtype, std::span<const std::int64_t> shape,
                                                          bool copied) {
  auto t = std::make_unique<dlpack::DLManagedTensorVersioned>();
  t->version = {1, 0};
  t->flags = (b.is_mutable() ? 0 : dlpack::kFlagReadOnly) | (copied ? dlpack::kFlagIsCopied : 0);
  t->manager_ctx = describe(b, byte_offset, dtype, shape, t->dl_tensor).release();
  t->deleter = delete_managed<dlpack::DLManagedTensorVersioned>;
  return t.release();
}

dlpack::DLManagedTensor* export_dlpack(const buffer& b, std::int64_t byte_offset, dlpack::DLDataType dtype,
                                       std::span<const std::int64_t> shape) {
  auto t = std::make_unique<dlpack::DLManagedTensor>();
  t->manager_ctx = describe(b, byte_offset, dtype, shape, t->dl_tensor).release();
  t->deleter = delete_managed<dlpack::DLManagedTensor>;
  return t.release();
}

}  // namespace cuarrow
