// The C Data Interface's format strings (ArrowSchema.format): to_format
// writes the one of a type, parse_format reads one back.  The codec of
// c_schema.cpp's export and import; the type layer (type.cpp) does not use it.
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "arrow_internal.hpp"
#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/arrow/type.hpp"
#include "cuarrow/error.hpp"

namespace cuarrow::arrow {

namespace {

char unit_char(time_unit u) {
  switch (u) {
    case time_unit::second: return 's';
    case time_unit::milli: return 'm';
    case time_unit::micro: return 'u';
    case time_unit::nano: return 'n';
  }
  return '?';
}

std::optional<time_unit> unit_from(char c) {
  switch (c) {
    case 's': return time_unit::second;
    case 'm': return time_unit::milli;
    case 'u': return time_unit::micro;
    case 'n': return time_unit::nano;
    default: return std::nullopt;
  }
}

const char* integer_format(type_id id) {
  switch (id) {
    case type_id::int8: return "c";
    case type_id::uint8: return "C";
    case type_id::int16: return "s";
    case type_id::uint16: return "S";
    case type_id::int32: return "i";
    case type_id::uint32: return "I";
    case type_id::int64: return "l";
    case type_id::uint64: return "L";
    default: return "?";
  }
}

}  // namespace

std::string to_format(const data_type& t) {
  switch (t.id) {
    case type_id::null: return "n";
    case type_id::boolean: return "b";
    case type_id::int8:
    case type_id::uint8:
    case type_id::int16:
    case type_id::uint16:
    case type_id::int32:
    case type_id::uint32:
    case type_id::int64:
    case type_id::uint64: return integer_format(t.id);
    case type_id::float16: return "e";
    case type_id::float32: return "f";
    case type_id::float64: return "g";
    case type_id::decimal128: return "d:" + std::to_string(t.precision) + "," + std::to_string(t.scale);
    case type_id::decimal32:
    case type_id::decimal64:
    case type_id::decimal256:
      return "d:" + std::to_string(t.precision) + "," + std::to_string(t.scale) + "," + std::to_string(bit_width(t));
    case type_id::date32: return "tdD";
    case type_id::date64: return "tdm";
    case type_id::time32:
    case type_id::time64: return std::string("tt") + unit_char(t.unit);
    case type_id::timestamp: return std::string("ts") + unit_char(t.unit) + ":" + t.timezone;
    case type_id::duration: return std::string("tD") + unit_char(t.unit);
    case type_id::interval_months: return "tiM";
    case type_id::interval_day_time: return "tiD";
    case type_id::interval_month_day_nano: return "tin";
    case type_id::fixed_size_binary: return "w:" + std::to_string(t.fixed_size);
    case type_id::binary: return "z";
    case type_id::large_binary: return "Z";
    case type_id::utf8: return "u";
    case type_id::large_utf8: return "U";
    case type_id::binary_view: return "vz";
    case type_id::utf8_view: return "vu";
    case type_id::list: return "+l";
    case type_id::large_list: return "+L";
    case type_id::list_view: return "+vl";
    case type_id::large_list_view: return "+vL";
    case type_id::fixed_size_list: return "+w:" + std::to_string(t.fixed_size);
    case type_id::struct_: return "+s";
    case type_id::map: return "+m";
    case type_id::sparse_union:
    case type_id::dense_union: {
      std::string s = t.id == type_id::sparse_union ? "+us:" : "+ud:";
      for (std::size_t i = 0; i < t.type_codes.size(); ++i) {
        if (i) s += ",";
        s += std::to_string(t.type_codes[i]);
      }
      return s;
    }
    case type_id::run_end_encoded: return "+r";
    case type_id::dictionary: return integer_format(t.index_type);
  }
  throw invalid_argument("to_format: unknown type id " + std::to_string(static_cast<int>(t.id)));
}

namespace {

// Parses an integer that fills `s` entirely (optionally signed).
std::optional<std::int32_t> parse_int(std::string_view s, bool allow_sign) {
  if (s.empty()) return std::nullopt;
  if (!allow_sign && (s[0] == '-' || s[0] == '+')) return std::nullopt;
  if (s[0] == '+') return std::nullopt;
  std::int32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    std::size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

}  // namespace

data_type parse_format(std::string_view format, std::string_view path) {
  auto fail = [&](const std::string& why) -> invalid_format {
    return invalid_format(std::string(format), std::string(path), why);
  };
  auto simple = [](type_id id) { return data_type(id); };

  if (format.empty()) throw fail("empty format string");
  if (format.size() == 1) {
    switch (format[0]) {
      case 'n': return simple(type_id::null);
      case 'b': return simple(type_id::boolean);
      case 'c': return simple(type_id::int8);
      case 'C': return simple(type_id::uint8);
      case 's': return simple(type_id::int16);
      case 'S': return simple(type_id::uint16);
      case 'i': return simple(type_id::int32);
      case 'I': return simple(type_id::uint32);
      case 'l': return simple(type_id::int64);
      case 'L': return simple(type_id::uint64);
      case 'e': return simple(type_id::float16);
      case 'f': return simple(type_id::float32);
      case 'g': return simple(type_id::float64);
      case 'z': return simple(type_id::binary);
      case 'Z': return simple(type_id::large_binary);
      case 'u': return simple(type_id::utf8);
      case 'U': return simple(type_id::large_utf8);
      default: break;
    }
    throw fail("unknown format");
  }
  if (format == "vz") return simple(type_id::binary_view);
  if (format == "vu") return simple(type_id::utf8_view);

  if (format.substr(0, 2) == "d:") {
    auto parts = split(format.substr(2), ',');
    if (parts.size() != 2 && parts.size() != 3) throw fail("decimal needs \"d:precision,scale[,bitwidth]\"");
    auto precision = parse_int(parts[0], false);
    auto scale = parse_int(parts[1], true);
    std::optional<std::int32_t> bits = 128;
    if (parts.size() == 3) bits = parse_int(parts[2], false);
    if (!precision || !scale || !bits) throw fail("decimal needs \"d:precision,scale[,bitwidth]\" with integers");
    if (std::string why = detail::decimal_problem(*precision, *bits); !why.empty()) throw fail(why);
    return decimal(*precision, *scale, *bits);
  }
  if (format.substr(0, 2) == "w:") {
    auto width = parse_int(format.substr(2), false);
    if (!width) throw fail("fixed-size binary needs \"w:bytes\" with a non-negative integer");
    return fixed_size_binary(*width);
  }

  if (format[0] == 't') {
    if (format == "tdD") return simple(type_id::date32);
    if (format == "tdm") return simple(type_id::date64);
    if (format == "tts") return time32(time_unit::second);
    if (format == "ttm") return time32(time_unit::milli);
    if (format == "ttu") return time64(time_unit::micro);
    if (format == "ttn") return time64(time_unit::nano);
    if (format == "tiM") return simple(type_id::interval_months);
    if (format == "tiD") return simple(type_id::interval_day_time);
    if (format == "tin") return simple(type_id::interval_month_day_nano);
    if (format.size() == 3 && format[1] == 'D') {
      if (auto u = unit_from(format[2])) return duration(*u);
      throw fail("duration unit must be s, m, u or n");
    }
    if (format.size() >= 3 && format[1] == 's') {
      auto u = unit_from(format[2]);
      if (!u) throw fail("timestamp unit must be s, m, u or n");
      if (format.size() < 4 || format[3] != ':') throw fail("timestamp needs \"ts<unit>:[timezone]\"");
      return timestamp(*u, std::string(format.substr(4)));
    }
    throw fail("unknown temporal format");
  }

  if (format[0] == '+') {
    if (format == "+l") return simple(type_id::list);
    if (format == "+L") return simple(type_id::large_list);
    if (format == "+vl") return simple(type_id::list_view);
    if (format == "+vL") return simple(type_id::large_list_view);
    if (format == "+s") return simple(type_id::struct_);
    if (format == "+m") return simple(type_id::map);
    if (format == "+r") return simple(type_id::run_end_encoded);
    if (format.substr(0, 3) == "+w:") {
      auto n = parse_int(format.substr(3), false);
      if (!n) throw fail("fixed-size list needs \"+w:size\" with a non-negative integer");
      data_type t(type_id::fixed_size_list);
      t.fixed_size = *n;
      return t;
    }
    if (format.substr(0, 4) == "+ud:" || format.substr(0, 4) == "+us:") {
      data_type t(format[2] == 'd' ? type_id::dense_union : type_id::sparse_union);
      std::string_view codes = format.substr(4);
      if (!codes.empty()) {
        for (std::string_view part : split(codes, ',')) {
          auto c = parse_int(part, true);
          if (!c || *c < 0 || *c > 127) throw fail("union type codes must be integers between 0 and 127");
          t.type_codes.push_back(static_cast<std::int8_t>(*c));
        }
      }
      if (std::string why = detail::union_codes_problem(t.type_codes, t.type_codes.size()); !why.empty())
        throw fail(why);
      return t;
    }
    throw fail("unknown nested format");
  }
  throw fail("unknown format");
}

}  // namespace cuarrow::arrow
