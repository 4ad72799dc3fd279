// How cuarrow's own code (and its tests) make an IPC handle from its fields
// (the constructor is private: only export_ipc and deserialize make handles).
#pragma once

#include <utility>

#include "cuarrow/ipc.hpp"

namespace cuarrow::detail {

struct ipc_handle_factory {
  static ipc_memory_handle make(ipc_memory_handle::fields f) { return ipc_memory_handle(std::move(f)); }
};

}  // namespace cuarrow::detail
