// A deliberate violation for tests/layering_check.cmake's own test
// (layering.check_catches_a_violation): never compiled.
#include "runtime/driver_table.hpp"

void reaches_past_the_runtime() { (void)cuarrow::detail::driver(); }
