// The fuzz targets' input: bytes read front to back, zeros once they run
// out (so every input is a complete, if small, case).  The seed writer
// (write_seeds.cpp, seeds.py) writes the same encodings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace cuarrow_fuzz {

class input {
 public:
  input(const std::uint8_t* data, std::size_t size) : p_(data), n_(size) {}

  std::uint8_t u8() { return pos_ < n_ ? p_[pos_++] : 0; }
  std::uint16_t u16() {
    const std::uint16_t lo = u8();
    return static_cast<std::uint16_t>(lo | (u8() << 8));
  }
  std::uint32_t u32() {
    const std::uint32_t lo = u16();
    return lo | (static_cast<std::uint32_t>(u16()) << 16);
  }
  std::uint64_t u64() {
    const std::uint64_t lo = u32();
    return lo | (static_cast<std::uint64_t>(u32()) << 32);
  }
  // Up to `n` bytes (fewer when the input ends).
  std::string bytes(std::size_t n) {
    const std::size_t k = n < n_ - pos_ ? n : n_ - pos_;
    std::string s(reinterpret_cast<const char*>(p_ + pos_), k);
    pos_ += k;
    return s;
  }
  bool done() const { return pos_ >= n_; }
  std::size_t position() const { return pos_; }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
  std::size_t pos_ = 0;
};

// A failed property: abort so that libFuzzer records the input.
[[noreturn]] inline void property_failed(const char* what) {
  std::fprintf(stderr, "fuzz property failed: %s\n", what);
  std::abort();
}

// Writes at `at` the FNV-1a 64 checksum (little-endian) of the `n` bytes at
// `from`, as cuarrow's handles and descriptors carry it: a target fixes it up
// so that its mutations reach the checks behind the checksum.
inline void put_checksum(std::uint8_t* at, const std::uint8_t* from, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= from[i];
    h *= 0x100000001b3ull;
  }
  for (int i = 0; i < 8; ++i) at[i] = static_cast<std::uint8_t>(h >> (8 * i));
}

}  // namespace cuarrow_fuzz
