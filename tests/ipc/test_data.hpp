// pyarrow's compressed samples (tests/ipc/data, written by
// make_codec_data.py), built into the test binary.
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string>

namespace test_data {
const std::map<std::string, std::span<const std::byte>>& files();
}
