// The LLVMFuzzerInitialize of the fuzz targets that reach the driver: cuarrow
// runs on the host emulation with one device, unless the environment names a
// driver.  Include it once, in the target's one source file (it defines the
// function).
#pragma once

#include <cstdlib>

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("CUARROW_CUDA_DRIVER", "emulated", 0);
  setenv("CUARROW_EMULATED_DEVICES", "1", 0);
  return 0;
}
