// The IPC format's metadata values (include/cuarrow/ipc/format.hpp).
#include "cuarrow/ipc/format.hpp"

#include <utility>

namespace cuarrow::ipc {

invalid_message::invalid_message(std::string where, std::string reason)
    : invalid_argument(where + ": " + reason), where_(std::move(where)), reason_(std::move(reason)) {}

message_kind message_metadata::kind() const noexcept {
  switch (header.index()) {
    case 1: return message_kind::schema;
    case 2: return message_kind::dictionary_batch;
    case 3: return message_kind::record_batch;
    default: return message_kind::none;
  }
}

}  // namespace cuarrow::ipc
