#include "cuarrow/buffer.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <vector>

#include "buffer_factory.hpp"
#include "cuarrow/error.hpp"
#include "cuarrow/memory_resource.hpp"
#include "runtime/runtime.hpp"

namespace cuarrow {
namespace {

// Owners of memory cuarrow allocated.  Each holds what it depends on (its
// context, its resource) and frees on destruction, reporting failures.

struct device_allocation {
  device_allocation(context c, std::shared_ptr<device_memory_resource> r, std::uintptr_t a, std::int64_t n,
                    stream_view s)
      : ctx(std::move(c)), resource(std::move(r)), address(a), size(n), stream(s) {
    if (!s.is_default()) {
      std::shared_lock lock(detail::stream_registry_mutex());
      cuarrow_stream = detail::stream_is_live(s.handle());
    }
  }
  device_allocation(const device_allocation&) = delete;
  device_allocation& operator=(const device_allocation&) = delete;

  context ctx;
  std::shared_ptr<device_memory_resource> resource;
  std::uintptr_t address;
  std::int64_t size;
  stream_view stream;
  bool cuarrow_stream = false;  // allocated on a stream cuarrow created

  ~device_allocation() {
    if (detail::shutting_down()) return;
    try {
      scoped_context guard(ctx);
      detail::with_free_stream(stream.handle(), cuarrow_stream, [&](CUstream on) {
        resource->deallocate(address, size, on == stream.handle() ? stream : stream_view());
      });
    } catch (const std::exception& e) {
      detail::warn(std::string("freeing device memory: ") + e.what());
    }
    ctx.state()->bytes_allocated.fetch_sub(size);
  }
};

// Pinned memory cuarrow mapped and registered (runtime/page_locked.hpp): it stays
// readable by host code even if the context goes away first.
struct pinned_allocation {
  pinned_allocation(context c, void* d, std::int64_t n) : ctx(std::move(c)), data(d), size(n) {}
  pinned_allocation(const pinned_allocation&) = delete;
  pinned_allocation& operator=(const pinned_allocation&) = delete;

  context ctx;
  void* data;
  std::int64_t size;

  ~pinned_allocation() { detail::free_page_locked(data, static_cast<std::size_t>(size), ctx.handle()); }
};

// Caller-owned memory registered by register_host: unregistered before the
// caller's owner is released.
struct host_registration {
  host_registration(context c, void* d, std::shared_ptr<const void> o)
      : ctx(std::move(c)), data(d), owner(std::move(o)) {}
  host_registration(const host_registration&) = delete;
  host_registration& operator=(const host_registration&) = delete;

  context ctx;
  void* data;
  std::shared_ptr<const void> owner;

