// How cuarrow's own code makes a buffer from its fields (the constructor is
// private: only the library labels memory).
#pragma once

#include <cstdint>
#include <memory>
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

/// wrap_device, its errors naming `what` (the import or protocol the view
/// is made for: "__cuda_array_interface__"; with `role`, a C Device
/// buffer: "the <role> buffer of <what>", made only when thrown).
buffer wrap_device_as(const char* what, const context& ctx, std::uintptr_t address, std::int64_t size,
                      std::shared_ptr<const void> owner, bool is_mutable, const char* role = nullptr);

}  // namespace cuarrow::detail
