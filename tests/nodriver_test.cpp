// With no usable driver, loading the library works and the first call that
// needs the driver fails with a clear driver_error, every time it is tried.
#include <gtest/gtest.h>

#include <cuarrow/cuarrow.hpp>

#include <string>

TEST(NoDriver, FirstUseThrowsClearError) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      (void)cuarrow::device_count();
      FAIL() << "device_count() succeeded without a driver";
    } catch (const cuarrow::driver_error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("no CUDA driver found (/nonexistent/libcuda.so.1)"), std::string::npos) << m;
      EXPECT_NE(m.find("CUARROW_CUDA_DRIVER=emulated"), std::string::npos) << m;
    }
  }
  EXPECT_THROW(cuarrow::context::get(0), cuarrow::driver_error);
  EXPECT_FALSE(cuarrow::driver_is_emulated());
}

TEST(NoDriver, HostBuffersNeedNoDriver) {
  cuarrow::buffer b = cuarrow::allocate_host(100);
  EXPECT_EQ(b.size(), 100);
  EXPECT_TRUE(b.is_cpu());
  b.mutable_host_data()[99] = std::byte{1};
  cuarrow::buffer c = cuarrow::allocate_host(100);
  cuarrow::copy(c, 0, b, 0, 100);  // host to host: no driver call
  EXPECT_EQ(c.host_data()[99], std::byte{1});
}

TEST(NoDriver, SelectDriverBeforeFirstUseIsHonoured) {
  // The earlier failed load leaves nothing loaded, so another choice may be made.
  cuarrow::select_driver("/also/missing/libcuda.so");
  try {
    cuarrow::load_driver();
    FAIL() << "load_driver() succeeded";
  } catch (const cuarrow::driver_error& e) {
    EXPECT_NE(std::string(e.what()).find("/also/missing/libcuda.so"), std::string::npos) << e.what();
  }
}

// probe_real_driver asks libcuda.so.1 on its own: it neither loads nor
// chooses cuarrow's driver, so the choice stays open after it.
TEST(NoDriver, ProbeLeavesTheDriverChoiceOpen) {
  const cuarrow::driver_probe p = cuarrow::probe_real_driver();
  if (p.devices == 0) {
    EXPECT_FALSE(p.reason.empty());
  } else {
    EXPECT_TRUE(p.reason.empty()) << p.reason;
  }
  if (p.reason.rfind("no CUDA driver is installed (", 0) == 0) {
    EXPECT_NE(p.reason.find("libcuda.so.1"), std::string::npos) << p.reason;  // dlerror's text names it
  }
  EXPECT_FALSE(cuarrow::driver_is_emulated());
  cuarrow::select_driver("/still/missing/libcuda.so");  // throws if anything had been loaded
  try {
    cuarrow::load_driver();
    FAIL() << "load_driver() succeeded";
  } catch (const cuarrow::driver_error& e) {
    EXPECT_NE(std::string(e.what()).find("/still/missing/libcuda.so"), std::string::npos) << e.what();
  }
}

// Run with CUARROW_EMULATED_DEVICES=0: a driver that has no device.
TEST(NoDevice, CountIsZeroAndContextsAreAClearError) {
  EXPECT_EQ(cuarrow::device_count(), 0);
  EXPECT_EQ(cuarrow::device_count(), 0);
  try {
    (void)cuarrow::context::get(0);
    FAIL() << "context::get(0) succeeded without a device";
  } catch (const cuarrow::driver_error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device found"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(cuarrow::driver_is_emulated());
}
