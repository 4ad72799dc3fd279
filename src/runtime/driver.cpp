// Loading the CUDA driver at run time (docs/driver-loading.md).
#include "cuarrow/driver.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "cuarrow/error.hpp"
#include "driver_table.hpp"

namespace cuarrow {
namespace detail {
namespace {

constexpr int kMinimumDriverVersion = 12000;  // cuGetProcAddress_v2
constexpr const char* kDefaultLibrary = "libcuda.so.1";
constexpr const char* kEmulationLibrary = "libcuarrow_cuda_emulation.so";

// Never destroyed: destructors of other static objects and of objects that
// outlive main() may still consult it.
struct loader_state {
  std::mutex mutex;
  std::atomic<const driver_table*> table{nullptr};
  driver_table storage;
  std::string selected;  // from select_driver(); empty = environment/default
  bool selected_set = false;
  std::atomic<bool> shutting_down{false};
};

loader_state& state() {
  static auto* s = new loader_state;
  return *s;
}

std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

// The folder of the binary that holds this code (libcuarrow.so, or the
// Python extension that links cuarrow statically), where the emulation
// library is installed beside it.
std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_directory), &info) == 0 || info.dli_fname == nullptr) return {};
  std::string path = info.dli_fname;
  auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

void* open_library(const std::string& choice, std::string& path_out, bool& emulated_out) {
  emulated_out = false;
  if (choice == "emulated") {
    emulated_out = true;
    std::string errors;
    const std::string dir = own_directory();
    for (const std::string& candidate :
         {dir.empty() ? std::string() : dir + "/" + kEmulationLibrary, std::string(kEmulationLibrary)}) {
      if (candidate.empty()) continue;
      if (void* h = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        path_out = candidate;
        return h;
      }
      errors += std::string("; ") + dlerror();
    }
    throw driver_error("the CUDA driver emulation was requested (CUARROW_CUDA_DRIVER=emulated) but " +
                       std::string(kEmulationLibrary) + " could not be loaded" + errors +
                       ". It is built with cuarrow and installed beside the cuarrow library.");
  }
  const std::string name = choice.empty() ? kDefaultLibrary : choice;
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    throw driver_error("no CUDA driver found (" + name + "): " + (why ? why : "unknown dlopen error") +
                       ". Install the NVIDIA driver, point CUARROW_CUDA_DRIVER at a driver library, or "
                       "set CUARROW_CUDA_DRIVER=emulated to run on cuarrow's host emulation (for testing).");
  }
  path_out = name;
  return h;
}

std::atomic<void (*)() noexcept> g_exit_hook{nullptr};

void at_exit() noexcept {
  // The runtime's work (releasing its cached contexts) while the driver is
  // certainly still there (this handler was registered after the driver
  // library was loaded, so it runs before the driver's own exit handlers),
  // then stop all driver calls.
  if (auto* hook = g_exit_hook.load()) hook();
  state().shutting_down.store(true);
}

void load(loader_state& s) {
  std::string choice;
  if (s.selected_set) {
    choice = s.selected;
  } else if (const char* env = std::getenv("CUARROW_CUDA_DRIVER"); env != nullptr && *env != '\0') {
    choice = env;
  }

  driver_table t;
  bool emulated = false;
  t.library = open_library(choice, t.path, emulated);
  t.emulated = emulated;
  auto fail = [&](const std::string& message) {
    dlclose(t.library);
    throw driver_error(message);
  };

  using get_proc_t = PFN_cuGetProcAddress_v12000;
  auto get_proc = reinterpret_cast<get_proc_t>(dlsym(t.library, "cuGetProcAddress_v2"));
  auto get_version = reinterpret_cast<PFN_cuDriverGetVersion_v2020>(dlsym(t.library, "cuDriverGetVersion"));
  if (get_version != nullptr) get_version(&t.version);
  if (get_proc == nullptr || t.version < kMinimumDriverVersion) {
    fail("the CUDA driver at " + t.path + " (version " + version_string(t.version) +
         ") is too old: cuarrow needs a driver for CUDA " + version_string(kMinimumDriverVersion) +
         " or newer (cuGetProcAddress_v2). Update the NVIDIA driver.");
  }

#define CUARROW_DRIVER_ENTRY(name, abi, required)                                                  \
  {                                                                                                \
    void* fn = nullptr;                                                                            \
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;                  \
    CUresult r = get_proc(#name, &fn, abi, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);            \
    /* An older driver answers its own older ABI of a symbol whose ABI changed since (a pointer */ \
    /* of another type), so an optional entry newer than the driver counts as absent. */           \
    if (r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && fn != nullptr &&             \
        (required || t.version >= abi)) {                                                          \
      t.name = reinterpret_cast<PFN_##name##_v##abi>(fn);                                          \
    } else if (required) {                                                                         \
      fail("the CUDA driver at " + t.path + " (version " + version_string(t.version) +             \
           ") lacks " #name " (ABI " #abi "), which cuarrow needs. Update the NVIDIA driver.");    \
    }                                                                                              \
  }
#include "driver_entry_points.def"
#undef CUARROW_DRIVER_ENTRY

  CUresult r = t.cuInit(0);
  // With no device the driver stays uninitialized (later calls answer
  // CUDA_ERROR_NOT_INITIALIZED); remember it so device_count() says 0.
  t.no_device = (r == CUDA_ERROR_NO_DEVICE);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_NO_DEVICE) {
    const char* name = nullptr;
    const char* text = nullptr;
    t.cuGetErrorName(r, &name);
    t.cuGetErrorString(r, &text);
    fail("cuInit failed: " + std::string(name ? name : "?") + " (" + std::to_string(r) + "): " + (text ? text : "?") +
         " (driver " + t.path + ")");
  }

  s.storage = std::move(t);
  s.table.store(&s.storage, std::memory_order_release);
  std::atexit(at_exit);
}

}  // namespace

