# cuarrow's version has one source: include/cuarrow/version.hpp.  The C++
# macros are written there; CMake's project version (and so the installed
# package's cuarrowConfigVersion.cmake and the shared library's VERSION) is
# read from it here, and the Python wheel's version by scikit-build-core's
# regex provider ([tool.scikit-build.metadata.version] in pyproject.toml).
# The binding's cuarrow.__version__ is the macro itself.
#
# Sets CUARROW_VERSION ("MAJOR.MINOR.PATCH"); a string that disagrees with
# the MAJOR/MINOR/PATCH macros stops the configuration.  Runs in script mode
# too (cmake -P), which python/tests/test_cli.py uses.
file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/../include/cuarrow/version.hpp" _cuarrow_version_lines
     REGEX "^#define CUARROW_VERSION_(MAJOR|MINOR|PATCH|STRING) ")
foreach(_line IN LISTS _cuarrow_version_lines)
  if(_line MATCHES "^#define CUARROW_VERSION_(MAJOR|MINOR|PATCH) ([0-9]+)$")
    set(_cuarrow_version_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
  elseif(_line MATCHES "^#define CUARROW_VERSION_STRING \"([^\"]*)\"$")
    set(CUARROW_VERSION "${CMAKE_MATCH_1}")
  endif()
endforeach()
if(NOT CUARROW_VERSION STREQUAL "${_cuarrow_version_MAJOR}.${_cuarrow_version_MINOR}.${_cuarrow_version_PATCH}")
  message(FATAL_ERROR "include/cuarrow/version.hpp: CUARROW_VERSION_STRING \"${CUARROW_VERSION}\" disagrees with "
                      "MAJOR.MINOR.PATCH ${_cuarrow_version_MAJOR}.${_cuarrow_version_MINOR}.${_cuarrow_version_PATCH}")
endif()
if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)  # cmake -P: print it
  execute_process(COMMAND ${CMAKE_COMMAND} -E echo "${CUARROW_VERSION}")
endif()
