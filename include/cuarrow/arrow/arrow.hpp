// cuarrow's typed Arrow layer, all of it: types and layouts, arrays and
// record batches, validation, batched host <-> device transfers, the Arrow C
// Data / C Device Data / C Stream interfaces.  (device_view.hpp, the views
// for CUDA kernels, is separate: include it where kernels are written.)
#pragma once

#include "cuarrow/arrow/array.hpp"
#include "cuarrow/arrow/c_abi.h"
#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/arrow/readahead.hpp"
#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/arrow/type.hpp"
#include "cuarrow/arrow/validate.hpp"
