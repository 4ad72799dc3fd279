#include <cstdlib>
#include <string>

#include "child_process.hpp"
#include "test_support.hpp"

TEST(Driver, LoadsTheSelectedDriver) {
  const char* env = std::getenv("CUARROW_CUDA_DRIVER");
  const bool want_emulation = env != nullptr && std::string(env) == "emulated";
  EXPECT_EQ(cuarrow::driver_is_emulated(), want_emulation);
  EXPECT_GE(cuarrow::driver_version(), 12000);
  EXPECT_FALSE(cuarrow::driver_path().empty());
}

TEST(Driver, SelectingAnotherDriverAfterLoadingIsRefused) {
  const std::string other = cuarrow::driver_is_emulated() ? "libcuda.so.1" : "emulated";
  try {
    cuarrow::select_driver(other);
    FAIL() << "select_driver accepted a second driver";
  } catch (const cuarrow::error& e) {
    EXPECT_NE(std::string(e.what()).find("already loaded"), std::string::npos) << e.what();
  }
  // Selecting the driver already in use is harmless.
  EXPECT_NO_THROW(cuarrow::select_driver(cuarrow::driver_is_emulated() ? "emulated" : cuarrow::driver_path()));
}

// The probe of the real driver answers beside the loaded one: on the
// emulation machine (no libcuda.so.1) 0 devices and why; on a GPU machine
// the devices the real driver sees.  The loaded driver is unchanged.
TEST(Driver, ProbeOfTheRealDriverAnswersBesideTheLoadedOne) {
  const bool emulated = cuarrow::driver_is_emulated();
  const std::string path = cuarrow::driver_path();
  const cuarrow::driver_probe p = cuarrow::probe_real_driver();
  EXPECT_GE(p.devices, 0);
  if (p.devices == 0) {
    EXPECT_FALSE(p.reason.empty());
  } else {
    EXPECT_TRUE(p.reason.empty()) << p.reason;
    if (!emulated) {
      EXPECT_EQ(p.devices, cuarrow::device_count());
    }
  }
  EXPECT_EQ(cuarrow::driver_is_emulated(), emulated);
  EXPECT_EQ(cuarrow::driver_path(), path);
}

TEST(Driver, CudaErrorsCarryCodeNameAndOperation) {
  // A copy the driver rejects: pageable host memory has no device address.
  cuarrow::context ctx = cuarrow::context::get(0);
  int local = 0;
  try {
    (void)ctx.get_device_address(&local);
    FAIL() << "get_device_address accepted pageable memory";
  } catch (const cuarrow::cuda_error& e) {
    EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(e.name(), "CUDA_ERROR_INVALID_VALUE");
    EXPECT_NE(e.operation().find("cuPointerGetAttribute"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("failed: CUDA_ERROR_INVALID_VALUE (1): "), std::string::npos) << e.what();
  }
}

// A driver too old for cuarrow (the emulation playing CUDA 11.8): loading
// it is a driver_error that names its version and what to do, not a crash
// at the first call of an entry point it lacks.
CUARROW_CHILD_MODE(driver_too_old) {
  try {
    cuarrow::load_driver();
  } catch (const cuarrow::driver_error& e) {
    std::printf("ERROR: %s\n", e.what());
    return 0;
  }
  std::printf("LOADED\n");
  return 1;
}

TEST(Driver, ADriverOlderThanCuda12IsRefusedSayingSo) {
  if (!cuarrow::driver_is_emulated()) GTEST_SKIP() << "the emulation plays the old driver (no GPU involved)";
  const cuarrow_test::child_result r =
      cuarrow_test::run_self("driver_too_old", {}, {{"CUARROW_EMULATED_DRIVER_VERSION", "11080"}});
  ASSERT_TRUE(r.ok()) << "exit " << r.code << " signal " << r.signal << "\n" << r.output;
  EXPECT_NE(r.output.find("(version 11.8) is too old"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Update the NVIDIA driver"), std::string::npos) << r.output;
}
