// Files as destinations of copies to the host (copy_sinks.hpp); the copy
// itself is copy.cpp's write_to_file.
#include "copy_sinks.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "cuarrow/error.hpp"
#include "runtime/runtime.hpp"

namespace cuarrow::detail {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what, int code) {
  throw io_error(path, code,
                 what + " \"" + path + "\" failed: " + std::strerror(code) + " (errno " + std::to_string(code) + ")");
}

}  // namespace

output_file::output_file(std::string path) : path_(std::move(path)) {
  do {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) fail(path_, "creating", errno);
}

output_file::~output_file() {
  if (fd_ < 0) return;
  if (::close(fd_) != 0) warn("closing \"" + path_ + "\" failed: " + std::strerror(errno));
}

void output_file::write_at(const void* data, std::size_t n, std::uint64_t offset) const {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    // At most 1 GiB a call: Linux writes at most 0x7ffff000 bytes at once.
    const std::size_t part = n < (std::size_t{1} << 30) ? n : (std::size_t{1} << 30);
    const ssize_t w = ::pwrite(fd_, p, part, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(path_, "writing " + std::to_string(part) + " bytes at offset " + std::to_string(offset) + " of", errno);
    }
    if (w == 0) fail(path_, "writing at offset " + std::to_string(offset) + " of", EIO);  // no progress
    p += w;
    n -= static_cast<std::size_t>(w);
    offset += static_cast<std::uint64_t>(w);
  }
}

void output_file::resize(std::uint64_t size) const {
  int r;
  do {
    r = ::ftruncate(fd_, static_cast<off_t>(size));
  } while (r != 0 && errno == EINTR);
  if (r != 0) fail(path_, "setting the size (" + std::to_string(size) + " bytes) of", errno);
}

void output_file::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  // Not retried after EINTR: on Linux the descriptor is released anyway.
  if (::close(fd) != 0) fail(path_, "closing", errno);
}

void output_file::discard() noexcept {
  if (fd_ >= 0) {
    (void)::close(fd_);
    fd_ = -1;
  }
  (void)::unlink(path_.c_str());
}

}  // namespace cuarrow::detail
