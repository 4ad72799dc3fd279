#include <cuarrow/cuarrow.hpp>

#include <cstdio>
#include <cstring>

int main() {
  cuarrow::context ctx = cuarrow::context::get(0);
  const char msg[] = "hello from a consumer";
  cuarrow::buffer dev = cuarrow::copy_to_device(ctx, msg, sizeof msg);
  cuarrow::buffer back = cuarrow::copy_to_new_host(dev);
  const bool ok = std::memcmp(back.host_data(), msg, sizeof msg) == 0;
  std::printf("%s (driver %s, cuarrow %s)\n", ok ? "ok" : "MISMATCH", cuarrow::driver_path().c_str(),
              CUARROW_VERSION_STRING);
  return ok ? 0 : 1;
}
