// cuarrow: Apache Arrow columnar data on NVIDIA GPUs.  The whole C++ API.
#pragma once

#include "cuarrow/buffer.hpp"
#include "cuarrow/context.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/driver.hpp"
#include "cuarrow/error.hpp"
#include "cuarrow/gds.hpp"
#include "cuarrow/ipc.hpp"
#include "cuarrow/memory_resource.hpp"
#include "cuarrow/nvcomp.hpp"
#include "cuarrow/stream.hpp"
#include "cuarrow/version.hpp"

// The typed Arrow layer (C Data / C Device Data interfaces, arrays, transfers).
#include "cuarrow/arrow/arrow.hpp"

#include "cuarrow/ipc/codec.hpp"
#include "cuarrow/ipc/file.hpp"
#include "cuarrow/ipc/file_writer.hpp"
#include "cuarrow/ipc/format.hpp"
#include "cuarrow/ipc/metadata.hpp"
#include "cuarrow/ipc/record_batch.hpp"
#include "cuarrow/ipc/share.hpp"
#include "cuarrow/ipc/stream.hpp"
