// pyarrow's compressed samples (tests/ipc/data, written by
// make_codec_data.py), built into the test binary.
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace test_data {
const std::map<std::string, std::span<const std::byte>>& files();

// The bytes of golden file `name`; std::runtime_error when there is none.
inline std::vector<std::byte> load(const std::string& name) {
  const auto& all = files();
  const auto it = all.find(name);
  if (it == all.end()) throw std::runtime_error("no golden file " + name + " in tests/ipc/data");
  return {it->second.begin(), it->second.end()};
}
}  // namespace test_data
