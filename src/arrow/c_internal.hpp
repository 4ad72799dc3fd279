// Internal helpers shared by the C interface files (src/arrow/c_*.cpp).
#pragma once

#include <cerrno>
#include <exception>
#include <new>
#include <optional>
#include <string>

#include "arrow_internal.hpp"
#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/error.hpp"

namespace cuarrow::arrow::detail {

// The errno value a C stream callback reports for the exception in flight,
// with its message stored in `last_error`.  Never throws.
inline int errno_for_current_exception(std::string& last_error) noexcept {
  try {
    throw;
  } catch (const out_of_memory& e) {
    last_error = e.what();
    return ENOMEM;
  } catch (const std::bad_alloc&) {
    last_error = "out of host memory";
    return ENOMEM;
  } catch (const invalid_argument& e) {
    last_error = e.what();
    return EINVAL;
  } catch (const std::exception& e) {
    last_error = e.what();
    return EIO;
  } catch (...) {
    last_error = "unknown error";
    return EIO;
  }
}

// Decodes an ArrowSchema::metadata blob of at most `size` bytes (SIZE_MAX:
// unknown, as the C interface gives it) within max_metadata_* (c_data.hpp).
key_value_metadata decode_metadata(const char* blob, std::size_t size, const std::string& path);

// True when some buffer of the tree is non-empty.
bool has_any_buffer(const array_data& a);

}  // namespace cuarrow::arrow::detail