void set_exit_hook(void (*hook)() noexcept) noexcept { g_exit_hook.store(hook); }

const driver_table& driver() {
  loader_state& s = state();
  if (const driver_table* t = s.table.load(std::memory_order_acquire)) return *t;
  std::lock_guard lock(s.mutex);
  if (const driver_table* t = s.table.load(std::memory_order_acquire)) return *t;
  load(s);
  return s.storage;
}

const driver_table* driver_if_loaded() noexcept { return state().table.load(std::memory_order_acquire); }

bool driver_loaded() noexcept { return driver_if_loaded() != nullptr; }

bool shutting_down() noexcept { return state().shutting_down.load(std::memory_order_relaxed); }

}  // namespace detail

void select_driver(std::string_view path_or_emulated) {
  auto& s = detail::state();
  std::lock_guard lock(s.mutex);
  std::string wanted(path_or_emulated);
  if (const detail::driver_table* t = s.table.load()) {
    const bool same = (wanted == "emulated")
                          ? t->emulated
                          : (!t->emulated && (wanted.empty() ? t->path == detail::kDefaultLibrary : t->path == wanted));
    if (!same) {
      throw error("select_driver(\"" + wanted + "\"): the CUDA driver " + t->path +
                  " is already loaded; select the driver before the first CUDA operation");
    }
    return;
  }
  s.selected = std::move(wanted);
  s.selected_set = true;
}

void load_driver() { detail::driver(); }

bool driver_is_emulated() {
  const detail::driver_table* t = detail::driver_if_loaded();
  return t != nullptr && t->emulated;
}

int driver_version() { return detail::driver().version; }

std::string driver_path() { return detail::driver().path; }

driver_probe probe_real_driver() {
  // A handle of its own (the loader's table is not touched).  It is never
  // closed: unloading a driver after cuInit (its threads, its exit
  // handlers) is unsafe, and a later load of libcuda.so.1 shares it.
  void* lib = dlopen(detail::kDefaultLibrary, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return {0, std::string("no CUDA driver is installed (") + (why ? why : "unknown dlopen error") + ")"};
  }
  auto init = reinterpret_cast<PFN_cuInit_v2000>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<PFN_cuDeviceGetCount_v2000>(dlsym(lib, "cuDeviceGetCount"));
  if (init == nullptr || count == nullptr) {
    return {0, std::string("the CUDA driver at ") + detail::kDefaultLibrary + " lacks cuInit or cuDeviceGetCount"};
  }
  const CUresult r = init(0);
  if (r == CUDA_ERROR_NO_DEVICE) return {0, "the CUDA driver reports no device"};
  if (r != CUDA_SUCCESS) {
    return {0, "the CUDA driver failed to initialize (cuInit returned CUDA error " +
                   std::to_string(static_cast<int>(r)) + ")"};
  }
  int n = 0;
  if (count(&n) != CUDA_SUCCESS || n == 0) return {0, "the CUDA driver reports no device"};
  return {n, ""};
}

}  // namespace cuarrow
