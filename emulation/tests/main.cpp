// Test entry point.  "--emu-child=<mode> args..." runs one of the child modes
// (a fresh process with its own emulated machine); otherwise the GoogleTest
// suite runs on an emulated machine of two 256 MiB devices, configured here
// before anything calls cuInit so that a direct run and a ctest run agree.
#include <cstdlib>
#include <cstring>
#include <string>

#include "support.hpp"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strncmp(argv[1], "--emu-child=", 12) == 0)
    return emu_test::run_child_mode(argv[1] + 12, argc - 2, argv + 2);

  setenv("CUARROW_EMULATED_DEVICES", std::to_string(emu_test::kDevices).c_str(), 1);
  setenv("CUARROW_EMULATED_MEMORY", "256M", 1);
  unsetenv("CUARROW_EMULATED_OP_DELAY_US");
  unsetenv("CUARROW_EMULATED_NO_POOLS");
  unsetenv("CUARROW_EMULATED_NO_PEER");

  testing::InitGoogleTest(&argc, argv);
  // Death tests re-execute the binary: safe with the driver's threads.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
