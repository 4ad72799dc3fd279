// Fixed-layout wire formats written by cuarrow itself (IPC memory handles,
// src/ipc.cpp; shared-object descriptors, src/ipc_format/share.cpp):
// little-endian fields and an FNV-1a 64 checksum.  The checksum catches
// damaged bytes (a truncated copy, flipped bits), not forgeries: what a
// forged handle or descriptor names is checked where it is opened.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cuarrow::detail {

template <class T>
void put_le(std::byte* at, T value) {
  auto u = static_cast<std::make_unsigned_t<T>>(value);
  for (std::size_t i = 0; i < sizeof(T); ++i) at[i] = static_cast<std::byte>((u >> (8 * i)) & 0xff);
}

template <class T>
T get_le(const std::byte* at) {
  std::make_unsigned_t<T> u = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    u |= static_cast<std::make_unsigned_t<T>>(static_cast<std::uint8_t>(at[i])) << (8 * i);
  }
  return static_cast<T>(u);
}

inline std::uint64_t fnv1a(const std::byte* p, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<std::uint8_t>(p[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace cuarrow::detail
