#include "cuarrow/context.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "context_state.hpp"
#include "cuarrow/driver.hpp"
#include "cuarrow/error.hpp"
#include "cuarrow/memory_resource.hpp"
#include "driver_table.hpp"
#include "runtime.hpp"

namespace cuarrow {
namespace detail {
namespace {

struct context_cache {
  std::mutex mutex;
  std::vector<std::shared_ptr<context_state>> primaries;  // index = device ordinal
};

context_cache& cache() {
  // Never destroyed: used from exit handlers.  The loader's exit handler
  // releases what it caches.
  static auto* c = [] {
    set_exit_hook(&release_cached_contexts);
    return new context_cache;
  }();
  return *c;
}

device_properties query_properties(int ordinal) {
  const driver_table& d = driver();
  CUdevice dev = 0;
  check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  device_properties p;
  p.ordinal = ordinal;
  char name[256] = {};
  check(d.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
  p.name = name;
  size_t total = 0;
  check(d.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
  p.total_memory = static_cast<std::int64_t>(total);
  auto attribute = [&](CUdevice_attribute a) {
    int v = 0;
    check(d.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
    return v;
  };
  p.compute_capability_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  p.compute_capability_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  p.unified_addressing = attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) != 0;
  p.memory_pools_supported = d.cuMemAllocAsync != nullptr && d.cuDeviceGetDefaultMemPool != nullptr &&
                             attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) != 0;
  char bus[64] = {};
  check(d.cuDeviceGetPCIBusId(bus, sizeof(bus) - 1, dev), "cuDeviceGetPCIBusId");
  p.pci_bus_id = bus;
  return p;
}

void check_ordinal(int ordinal) {
  int n = device_count();
  if (n == 0) {
    throw driver_error("no CUDA device found (driver " + driver().path + ")");
  }
  if (ordinal < 0 || ordinal >= n) {
    throw invalid_argument("Invalid CUDA device number " + std::to_string(ordinal) + " (should be between 0 and " +
                           std::to_string(n - 1) + ", inclusive)");
  }
}

std::shared_ptr<context_state> primary_state(int ordinal) {
  check_ordinal(ordinal);
  context_cache& c = cache();
  std::lock_guard lock(c.mutex);
  if (c.primaries.size() <= static_cast<std::size_t>(ordinal)) c.primaries.resize(ordinal + 1);
  auto& slot = c.primaries[ordinal];
  if (slot) return slot;
  const driver_table& d = driver();
  auto s = std::make_shared<context_state>();
  s->device = ordinal;
  s->properties = query_properties(ordinal);
  CUdevice dev = 0;
  check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  check(d.cuDevicePrimaryCtxRetain(&s->handle, dev), "cuDevicePrimaryCtxRetain");
  s->cu_device = dev;
  s->primary = true;
  s->owns_retain = true;
  slot = s;
  return s;
}

}  // namespace

context_state::~context_state() {
  if (shutting_down()) return;
  const driver_table* d = driver_if_loaded();
  if (d == nullptr) return;
  if (order_event != nullptr) {
    CUresult r = d->cuEventDestroy(order_event);
    if (r != CUDA_SUCCESS) warn_result(r, "cuEventDestroy");
  }
  if (side_stream != nullptr) {
    // Released by the driver once its copies are done.
    CUresult r = d->cuStreamDestroy(side_stream);
    if (r != CUDA_SUCCESS) warn_result(r, "cuStreamDestroy");
  }
  unload_gather(*this);
  if (!owns_retain) return;
  // The device handle the retain was made with: asking for it again here
  // could fail, and the retain would then never be released.
  const CUresult r = d->cuDevicePrimaryCtxRelease(cu_device);
  if (r != CUDA_SUCCESS) warn_result(r, "cuDevicePrimaryCtxRelease");
}

namespace {
bool is_legacy(CUstream s) { return s == nullptr || s == CU_STREAM_LEGACY; }
}  // namespace

void order_after(context_state& ctx, CUstream producer, CUstream waiter, bool producer_may_be_retired) {
  // The per-thread default stream is a different stream on every thread, so
  // equal handles prove nothing there; order anyway.
  if (producer == waiter && producer != CU_STREAM_PER_THREAD) return;
  if (is_legacy(producer) && is_legacy(waiter)) return;
  // A producer that is neither a default stream nor a live cuarrow stream is
  // a cuarrow stream destroyed since (buffers of foreign streams are re-homed
  // at allocation): its work finished before it was destroyed.
  std::shared_lock registry_lock(stream_registry_mutex());
  if (producer_may_be_retired && !is_legacy(producer) && producer != CU_STREAM_PER_THREAD &&
      !stream_is_live(producer)) {
    return;
  }
  const driver_table& d = driver();
  std::lock_guard lock(ctx.order_mutex);
  scoped_context guard(ctx.handle);
  if (ctx.order_event == nullptr) {
    check(d.cuEventCreate(&ctx.order_event, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  }
  check(d.cuEventRecord(ctx.order_event, producer), "cuEventRecord");
  stream_wait_event(waiter, ctx.order_event);
}

namespace {
struct release_hooks {
  std::mutex mutex;
  std::vector<void (*)() noexcept> fns;
};
release_hooks& hooks() {
  static auto* h = new release_hooks;  // never destroyed: used from exit handlers
  return *h;
}
}  // namespace

void on_release_contexts(void (*fn)() noexcept) {
  release_hooks& h = hooks();
  std::lock_guard lock(h.mutex);
  if (std::find(h.fns.begin(), h.fns.end(), fn) == h.fns.end()) h.fns.push_back(fn);
}

void release_cached_contexts() noexcept {
  std::vector<void (*)() noexcept> fns;
  {
    release_hooks& h = hooks();
    std::lock_guard lock(h.mutex);
    fns = h.fns;
  }
  for (auto it = fns.rbegin(); it != fns.rend(); ++it) (*it)();
  std::vector<std::shared_ptr<context_state>> dropped;
  {
    context_cache& c = cache();
    std::lock_guard lock(c.mutex);
    dropped.swap(c.primaries);
  }
  collect_deferred_releases();
  dropped.clear();  // releases outside the lock
}

}  // namespace detail

int device_count() {
  const detail::driver_table& d = detail::driver();
  if (d.no_device) return 0;
  int n = 0;
  CUresult r = d.cuDeviceGetCount(&n);
  if (r == CUDA_ERROR_NO_DEVICE) return 0;
  detail::check(r, "cuDeviceGetCount");
  return n;
}

device_properties get_device_properties(int ordinal) {
  detail::check_ordinal(ordinal);
  return detail::query_properties(ordinal);
}

context::context(std::shared_ptr<detail::context_state> state) noexcept : state_(std::move(state)) {}

context context::get(int device_number) { return context(detail::primary_state(device_number)); }

context context::wrap(CUcontext handle) {
  if (handle == nullptr) throw invalid_argument("context::wrap: the CUDA context handle is null");
  const detail::driver_table& d = detail::driver();
  CUdevice dev = 0;
  {
    scoped_context guard(handle);
    detail::check(d.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  }
  // CUdevice values are the ordinals for the driver API.
  const int ordinal = static_cast<int>(dev);
  unsigned int flags = 0;
  int active = 0;
  detail::check(d.cuDevicePrimaryCtxGetState(dev, &flags, &active), "cuDevicePrimaryCtxGetState");
  if (active != 0) {
    context primary = get(ordinal);
    if (primary.handle() == handle) return primary;
  }
  auto s = std::make_shared<detail::context_state>();
  s->device = ordinal;
  s->handle = handle;
  s->properties = detail::query_properties(ordinal);
  return context(std::move(s));
}

int context::device_number() const noexcept { return state_->device; }
CUcontext context::handle() const noexcept { return state_->handle; }
bool context::is_primary() const noexcept { return state_->primary; }
const device_properties& context::properties() const noexcept { return state_->properties; }

void context::synchronize() const {
  detail::collect_deferred_releases();
  scoped_context guard(*this);
  detail::check(detail::driver().cuCtxSynchronize(), "cuCtxSynchronize");
  detail::collect_deferred_releases();
}

std::int64_t context::bytes_allocated() const noexcept { return state_->bytes_allocated.load(); }

transfer_statistics context::transfer_stats() const noexcept {
  const detail::context_state& c = *state_;
  transfer_statistics t;
  t.host_to_device_bytes = c.h2d_bytes.load();
  t.device_to_host_bytes = c.d2h_bytes.load();
  t.device_to_device_bytes = c.d2d_bytes.load();
  t.host_to_device_seconds = static_cast<double>(c.h2d_ns.load()) * 1e-9;
  t.device_to_host_seconds = static_cast<double>(c.d2h_ns.load()) * 1e-9;
  t.device_to_device_seconds = static_cast<double>(c.d2d_ns.load()) * 1e-9;
  t.staged_bytes = c.staged_bytes.load();
  t.copies = c.copies.load();
  return t;
}

void context::reset_transfer_stats() const noexcept {
  detail::context_state& c = *state_;
  for (auto* a :
       {&c.h2d_bytes, &c.d2h_bytes, &c.d2d_bytes, &c.staged_bytes, &c.copies, &c.h2d_ns, &c.d2h_ns, &c.d2d_ns}) {
    a->store(0);
  }
}

std::int64_t context::free_memory() const {
  scoped_context guard(*this);
  size_t free_bytes = 0;
  size_t total = 0;
  detail::check(detail::driver().cuMemGetInfo(&free_bytes, &total), "cuMemGetInfo");
  return static_cast<std::int64_t>(free_bytes);
}

std::uintptr_t context::get_device_address(const void* host_pointer) const {
  scoped_context guard(*this);
  CUdeviceptr out = 0;
  detail::check(detail::driver().cuPointerGetAttribute(&out, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                                       reinterpret_cast<CUdeviceptr>(host_pointer)),
                "cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_DEVICE_POINTER)");
  return static_cast<std::uintptr_t>(out);
}

std::shared_ptr<device_memory_resource> context::memory_resource() const {
  std::lock_guard lock(state_->mutex);
  if (!state_->resource) state_->resource = make_default_resource(*this);
  return state_->resource;
}

void context::set_memory_resource(std::shared_ptr<device_memory_resource> resource) const {
  if (!resource) resource = make_default_resource(*this);
  std::lock_guard lock(state_->mutex);
  state_->resource = std::move(resource);
}

std::string context::gather_status() const { return detail::gather_status(*state_); }

bool context::enable_peer_access(const context& peer) const {
  if (peer.device_number() == device_number()) return true;
  std::lock_guard lock(state_->mutex);
  auto& tried = state_->peers_tried;
  auto& enabled = state_->peers_enabled;
  const int p = peer.device_number();
  if (std::find(tried.begin(), tried.end(), p) != tried.end()) {
    return std::find(enabled.begin(), enabled.end(), p) != enabled.end();
  }
  const detail::driver_table& d = detail::driver();
  // Peer access only makes copies faster (without it the driver stages
  // them): a probe that fails is remembered as "no peer access", reported,
  // and not asked again, rather than failing the copy that wanted it.
  CUdevice self_dev = 0;
  CUdevice peer_dev = 0;
  int can = 0;
  CUresult probe = d.cuDeviceGet(&self_dev, device_number());
  if (probe == CUDA_SUCCESS) probe = d.cuDeviceGet(&peer_dev, p);
  if (probe == CUDA_SUCCESS) probe = d.cuDeviceCanAccessPeer(&can, self_dev, peer_dev);
  tried.push_back(p);
  if (probe != CUDA_SUCCESS) {
    detail::warn_result(probe, "probing peer access (taken as none)");
    return false;
  }
  if (can == 0) return false;
  scoped_context guard(*this);
  CUresult r = d.cuCtxEnablePeerAccess(peer.handle(), 0);
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
    enabled.push_back(p);
    return true;
  }
  if (r == CUDA_ERROR_PEER_ACCESS_UNSUPPORTED || r == CUDA_ERROR_TOO_MANY_PEERS) return false;
  detail::check(r, "cuCtxEnablePeerAccess");
  return false;
}

scoped_context::scoped_context(const context& ctx) : scoped_context(ctx.handle()) {}

scoped_context::scoped_context(CUcontext ctx) {
  const detail::driver_table& d = detail::driver();
  // When the current context cannot be asked, push anyway: a context pushed
  // on top of itself is harmless, and the pop restores the stack.
  CUcontext current = nullptr;
  if (d.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == ctx) return;
  detail::check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
  pushed_ = ctx;
}

scoped_context::~scoped_context() {
  if (pushed_ == nullptr) return;
  const detail::driver_table* d = detail::driver_if_loaded();
  if (d == nullptr) return;
  CUcontext popped = nullptr;
  CUresult r = d->cuCtxPopCurrent(&popped);
  if (r != CUDA_SUCCESS) {
    detail::warn_result(r, "cuCtxPopCurrent");
  } else if (popped != pushed_) {
    detail::warn(
        "cuCtxPopCurrent popped a different context than cuarrow pushed: "
        "the context stack was changed inside a cuarrow call");
  }
}

void shutdown() noexcept { detail::release_cached_contexts(); }

}  // namespace cuarrow
