// Sources of staged pieces other than host memory (copy_sources.hpp).
#include "copy_sources.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cuarrow/error.hpp"

namespace cuarrow::detail {

void read_file_exactly(int fd, const std::string& path, std::int64_t offset, std::span<unsigned char> out,
                       std::atomic<std::int64_t>* bytes_read) {
  std::size_t done = 0;
  while (done < out.size()) {
    const std::int64_t at = offset + static_cast<std::int64_t>(done);
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(at));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      throw io_error(path, e,
                     "reading " + std::to_string(out.size() - done) + " bytes of \"" + path + "\" at offset " +
                         std::to_string(at) + ": " + std::strerror(e));
    }
    if (n == 0) {
      throw io_error(path, 0,
                     "reading \"" + path + "\": the file ends at offset " + std::to_string(at) + ", " +
                         std::to_string(out.size() - done) +
                         " bytes short of what was asked (was it truncated while read?)");
    }
    done += static_cast<std::size_t>(n);
    if (bytes_read != nullptr) bytes_read->fetch_add(n);
  }
}

void fill_from_source(const piece_source& source, std::size_t offset, std::span<unsigned char> out) {
  if (source.what == piece_source::kind::file) {
    const timed t(source.read_ns);
    static const std::string unnamed = "(unnamed file)";
    read_file_exactly(source.fd, source.path != nullptr ? *source.path : unnamed,
                      source.file_offset + static_cast<std::int64_t>(offset), out, source.bytes_read);
  } else {
    source.produce(offset, out);
  }
}

}  // namespace cuarrow::detail
