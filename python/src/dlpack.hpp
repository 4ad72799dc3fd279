// The DLPack ABI: cuarrow's own definitions (include/cuarrow/tensor.hpp),
// where the core's tensor reader checks what producers hand over.
#pragma once

#include <cuarrow/tensor.hpp>

namespace cuarrow_py {
namespace dlpack = cuarrow::dlpack;
}  // namespace cuarrow_py
