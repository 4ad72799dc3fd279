// cuarrow's version: the one source of it.  CMake's project version
// (cmake/cuarrowVersion.cmake) and the Python wheel's version (pyproject.toml,
// [tool.scikit-build.metadata.version]) are read from this file; the binding
// exposes CUARROW_VERSION_STRING as cuarrow.__version__.  Change the four
// lines together (CMake stops on a string that disagrees with the numbers).
#pragma once

#define CUARROW_VERSION_MAJOR 0
#define CUARROW_VERSION_MINOR 1
#define CUARROW_VERSION_PATCH 0
#define CUARROW_VERSION_STRING "0.1.0"
