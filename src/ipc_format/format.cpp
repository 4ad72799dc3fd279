// The IPC format's metadata values (include/cuarrow/ipc/format.hpp).
#include "cuarrow/ipc/format.hpp"

#include <string>
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

namespace {

template <class Header>
const Header& header_of(const message_metadata& m, std::string_view who, const char* kind) {
  const auto* h = std::get_if<Header>(&m.header);
  if (h == nullptr) throw invalid_argument(std::string(who) + ": not a " + kind + " message");
  return *h;
}

}  // namespace

const schema_message& message_metadata::schema_header(std::string_view who) const {
  return header_of<schema_message>(*this, who, "schema");
}
const dictionary_batch_header& message_metadata::dictionary_batch(std::string_view who) const {
  return header_of<dictionary_batch_header>(*this, who, "dictionary batch");
}
const record_batch_header& message_metadata::record_batch(std::string_view who) const {
  return header_of<record_batch_header>(*this, who, "record batch");
}

}  // namespace cuarrow::ipc
