// cuarrow._cuarrow: the extension module behind cuarrow.cuda.
//
// Importing it loads no CUDA driver: the driver is opened at the first call
// that needs it (cuarrow's driver table), so `import cuarrow.cuda` works on
// machines without a GPU and the first device call raises a clear error.
#include <cuarrow/version.hpp>

#include "common.hpp"

NB_MODULE(_cuarrow, m) {
  m.doc() = "Bindings of the cuarrow C++ library (use cuarrow.cuda, the pyarrow.cuda-compatible API).";
  m.attr("__version__") = CUARROW_VERSION_STRING;
  // Buffers still referenced at interpreter exit (module globals, a pending
  // traceback) are not leaks of the binding; do not warn about them.
  nb::set_leak_warnings(false);
  cuarrow_py::bind_errors(m);
  cuarrow_py::bind_context(m);
  cuarrow_py::bind_buffer(m);
  cuarrow_py::bind_dlpack(m);
  cuarrow_py::bind_arrow(m);
  cuarrow_py::bind_ipc(m);
  cuarrow_py::bind_ipc_format(m);
}
