// Loading libcufile (GPUDirect Storage) at run time, and the files it reads
// (include/cuarrow/gds.hpp, runtime.hpp's gds_file).
//
// Mirrors the CUDA driver's loader (driver.cpp): dlopen, symbol lookup into
// a table kept for the process's life, never unloaded.  Unlike the CUDA
// driver, cuFile is never required: every failure becomes gds_status()'s
// reason, and the file readers then use the staging pipeline.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cuarrow/error.hpp"
#include "cuarrow/gds.hpp"
#include "cufile_table.hpp"
#include "driver_table.hpp"
#include "runtime.hpp"

namespace cuarrow {
namespace detail {
namespace {

constexpr const char* kDefaultLibrary = "libcufile.so.0";
// Present while the nvidia-fs kernel module is loaded.
constexpr const char* kNvidiaFsProc = "/proc/driver/nvidia-fs/version";

// Never destroyed, as the CUDA driver's loader state: exit handlers and
// static objects of other code may still ask.
struct cufile_state {
  std::once_flag once;
  gds_info info;
  cufile_table table;
  bool usable = false;
  std::atomic<int> live_handles{0};
};

cufile_state& state() {
  static auto* s = new cufile_state;
  return *s;
}

void close_at_exit() noexcept {
  // A handle still registered (a reader kept in a static object) would be
  // deregistered after the driver closed: leave the driver to the library's
  // own teardown then.
  cufile_state& s = state();
  if (s.live_handles.load() == 0 && s.table.driver_close != nullptr) s.table.driver_close();
}

std::string errno_text(int e) { return std::strerror(e); }

void compute(cufile_state& s) {
  gds_info& info = s.info;
  std::string mode = "auto";
  if (const char* env = std::getenv("CUARROW_GDS"); env != nullptr && *env != '\0') mode = env;
  if (mode != "off" && mode != "auto" && mode != "on") {
    info.mode = "off";
    info.reason = "CUARROW_GDS=" + mode + " is not one of off, auto, on: GPUDirect Storage is not used";
    return;
  }
  info.mode = mode;
  if (mode == "off") {
    info.reason = "CUARROW_GDS=off: libcufile is not loaded";
    return;
  }

  const char* chosen = std::getenv("CUARROW_CUFILE_LIBRARY");
  const bool explicit_library = chosen != nullptr && *chosen != '\0';
  info.library = explicit_library ? chosen : kDefaultLibrary;

  // cuFile reads into the real driver's device memory.  With the host
  // emulation of the driver only a library named explicitly (a test's) can
  // make sense of cuarrow's device pointers.
  try {
    if (driver().emulated && !explicit_library) {
      info.reason =
          "the CUDA driver is cuarrow's host emulation: libcufile (which reads the real driver's "
          "memory) is not loaded; set CUARROW_CUFILE_LIBRARY to load one anyway";
      return;
    }
  } catch (const std::exception& e) {
    info.reason = std::string("no CUDA driver, so no GPUDirect Storage: ") + e.what();
    return;
  }

  // Without nvidia-fs cuFile could only run in compatibility mode, which
  // auto does not use: then libcufile is not even loaded (opening its
  // driver costs time, starts threads and writes cufile.log).
  const bool nvidia_fs = ::access(kNvidiaFsProc, F_OK) == 0;
  if (mode == "auto" && !nvidia_fs) {
    info.compat_mode = true;
    info.reason = std::string("the nvidia-fs kernel module is not loaded (no ") + kNvidiaFsProc +
                  "): cuFile could only run in compatibility mode (POSIX reads through its own bounce buffers, "
                  "not direct), so libcufile is not loaded and files are read through the staging pipeline; "
                  "CUARROW_GDS=on uses cuFile anyway";
    return;
  }

  void* lib = dlopen(info.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    info.reason = "libcufile not found (" + info.library + ": " + (why ? why : "unknown dlopen error") +
                  "): files are read through the staging pipeline. Install NVIDIA GPUDirect Storage (libcufile, "
                  "part of the CUDA toolkit) or point CUARROW_CUFILE_LIBRARY at it to use it";
    return;
  }
  cufile_table t;
  std::string missing;
  auto find = [&](auto& fn, const char* name, const char* alternative, bool required) {
    void* p = dlsym(lib, name);
    if (p == nullptr && alternative != nullptr) p = dlsym(lib, alternative);
    if (p == nullptr && required) missing += (missing.empty() ? "" : ", ") + std::string(name);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  find(t.driver_open, "cuFileDriverOpen", nullptr, true);
  find(t.driver_close, "cuFileDriverClose_v2", "cuFileDriverClose", true);
  find(t.driver_get_properties, "cuFileDriverGetProperties", nullptr, true);
  find(t.handle_register, "cuFileHandleRegister", nullptr, true);
  find(t.handle_deregister, "cuFileHandleDeregister", nullptr, true);
  find(t.read, "cuFileRead", nullptr, true);
  find(t.buf_register, "cuFileBufRegister", nullptr, false);
  find(t.buf_deregister, "cuFileBufDeregister", nullptr, false);
  if (!missing.empty()) {
    // Not closed: a library that ran its initializers is not safely
    // unloaded (the CUDA driver's loader keeps what it loaded, too).
    info.reason = info.library + " lacks " + missing + ", which cuarrow calls: not a usable libcufile";
    return;
  }
  info.loaded = true;

  const cufile_status opened = t.driver_open();
  if (opened.err != 0) {
    info.reason = "cuFileDriverOpen failed: " + cufile_error_name(opened.err) +
                  (opened.err == 5011 ? " (CUDA error " + std::to_string(opened.cu_err) + ")" : std::string()) +
                  "; cufile.log (where /etc/cufile.json says) has cuFile's own account";
    return;
  }
  std::atexit(close_at_exit);  // after the CUDA driver's handler: runs before it
  cufile_driver_properties props{};
  const cufile_status got = t.driver_get_properties(&props);
  if (got.err != 0) {
    // Usable, but nothing says the path is direct.
    info.compat_mode = true;
  } else {
    info.compat_mode = cufile_compat_mode(props, nvidia_fs);
  }
  s.table = t;
  s.usable = true;
  info.usable = true;
  info.available = !info.compat_mode || mode == "on";
  const std::string version =
      got.err != 0 ? std::string("unknown (cuFileDriverGetProperties failed: ") + cufile_error_name(got.err) + ")"
                   : std::to_string(props.nvfs.major_version) + "." + std::to_string(props.nvfs.minor_version);
  if (!info.compat_mode) {
    info.reason = "cuFile reads directly into device memory (nvidia-fs " + version + ")";
  } else {
    info.reason = std::string("cuFile runs in compatibility mode (") +
                  (nvidia_fs ? "" : "the nvidia-fs kernel module is not loaded: no ") + kNvidiaFsProc +
                  (nvidia_fs ? "" : "; ") + "nvidia-fs version " + version +
                  "): POSIX reads through its own bounce buffers, not direct; " +
                  (mode == "on" ? "used because CUARROW_GDS=on"
                                : "readers use the staging pipeline (CUARROW_GDS=on uses cuFile anyway)");
  }
}

const cufile_state& computed() {
  cufile_state& s = state();
  std::call_once(s.once, [&] {
    try {
      compute(s);
    } catch (const std::exception& e) {  // std::bad_alloc, nothing else throws
      s.info.reason = std::string("GPUDirect Storage could not be examined: ") + e.what();
    }
  });
  return s;
}

std::string describe_read_failure(ssize_t r) {
  if (r == -1) return errno_text(errno);
  return cufile_error_name(static_cast<int>(-r));
}

}  // namespace

bool cufile_compat_mode(const cufile_driver_properties& p, bool nvidia_fs_loaded) noexcept {
  // The documented signal that reads are direct is the nvidia-fs kernel
  // module; the library also reports the module's version, 0.0 when it
  // found none.  Either missing: compatibility mode.
  return !nvidia_fs_loaded || (p.nvfs.major_version == 0 && p.nvfs.minor_version == 0);
}

std::string cufile_error_name(int err) {
  static const char* const names[] = {
      "CU_FILE_DRIVER_NOT_INITIALIZED",   "CU_FILE_DRIVER_INVALID_PROPS",      "CU_FILE_DRIVER_UNSUPPORTED_LIMIT",
      "CU_FILE_DRIVER_VERSION_MISMATCH",  "CU_FILE_DRIVER_VERSION_READ_ERROR", "CU_FILE_DRIVER_CLOSING",
      "CU_FILE_PLATFORM_NOT_SUPPORTED",   "CU_FILE_IO_NOT_SUPPORTED",          "CU_FILE_DEVICE_NOT_SUPPORTED",
      "CU_FILE_NVFS_DRIVER_ERROR",        "CU_FILE_CUDA_DRIVER_ERROR",         "CU_FILE_CUDA_POINTER_INVALID",
      "CU_FILE_CUDA_MEMORY_TYPE_INVALID", "CU_FILE_CUDA_POINTER_RANGE_ERROR",  "CU_FILE_CUDA_CONTEXT_MISMATCH",
  };
  constexpr int base = 5000;
  constexpr int count = static_cast<int>(sizeof(names) / sizeof(names[0]));
  if (err > base && err <= base + count) return std::string(names[err - base - 1]) + " (" + std::to_string(err) + ")";
  return "cuFile error " + std::to_string(err);
}

const cufile_table* cufile_if_usable() noexcept {
  const cufile_state& s = computed();
  return s.usable ? &s.table : nullptr;
}

// ---- gds_file -----------------------------------------------------------------------------

std::unique_ptr<gds_file> gds_file::open(const std::string& path, std::string& why) {
  const cufile_table* t = cufile_if_usable();
  if (t == nullptr) {
    why = computed().info.reason;
    return nullptr;
  }
  // O_DIRECT where the file system takes it: cuFile's direct path needs it.
  // Without it (tmpfs and other file systems that refuse it answer EINVAL)
  // cuFile may still serve the file in compatibility mode, or refuse the
  // handle below.
  bool direct = true;
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0 && errno == EINVAL) {
    direct = false;
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
  }
  if (fd < 0) {
    why = "cannot open \"" + path + "\" for cuFile: " + errno_text(errno);
    return nullptr;
  }
  cufile_descriptor d;
  d.handle.fd = fd;
  cufile_handle h = nullptr;
  const cufile_status r = t->handle_register(&h, &d);
  if (r.err != 0) {
    ::close(fd);
    why = "cuFileHandleRegister refused \"" + path + "\"" +
          (direct ? "" : " (opened without O_DIRECT, which its file system refuses)") + ": " + cufile_error_name(r.err);
    return nullptr;
  }
  state().live_handles.fetch_add(1);
  auto f = std::unique_ptr<gds_file>(new gds_file);
  f->path_ = path;
  f->fd_ = fd;
  f->handle_ = h;
  f->direct_ = direct;
  f->compat_mode_ = computed().info.compat_mode;
  return f;
}

gds_file::~gds_file() {
  if (handle_ != nullptr) {
    state().table.handle_deregister(handle_);
    state().live_handles.fetch_sub(1);
  }
  if (fd_ >= 0) ::close(fd_);
}

void gds_file::read(CUdeviceptr base, std::size_t base_offset, std::size_t size, std::int64_t file_offset) const {
  const cufile_table& t = state().table;
  std::size_t done = 0;
  while (done < size) {
    const ssize_t r = t.read(handle_, reinterpret_cast<void*>(base), size - done,
                             static_cast<off_t>(file_offset + static_cast<std::int64_t>(done)),
                             static_cast<off_t>(base_offset + done));
    if (r < 0) {
      throw error("cuFileRead of \"" + path_ + "\" failed at offset " +
                  std::to_string(file_offset + static_cast<std::int64_t>(done)) + " (" + std::to_string(size - done) +
                  " bytes): " + describe_read_failure(r));
    }
    if (r == 0) {
      throw error("cuFileRead of \"" + path_ + "\": the file ends before offset " +
                  std::to_string(file_offset + static_cast<std::int64_t>(size)));
    }
    done += static_cast<std::size_t>(r);
  }
}

}  // namespace detail

gds_info gds_status() {
  try {
    return detail::computed().info;
  } catch (...) {  // copying the strings ran out of memory
    return {};
  }
}

}  // namespace cuarrow
