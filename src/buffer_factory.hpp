// How cuarrow's own code makes a buffer from its fields (the constructor is
// private: only the library labels memory).
#pragma once

#include <cstdint>
#include <utility>

#include "cuarrow/buffer.hpp"
#include "cuarrow/context.hpp"

namespace cuarrow::detail {

struct buffer_factory {
  static buffer make(buffer::fields f) { return buffer(std::move(f)); }

  /// The fields of `size` bytes of `type` memory that belong to `ctx` (its
  /// device, its context); the caller adds the address, owner and the rest.
  static buffer::fields fields_of(const context& ctx, device_type type, std::int64_t size) {
    buffer::fields f;
    f.type = type;
    f.device_id = ctx.device_number();
    f.ctx = ctx;
    f.size = size;
    return f;
  }
};

}  // namespace cuarrow::detail
