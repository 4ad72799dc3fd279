#include <cuarrow/cuarrow.hpp>
#include <cuarrow/ipc/codec.hpp>

#include <cstdio>
#include <cstring>
#include <span>
#include <string>

int main() {
  cuarrow::context ctx = cuarrow::context::get(0);
  const char msg[] = "hello from a consumer";
  cuarrow::buffer dev = cuarrow::copy_to_device(ctx, msg, sizeof msg);
  cuarrow::buffer back = cuarrow::copy_to_new_host(dev);
  bool ok = std::memcmp(back.host_data(), msg, sizeof msg) == 0;
  // The codecs link privately: a consumer needs neither liblz4's nor
  // libzstd's headers, and the libraries come with libcuarrow.
  std::string codecs;
  for (auto c : cuarrow::ipc::available_codecs()) {
    const auto* bytes = reinterpret_cast<const std::byte*>(msg);
    const auto framed = cuarrow::ipc::compress(c, {bytes, sizeof msg});
    char out[sizeof msg];
    cuarrow::ipc::decompress(c, framed, std::as_writable_bytes(std::span(out)));
    ok = ok && std::memcmp(out, msg, sizeof msg) == 0;
    codecs += std::string(codecs.empty() ? "" : " ") + cuarrow::ipc::to_string(c);
  }
  std::printf("%s (driver %s, cuarrow %s, codecs: %s)\n", ok ? "ok" : "MISMATCH", cuarrow::driver_path().c_str(),
              CUARROW_VERSION_STRING, codecs.empty() ? "none" : codecs.c_str());
  return ok ? 0 : 1;
}
