// A test fixture with a temporary directory for the test's files, removed
// afterwards (the readers and writers of paths: tests/ipc, tests/gds,
// tests/nvcomp).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace cuarrow_test {

class temp_files_test : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (std::filesystem::temp_directory_path() / "cuarrow_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // Writes `bytes` to file `name` of the directory; returns its path.
  std::string write(const std::string& name, const std::vector<std::byte>& bytes) const {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) throw std::runtime_error("cannot write " + path);
    return path;
  }

  std::filesystem::path dir_;
};

}  // namespace cuarrow_test
