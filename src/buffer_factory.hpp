// How cuarrow's own code makes a buffer from its fields (the constructor is
// private: only the library labels memory).
#pragma once

#include <utility>

#include "cuarrow/buffer.hpp"

namespace cuarrow::detail {

struct buffer_factory {
  static buffer make(buffer::fields f) { return buffer(std::move(f)); }
};

}  // namespace cuarrow::detail
