// The IPC format's metadata values (include/cuarrow/ipc/format.hpp).
#include "cuarrow/ipc/format.hpp"

#include <utility>

namespace cuarrow::ipc {

invalid_message::invalid_message(std::string where, std::string reason)
    : invalid_argument(where + ": " + reason), where_(std::move(where)), reason_(std::move(reason)) {}

}  // namespace cuarrow::ipc
