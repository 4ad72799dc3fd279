// Internal: whether the copy engine sends the copies within `ctx`'s device
// of a batch of many to cuarrow's gather kernel (transfer_options::
// device_gather and the kernel ready there: runtime gather_ready), so that
// a caller laying out many pieces (the IPC stream writer) can choose
// between many small copies and fewer, larger ones.
#pragma once

#include "cuarrow/context.hpp"

namespace cuarrow::detail {

bool gathers_device_copies(const context& ctx);

}  // namespace cuarrow::detail
