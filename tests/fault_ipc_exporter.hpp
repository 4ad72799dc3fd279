// A child process (this test executable again) that exports device memory
// of 10000 bytes, pattern(10000, 77), through CUDA IPC and stays alive while
// the object lives: for tests that open an IPC handle in this process.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include <cuarrow/ipc.hpp>

namespace cuarrow_test {

class ipc_exporter_child {
 public:
  ipc_exporter_child();  // waits for the handle (up to 30 s)
  ~ipc_exporter_child();
  ipc_exporter_child(const ipc_exporter_child&) = delete;
  ipc_exporter_child& operator=(const ipc_exporter_child&) = delete;
  /// The exported handle, or nullopt if the child failed.
  const std::optional<cuarrow::ipc_memory_handle>& handle() const { return handle_; }

 private:
  std::string file_;
  pid_t child_ = -1;
  std::optional<cuarrow::ipc_memory_handle> handle_;
};

}  // namespace cuarrow_test
