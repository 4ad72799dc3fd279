// The array_import target's type grammar: a tag byte, nested types read
// more (shared with the seed writer).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuarrow/arrow/type.hpp"
#include "fuzz_input.hpp"

namespace cuarrow_fuzz {

using namespace cuarrow::arrow;  // NOLINT

inline data_type read_type(cuarrow_fuzz::input& in, int depth) {
  const std::uint8_t tag = in.u8();
  const bool leaf = depth >= 3;
  switch (leaf ? tag % 24 : tag % 40) {
    case 0: return int32();
    case 1: return null();
    case 2: return boolean();
    case 3: return int8();
    case 4: return uint16();
    case 5: return int64();
    case 6: return float64();
    case 7: return decimal(38, 2, 128);
    case 8: return decimal(60, 3, 256);
    case 9: return date32();
    case 10: return timestamp(time_unit::micro, "UTC");
    case 11: return interval_month_day_nano();
    case 12: return interval_day_time();
    case 13: return fixed_size_binary(1 + in.u8() % 32);
    case 14: return binary();
    case 15: return utf8();
    case 16: return large_binary();
    case 17: return large_utf8();
    case 18: return binary_view();
    case 19: return utf8_view();
    case 20: return float16();
    case 21: return uint64();
    case 22: return time64(time_unit::nano);
    case 23: return duration(time_unit::milli);
    case 24: return list(field("item", read_type(in, depth + 1)));
    case 25: return large_list(field("item", read_type(in, depth + 1)));
    case 26: return list_view(field("item", read_type(in, depth + 1)));
    case 27: return large_list_view(field("item", read_type(in, depth + 1)));
    case 28: return fixed_size_list(field("item", read_type(in, depth + 1)), in.u8() % 5);
    case 29:
    case 30: {
      std::vector<field> fs;
      const int n = in.u8() % 4;
      for (int i = 0; i < n; ++i)
        fs.emplace_back("f" + std::to_string(i), read_type(in, depth + 1), (in.u8() & 1) != 0);
      return struct_(std::move(fs));
    }
    case 31: {
      data_type k = read_type(in, depth + 1);
      return map(std::move(k), read_type(in, depth + 1), false, (in.u8() & 1) != 0);
    }
    case 32:
    case 33: {
      std::vector<field> fs;
      std::vector<std::int8_t> codes;
      const int n = 1 + in.u8() % 3;
      for (int i = 0; i < n; ++i) {
        fs.emplace_back("u" + std::to_string(i), read_type(in, depth + 1));
        codes.push_back(static_cast<std::int8_t>(in.u8() % 128));
      }
      std::sort(codes.begin(), codes.end());
      codes.erase(std::unique(codes.begin(), codes.end()), codes.end());
      if (codes.size() != fs.size()) codes.clear();  // the default codes 0..n-1
      return (tag % 40) == 32 ? sparse_union(std::move(fs), std::move(codes))
                              : dense_union(std::move(fs), std::move(codes));
    }
    case 34: {
      const std::uint8_t r = in.u8() % 3;
      return run_end_encoded(r == 0 ? int16() : r == 1 ? int32() : int64(), read_type(in, depth + 1));
    }
    case 35:
    case 36: {
      const std::uint8_t r = in.u8() % 4;
      return dictionary(r == 0 ? int8() : r == 1 ? int16() : r == 2 ? int32() : uint8(), read_type(in, depth + 1));
    }
    default: return read_type(in, depth + 1);
  }
}

}  // namespace cuarrow_fuzz
