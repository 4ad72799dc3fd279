// Builders of host arrays and a seeded generator of random types and arrays,
// for the typed-array tests (there is no pyarrow in C++).
#pragma once

#include <cuarrow/arrow/arrow.hpp>
#include <cuarrow/cuarrow.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace cuarrow_arrow_test {

namespace ca = cuarrow::arrow;

// ---- buffers ---------------------------------------------------------------------

cuarrow::buffer host_bytes(const void* data, std::size_t n);

template <class T>
cuarrow::buffer host_vector(const std::vector<T>& v) {
  return host_bytes(v.data(), v.size() * sizeof(T));
}

// A validity bitmap with `valid` starting at bit `bit_offset` (earlier bits
// random garbage); an empty buffer when `valid` is all true and !force.
cuarrow::buffer bitmap(const std::vector<bool>& valid, std::int64_t bit_offset = 0, bool force = false);
std::int64_t nulls_in(const std::vector<bool>& valid);

// ---- builders (offset 0) -----------------------------------------------------------

template <class T>
ca::array_data primitive(ca::data_type t, const std::vector<std::optional<T>>& v) {
  std::vector<T> values(v.size());
  std::vector<bool> valid(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    valid[i] = v[i].has_value();
    values[i] = v[i].value_or(T{});
  }
  ca::array_data a;
  a.type = std::move(t);
  a.length = static_cast<std::int64_t>(v.size());
  a.null_count = nulls_in(valid);
  a.buffers = {bitmap(valid), host_vector(values)};
  return a;
}

ca::array_data booleans(const std::vector<std::optional<bool>>& v);
// binary / utf8 / large_binary / large_utf8.
ca::array_data strings(ca::data_type t, const std::vector<std::optional<std::string>>& v);
// binary_view / utf8_view; long values go to data buffers of `block` bytes.
ca::array_data string_views(ca::data_type t, const std::vector<std::optional<std::string>>& v, std::size_t block = 40);
// list / large_list / map from offsets (length + 1 of them).
ca::array_data list_array(ca::data_type t, const std::vector<std::int64_t>& offsets, const std::vector<bool>& valid,
                          ca::array_data child);
ca::array_data struct_array(std::vector<ca::field> fields, std::vector<ca::array_data> children,
                            const std::vector<bool>& valid);

// ---- every type, one hand-made array each ---------------------------------------------

// (name, array) for every type of the format table, nested forms included.
std::vector<std::pair<std::string, ca::array_data>> sample_arrays();
// The sample array of that name; throws std::runtime_error for another.
ca::array_data sample(const std::string& name);
// A data_type of every kind (for schema round trips), nested several levels.
std::vector<ca::data_type> sample_types();

// ---- random ----------------------------------------------------------------------------

class random_arrays {
 public:
  explicit random_arrays(std::uint64_t seed) : rng_(seed) {}

  // A random type with up to `depth` levels of nesting.
  ca::data_type type(int depth);
  ca::field field(const std::string& name, int depth);
  // A random valid array of `length` elements; children and the array itself
  // often sliced (non-zero offsets) and padded.
  ca::array_data array(const ca::data_type& t, std::int64_t length);
  // A random slice of `a` (possibly empty, possibly all of it).
  ca::array_data slice(const ca::array_data& a);
  ca::record_batch batch(int columns, std::int64_t rows, int depth);

  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  std::mt19937_64& rng() { return rng_; }

 private:
  ca::array_data generate(const ca::data_type& t, std::int64_t length);
  std::vector<bool> validity(std::int64_t n);
  void set_validity(ca::array_data& a, const std::vector<bool>& valid);
  std::string text(std::int64_t max_len);

  std::mt19937_64 rng_;
};

// ---- device helpers -----------------------------------------------------------------------

// A copy of `a` whose device buffers are read back to host and whose tree is
// compared with `expected`; fails the test with the difference.
::testing::AssertionResult same_values(const ca::array_data& expected, const ca::array_data& actual);
::testing::AssertionResult same_values(const ca::record_batch& expected, const ca::record_batch& actual);

// What `f` throws, as its what(); "(no exception)" when it throws nothing.
std::string message_of(const std::function<void()>& f);

}  // namespace cuarrow_arrow_test
