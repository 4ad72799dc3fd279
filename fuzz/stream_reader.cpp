// libFuzzer target: the stream readers (array_stream_reader,
// device_array_stream_reader) over a producer that does what the input says.
//
// Input: u8 flags (bit 0: device stream; bits 1-3: get_schema, get_next,
// get_last_error NULL; bits 4-5: stream_items 0 batches, 1 arrays, 2-3
// by_schema), u8 the stream's ARROW_DEVICE_* code, u8 get_schema's outcome
// (0 a schema, 1 an errno (u8 follows), 2 a released schema, 3 a
// "+s"-formatted schema of the type whatever it is), the type (see
// read_type), then up to 32 get_next outcomes: u8 op (0 end, 1 an errno
// (u8 follows), 2 an empty array of the type, 3 an empty array of another
// type (the type follows)), for device streams u8 the item's device code
// and u8 its device id.  The input ends in zeros.
//
// What items hold is array_import's subject; here they are empty arrays
// (cuarrow's export of a length-0 array of the type) so that the reader's
// own handling is what varies: callbacks, errors, messages, declared and
// produced device types, the kind of items, and ownership.
//
// Properties: reading never crashes and fails only with cuarrow errors;
// the stream is released exactly once, whatever happened.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "array_types.hpp"
#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/error.hpp"
#include "emulated_driver.hpp"
#include "fuzz_input.hpp"

using namespace cuarrow::arrow;  // NOLINT

namespace {

using cuarrow_fuzz::read_type;

// An empty array of `t` without any buffer.
array_data empty_of(const data_type& t) {
  array_data a;
  a.type = t;
  a.buffers.assign(layout_of(t).buffers.size(), cuarrow::buffer());
  for (const field& f : t.children) a.children.push_back(empty_of(f.type));
  if (t.id == type_id::dictionary && t.value_type) a.dictionary = std::make_shared<array_data>(empty_of(*t.value_type));
  return a;
}

struct producer {
  cuarrow_fuzz::input* in = nullptr;
  data_type type;
  bool device = false;
  int schema_outcome = 0;
  int schema_rc = 0;
  int calls = 0;
  int releases = 0;
  std::string message = "the producer's message";
};

producer* current = nullptr;  // libFuzzer runs one input at a time

int fill_schema(ArrowSchema* out) {
  producer& p = *current;
  switch (p.schema_outcome) {
    case 1: return p.schema_rc;
    case 2: *out = ArrowSchema{}; return 0;
    default: try { export_type(p.type, out);
      } catch (const cuarrow::error&) {
        return EINVAL;  // a type cuarrow cannot export (e.g. a dictionary without values)
      }
      if (p.schema_outcome == 3) out->format = "+s";  // a lie the reader must survive
      return 0;
  }
}

// 0 and an item in `out`, 0 and a released struct at the end, or an errno.
int next_item(ArrowArray* host, ArrowDeviceArray* dev) {
  producer& p = *current;
  cuarrow_fuzz::input& in = *p.in;
  const std::uint8_t op = ++p.calls > 32 ? 0 : in.u8() % 4;
  if (op == 0) {
    if (dev != nullptr) *dev = ArrowDeviceArray{};
    if (host != nullptr) *host = ArrowArray{};
    return 0;
  }
  if (op == 1) return in.u8();
  data_type t = op == 2 ? p.type : read_type(in, 0);
  try {
    if (dev != nullptr) {
      const auto code = static_cast<ArrowDeviceType>(in.u8());
      const std::int64_t id = static_cast<std::int8_t>(in.u8());
      export_device_array(empty_of(t), cuarrow::stream_view(), dev);
      dev->device_type = code;
      dev->device_id = id;
    } else {
      export_array(empty_of(t), host);
    }
  } catch (const cuarrow::error&) {
    return EIO;  // a type cuarrow cannot export empty (e.g. a dictionary without values)
  }
  return 0;
}

template <class Stream>
void fill_stream(Stream& st, std::uint8_t flags) {
  st.get_schema = (flags & 2) ? nullptr : +[](Stream*, ArrowSchema* out) { return fill_schema(out); };
  if constexpr (std::is_same_v<Stream, ArrowDeviceArrayStream>) {
    st.get_next = (flags & 4) ? nullptr : +[](Stream*, ArrowDeviceArray* out) { return next_item(nullptr, out); };
  } else {
    st.get_next = (flags & 4) ? nullptr : +[](Stream*, ArrowArray* out) { return next_item(out, nullptr); };
  }
  st.get_last_error = (flags & 8) ? nullptr : +[](Stream*) -> const char* { return current->message.c_str(); };
  st.release = [](Stream* s) {
    ++current->releases;
    s->release = nullptr;
  };
  st.private_data = nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cuarrow_fuzz::input in(data, size);
  producer p;
  p.in = &in;
  current = &p;
  const std::uint8_t flags = in.u8();
  p.device = (flags & 1) != 0;
  const auto items = static_cast<stream_items>(std::min((flags >> 4) & 3, 2));
  const auto declared = static_cast<ArrowDeviceType>(in.u8());
  p.schema_outcome = in.u8() % 4;
  if (p.schema_outcome == 1) p.schema_rc = in.u8();
  p.type = read_type(in, 0);
  try {
    if (p.device) {
      ArrowDeviceArrayStream st{};
      fill_stream(st, flags);
      st.device_type = declared;
      device_array_stream_reader r(&st, {validation_level::full}, items);
      if (r.reads_batches()) {
        while (r.next()) {
        }
      } else {
        placement where;
        while (r.next_array({}, &where)) {
        }
      }
    } else {
      ArrowArrayStream st{};
      fill_stream(st, flags);
      array_stream_reader r(&st, {validation_level::full}, items);
      owned_schema original = r.take_c_schema();
      if (original.is_released()) cuarrow_fuzz::property_failed("the reader lost the producer's schema");
      if (r.reads_batches()) {
        while (r.next()) {
        }
      } else {
        while (r.next_array()) {
        }
      }
    }
  } catch (const cuarrow::error& e) {
    if (std::getenv("CUARROW_FUZZ_VERBOSE") != nullptr) std::fprintf(stderr, "refused: %s\n", e.what());
  }
  if (p.releases != 1) cuarrow_fuzz::property_failed("the stream was not released exactly once");
  current = nullptr;
  return 0;
}
