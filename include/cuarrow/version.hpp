// cuarrow's version, for preprocessor checks (#if CUARROW_VERSION_MAJOR ...);
// the same as the CMake project's VERSION (CMakeLists.txt) and the Python
// package's (pyproject.toml).
#pragma once

#define CUARROW_VERSION_MAJOR 0
#define CUARROW_VERSION_MINOR 1
#define CUARROW_VERSION_PATCH 0
#define CUARROW_VERSION_STRING "0.1.0"
