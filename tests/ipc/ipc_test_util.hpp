// Helpers the IPC tests share beyond the golden files (test_data.hpp).
#pragma once

#include <optional>
#include <vector>

#include "cuarrow/ipc/stream.hpp"

namespace ipc_test_util {

// The batches a stream reader has left, and their messages' custom metadata.
struct batches_with_metadata {
  std::vector<cuarrow::arrow::record_batch> batches;
  std::vector<cuarrow::arrow::key_value_metadata> metadata;
};

inline batches_with_metadata read_rest(cuarrow::ipc::stream_reader& r) {
  batches_with_metadata out;
  while (std::optional<cuarrow::ipc::batch_with_metadata> b = r.read_next_with_custom_metadata()) {
    out.batches.push_back(b->batch);
    out.metadata.push_back(b->custom_metadata);
  }
  return out;
}

}  // namespace ipc_test_util
