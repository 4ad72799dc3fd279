#include "cuarrow/error.hpp"

#include <cstdio>
#include <mutex>
#include <string>

#include "driver_table.hpp"

namespace cuarrow {

cuda_error::cuda_error(int code, std::string name, std::string operation, const std::string& message)
    : error(message), code_(code), name_(std::move(name)), operation_(std::move(operation)) {}

out_of_memory::out_of_memory(int code, std::string name, std::string operation, const std::string& message,
                             std::int64_t bytes)
    : cuda_error(code, std::move(name), std::move(operation), message), bytes_(bytes) {}

io_error::io_error(std::string path, int error_code, const std::string& message)
    : error(message), path_(std::move(path)), error_code_(error_code) {}

namespace {
std::mutex& handler_mutex() {
  static std::mutex m;
  return m;
}
warning_handler& handler() {
  static warning_handler h;
  return h;
}
}  // namespace

void set_warning_handler(warning_handler h) {
  std::lock_guard lock(handler_mutex());
  handler() = std::move(h);
}

namespace detail {

namespace {
const char* result_name(CUresult r) {
  const driver_table* d = driver_if_loaded();
  const char* name = nullptr;
  if (d != nullptr && d->cuGetErrorName != nullptr && d->cuGetErrorName(r, &name) == CUDA_SUCCESS && name != nullptr) {
    return name;
  }
  return "CUDA_ERROR_UNKNOWN_CODE";
}
const char* result_text(CUresult r) {
  const driver_table* d = driver_if_loaded();
  const char* text = nullptr;
  if (d != nullptr && d->cuGetErrorString != nullptr && d->cuGetErrorString(r, &text) == CUDA_SUCCESS &&
      text != nullptr) {
    return text;
  }
  return "unrecognized error code";
}
}  // namespace

std::string describe_result(CUresult r) {
  return std::string(result_name(r)) + " (" + std::to_string(static_cast<int>(r)) + "): " + result_text(r);
}

std::string hex_address(std::uintptr_t address) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(address));
  return text;
}

void throw_cuda_error(CUresult r, const char* operation, std::int64_t bytes) {
  // (Built with append: GCC 12 warns falsely (-Wrestrict) on chained + here.)
  std::string message = operation;
  if (bytes >= 0) message.append("(").append(std::to_string(bytes)).append(" bytes)");
  message.append(" failed: ").append(describe_result(r));
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    message += "; free memory with synchronize(), release unused buffers, or allocate less";
    throw out_of_memory(static_cast<int>(r), result_name(r), operation, message, bytes);
  }
  throw cuda_error(static_cast<int>(r), result_name(r), operation, message);
}

void warn(const std::string& message) noexcept {
  try {
    std::lock_guard lock(handler_mutex());
    if (handler()) {
      handler()("cuarrow: " + message);
      return;
    }
  } catch (...) {
  }
  std::fprintf(stderr, "cuarrow warning: %s\n", message.c_str());
}

void warn_result(CUresult r, const char* operation) noexcept {
  try {
    warn(std::string(operation) + " failed: " + describe_result(r));
  } catch (...) {
  }
}

}  // namespace detail
}  // namespace cuarrow