  ~host_registration() {
    if (detail::unregister_page_locked(data, ctx.handle())) return;
    // The driver still has the pages pinned: releasing the caller's owner
    // could free or reuse memory the driver (and DMAs) may still touch, and
    // a later registration of the same range would fail.  Keep the owner
    // alive for good instead (reported by unregister_page_locked).
    detail::warn("register_host: keeping the owner of " + std::to_string(reinterpret_cast<std::uintptr_t>(data)) +
                 " alive for good: its pages could not be unregistered");
    static auto* kept = new std::vector<std::shared_ptr<const void>>;  // never destroyed
    static std::mutex kept_mutex;
    try {
      std::lock_guard lock(kept_mutex);
      kept->push_back(std::move(owner));
    } catch (...) {
      new std::shared_ptr<const void>(std::move(owner));  // NOLINT: no memory to record it: leak it anyway
    }
  }
};

void check_size(std::int64_t size, const char* what) {
  if (size < 0) throw invalid_argument(std::string(what) + ": negative size " + std::to_string(size));
}

}  // namespace

const char* to_string(device_type t) noexcept {
  switch (t) {
    case device_type::cpu: return "cpu";
    case device_type::cuda: return "cuda";
    case device_type::cuda_host: return "cuda_host";
    case device_type::cuda_managed: return "cuda_managed";
  }
  return "unknown";
}

buffer::buffer(fields f)
    : address_(f.address),
      size_(f.size),
      type_(f.type),
      device_id_(f.device_id),
      mutable_(f.is_mutable),
      context_(std::move(f.ctx)),
      owner_(std::move(f.owner)),
      parent_(std::move(f.parent)),
      free_stream_(f.free_stream),
      stream_ordered_(f.stream_ordered),
      owner_is_allocation_(f.owner_is_allocation && owner_ != nullptr) {}

buffer buffer::slice(std::int64_t offset, std::int64_t length) const {
  if (offset < 0 || offset > size_) {
    throw out_of_range("slice offset " + std::to_string(offset) + " is outside the buffer of " + std::to_string(size_) +
                       " bytes");
  }
  if (length == -1) length = size_ - offset;
  if (length < 0 || length > size_ - offset) {
    throw out_of_range("slice of " + std::to_string(length) + " bytes at offset " + std::to_string(offset) +
                       " overruns the buffer of " + std::to_string(size_) + " bytes");
  }
  fields f{address_ + static_cast<std::uintptr_t>(offset),
           length,
           type_,
           device_id_,
           mutable_,
           context_,
           owner_,
           std::make_shared<const buffer>(*this),
           free_stream_,
           stream_ordered_,
           owner_is_allocation_};
  return detail::buffer_factory::make(std::move(f));
}

namespace ranges {
namespace {

void check_count(std::int64_t nbytes, const char* name) {
  if (nbytes < -1) {
    throw argument_out_of_range(std::string(name) + " argument must be non-negative (or -1 for all), got " +
                                std::to_string(nbytes));
  }
}

void check_position(std::int64_t size, std::int64_t position) {
  if (position < 0 || position > size) throw argument_out_of_range("position argument is out-of-range");
}

}  // namespace

std::int64_t read_count(std::int64_t size, std::int64_t position, std::int64_t nbytes, std::int64_t dst_size) {
  check_count(nbytes, "nbytes");
  check_position(size, position);
  const std::int64_t available = size - position;
  if (dst_size < 0) {
    if (nbytes > available) throw argument_out_of_range("requested more to copy than available from device buffer");
    return nbytes == -1 ? available : nbytes;
  }
  if (nbytes == -1) return std::min(available, dst_size);
  if (nbytes > dst_size) throw argument_out_of_range("requested copy does not fit into host buffer");
  if (nbytes > available) throw argument_out_of_range("requested more to copy than available from device buffer");
  return nbytes;
}

std::int64_t write_count(std::int64_t size, std::int64_t position, std::int64_t nbytes, std::int64_t src_size,
                         bool src_is_host) {
  check_count(nbytes, "nbytes");
  check_position(size, position);
  const std::int64_t room = size - position;
  if (nbytes == -1) return std::min(room, src_size);
  if (nbytes > src_size) {
    throw argument_out_of_range(std::string("requested more to copy than available from ") +
                                (src_is_host ? "host" : "device") + " buffer");
  }
  if (nbytes > room) throw argument_out_of_range("requested more to copy than available in device buffer");
  return nbytes;
}

std::int64_t source_count(std::int64_t src_size, std::int64_t offset, std::int64_t size) {
  check_count(size, "size");
  // pyarrow refuses an offset at the end of a non-empty source.
  if (offset < 0 || offset > src_size || (src_size != 0 && offset == src_size)) {
    throw argument_out_of_range("offset argument is out-of-range");
  }
  if (size == -1) return src_size - offset;
  if (size > src_size - offset) throw argument_out_of_range("requested larger slice than available in device buffer");
  return size;
}

std::int64_t slice_length(std::int64_t size, std::int64_t offset, std::optional<std::int64_t> length) {
  if (offset < 0 || (size != 0 && offset >= size) || (size == 0 && offset != 0)) {
    throw argument_out_of_range("offset argument is out-of-range");
  }
  if (!length) return size - offset;
  if (*length < 0) throw argument_out_of_range("length argument must be non-negative, got " + std::to_string(*length));
  return std::min(*length, size - offset);
}

}  // namespace ranges

buffer buffer::as_read_only() const {
  buffer b = *this;
  b.mutable_ = false;
  return b;
}

const std::byte* buffer::host_data() const {
  if (!is_host_accessible()) {
    throw host_access_error("this buffer holds " + std::string(to_string(type_)) + " memory of device " +
                            std::to_string(device_id_) +
                            ", which host code cannot read; copy it to the host first (copy_to_host)");
  }
  return reinterpret_cast<const std::byte*>(address_);
}

std::byte* buffer::mutable_host_data() const {
  const std::byte* p = host_data();
  if (!mutable_) throw read_only("this buffer is read-only");
  return const_cast<std::byte*>(p);
}

std::string buffer::location() const {
  std::string where = to_string(type_);
  if (device_id_ >= 0) where += ":" + std::to_string(device_id_);
  return where;
}

std::string buffer::describe() const {
  return std::string("cuarrow.buffer(address=") + detail::hex_address(address_) + ", size=" + std::to_string(size_) +
         ", device=" + location() + (mutable_ ? ", mutable)" : ", read-only)");
}

buffer allocate_device(const context& ctx, std::int64_t size, stream_view s,
                       std::shared_ptr<device_memory_resource> resource) {
  check_size(size, "allocate_device");
  detail::collect_deferred_releases();
  buffer::fields f = detail::buffer_factory::fields_of(ctx, device_type::cuda, size);
  f.free_stream = s;
  if (size == 0) return detail::buffer_factory::make(std::move(f));
  if (!resource) resource = ctx.memory_resource();
  const int sd = s.device_number();
  if (sd >= 0 && sd != ctx.device_number()) {
    throw device_mismatch("allocate_device: the stream belongs to device " + std::to_string(sd) +
                          ", the memory is for device " + std::to_string(ctx.device_number()));
  }
  scoped_context guard(ctx);
  std::uintptr_t address = resource->allocate(size, s);
  ctx.state()->bytes_allocated.fetch_add(size);
  stream_view home = s;
  bool foreign = false;
  if (!s.is_default()) {
    std::shared_lock lock(detail::stream_registry_mutex());
    foreign = !detail::stream_is_live(s.handle());
  }
  if (foreign) {
    // A foreign stream (CuPy, PyTorch...) may be destroyed before the buffer,
    // and freeing on a destroyed stream is undefined.  Re-home the buffer on
    // the legacy default stream: it waits here for the allocation on `s`,
    // and the memory is freed there.  (cuarrow's own copies on `s` keep the
    // buffer alive until `s` passes them.)
    try {
      detail::order_after(*ctx.state(), s.handle(), nullptr, /*producer_may_be_retired=*/false);
    } catch (...) {
      resource->deallocate(address, size, s);
      ctx.state()->bytes_allocated.fetch_sub(size);
      throw;
    }
    home = stream_view();
    f.free_stream = home;
  }
  auto owner = std::make_shared<device_allocation>(ctx, std::move(resource), address, size, home);
  f.address = address;
  f.owner = std::move(owner);
  f.stream_ordered = true;
  f.owner_is_allocation = true;
  return detail::buffer_factory::make(std::move(f));
}

buffer allocate_pinned(const context& ctx, std::int64_t size) {
  check_size(size, "allocate_pinned");
  buffer::fields f = detail::buffer_factory::fields_of(ctx, device_type::cuda_host, size);
  if (size == 0) return detail::buffer_factory::make(std::move(f));
  scoped_context guard(ctx);
  void* p = detail::allocate_page_locked(static_cast<std::size_t>(size), /*mapped=*/true);
  f.address = reinterpret_cast<std::uintptr_t>(p);
  try {
    f.owner = std::make_shared<pinned_allocation>(ctx, p, size);
  } catch (...) {
    detail::free_page_locked(p, static_cast<std::size_t>(size), ctx.handle());
    throw;
  }
  f.owner_is_allocation = true;
  return detail::buffer_factory::make(std::move(f));
}

buffer register_host(const context& ctx, void* data, std::int64_t size, std::shared_ptr<const void> owner,
                     bool is_mutable) {
  check_size(size, "register_host");
  if (data == nullptr && size > 0) throw invalid_argument("register_host: null pointer with a non-zero size");
  buffer::fields f = detail::buffer_factory::fields_of(ctx, device_type::cuda_host, size);
  f.address = reinterpret_cast<std::uintptr_t>(data);
  f.is_mutable = is_mutable;
  if (size == 0) {
    f.owner = std::move(owner);
    return detail::buffer_factory::make(std::move(f));
  }
  {
    scoped_context guard(ctx);
    detail::register_page_locked(data, static_cast<std::size_t>(size), /*mapped=*/true);
  }
  try {
    f.owner = std::make_shared<host_registration>(ctx, data, std::move(owner));
  } catch (...) {
    detail::unregister_page_locked(data, ctx.handle());
    throw;
  }
  return detail::buffer_factory::make(std::move(f));
}

buffer allocate_host(std::int64_t size) {
  check_size(size, "allocate_host");
  buffer::fields f;
  f.size = size;
  if (size == 0) return detail::buffer_factory::make(std::move(f));
  const std::size_t rounded = (static_cast<std::size_t>(size) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw std::bad_alloc();
  f.address = reinterpret_cast<std::uintptr_t>(p);
  f.owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  f.owner_is_allocation = true;
  return detail::buffer_factory::make(std::move(f));
}

buffer wrap_device(const context& ctx, std::uintptr_t address, std::int64_t size, std::shared_ptr<const void> owner,
                   bool is_mutable) {
  return detail::wrap_device_as("wrap_device", ctx, address, size, std::move(owner), is_mutable);
}

buffer detail::wrap_device_as(const char* what, const context& ctx, std::uintptr_t address, std::int64_t size,
                              std::shared_ptr<const void> owner, bool is_mutable, const char* role) {
  check_size(size, what);
  buffer::fields f = detail::buffer_factory::fields_of(ctx, device_type::cuda, size);
  f.address = address;
  f.is_mutable = is_mutable;
  f.owner = std::move(owner);
  if (size > 0) {
    // Ask the driver what the memory is: device memory of another device, or
    // host memory, must not be labelled as device memory of this one.
    scoped_context guard(ctx);
    const detail::pointer_attributes a = detail::query_pointer(address);
    detail::check_known_span(a, address, size, what, role);
    const int ordinal = a.device;
    if (a.known) {
      if (a.managed) {
        f.type = device_type::cuda_managed;
      } else if (a.memory_type == CU_MEMORYTYPE_HOST) {
        f.type = device_type::cuda_host;
      } else if (ordinal >= 0 && ordinal != ctx.device_number()) {
        throw device_mismatch(std::string(what) + ": address " + detail::hex_address(address) +
                              " is memory of device " + std::to_string(ordinal) + ", not of device " +
                              std::to_string(ctx.device_number()) + "; wrap it with context::get(" +
                              std::to_string(ordinal) + ")");
      }
    }
  }
  return detail::buffer_factory::make(std::move(f));
}

buffer wrap_host(const void* data, std::int64_t size, std::shared_ptr<const void> owner, bool is_mutable,
                 std::optional<context> pinned_ctx) {
  check_size(size, "wrap_host");
  if (data == nullptr && size > 0) throw invalid_argument("wrap_host: null pointer with a non-zero size");
  buffer::fields f;
  f.address = reinterpret_cast<std::uintptr_t>(data);
  f.size = size;
  f.is_mutable = is_mutable;
  f.owner = std::move(owner);
  if (pinned_ctx) {
    f.type = device_type::cuda_host;
    f.device_id = pinned_ctx->device_number();
    f.ctx = std::move(pinned_ctx);
  }
  return detail::buffer_factory::make(std::move(f));
}

}  // namespace cuarrow
