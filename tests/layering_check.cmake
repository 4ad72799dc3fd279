# The runtime (src/runtime/) is the one layer that calls the CUDA driver (and
# libcufile): no other file of cuarrow includes their tables
# (driver_table.hpp, cufile_table.hpp), names them, or calls
# detail::driver() / driver_if_loaded(); the layers
# above call the runtime (src/runtime/runtime.hpp).  The emulation
# (emulation/) implements the driver and is not scanned.  Run by ctest
# (layering.*):
#   cmake -DSOURCE_DIR=<source tree> -P tests/layering_check.cmake
# Fails listing file:line of every violation.
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "layering_check: set -DSOURCE_DIR=<source tree>")
endif()

set(scanned src include python/src tests fuzz bench examples)
set(globs "")
foreach(dir IN LISTS scanned)
  foreach(ext c cc cpp cxx h hh hpp cu cuh inl def)
    list(APPEND globs "${SOURCE_DIR}/${dir}/*.${ext}")
  endforeach()
endforeach()
file(GLOB_RECURSE files RELATIVE "${SOURCE_DIR}" ${globs})
list(SORT files)

set(violations "")
set(count 0)
foreach(f IN LISTS files)
  if(f MATCHES "^src/runtime/")
    continue()  # the runtime itself
  endif()
  if(f MATCHES "^tests/layering/")
    continue()  # this check's own fixture (a deliberate violation)
  endif()
  math(EXPR count "${count} + 1")
  file(STRINGS "${SOURCE_DIR}/${f}" lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(line MATCHES "driver_table" OR line MATCHES "cufile_table" OR line MATCHES "(^|[^A-Za-z0-9_])driver(_if_loaded)?[ \t]*\\([ \t]*\\)")
      string(STRIP "${line}" shown)
      string(APPEND violations "\n  ${f}:${n}: ${shown}")
    endif()
  endforeach()
endforeach()

if(count EQUAL 0)
  message(FATAL_ERROR "layering_check: no source file found under ${SOURCE_DIR}")
endif()
if(violations)
  message(FATAL_ERROR "layering_check: only the runtime (src/runtime/) may use the driver and cuFile tables; call the runtime "
                      "(src/runtime/runtime.hpp) instead:${violations}")
endif()
message(STATUS "layering_check: ${count} files outside src/runtime/ leave the driver table alone")
