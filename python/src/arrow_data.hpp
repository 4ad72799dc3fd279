// The binding's handles of typed Arrow data (bound in arrow.cpp as
// ArrayData and BatchData), shared with the IPC binding (ipc_format.cpp),
// whose readers hand batches to the facade as BatchData and whose writers
// take them so: a batch crosses the border as the core's value, with no
// C Device Data export and re-import (which would read offsets back from
// the device to check what the core built and checked already).  Both are
// plain values: copying one copies buffer handles, not memory.
#pragma once

#include <cuarrow/arrow/arrow.hpp>

namespace cuarrow_py {

/// An array_data with the field it belongs to (name, nullability, metadata:
/// extension types live in the field's metadata) and the placement it was
/// declared to have (what an array without any buffer reports and exports).
struct ArrayData {
  cuarrow::arrow::field field;  // field.type is the array's type (kept in sync with data.type)
  cuarrow::arrow::array_data data;
  cuarrow::arrow::placement where;
};

/// A record_batch with its declared placement.
struct BatchData {
  cuarrow::arrow::record_batch batch;
  cuarrow::arrow::placement where;
};

}  // namespace cuarrow_py
