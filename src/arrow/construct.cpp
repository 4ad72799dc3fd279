// Arrays and record batches built from buffers, checked before they are
// returned (validate.hpp: make_array, make_record_batch).
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "arrow_internal.hpp"
#include "cuarrow/arrow/validate.hpp"

namespace cuarrow::arrow {

namespace {

std::string num(std::int64_t v) { return std::to_string(v); }

// One placement for the tree, or device_mismatch naming the buffer that is elsewhere.
void check_one_device(const array_data& a) {
  try {
    (void)placement_of(a);
  } catch (const invalid_data& e) {
    throw device_mismatch(e.what());
  }
}

}  // namespace

array_data make_array(const data_type& type, std::int64_t length, std::vector<buffer> buffers, std::int64_t null_count,
                      std::int64_t offset, std::vector<array_data> children,
                      std::shared_ptr<const array_data> dictionary, const validate_options& options, stream_view s) {
  // Argument shapes first, in pyarrow's words (Array.from_buffers).
  if (length < 0) throw invalid_argument("Array length is negative: " + num(length));
  if (offset < 0) throw invalid_argument("Array offset is negative: " + num(offset));
  if (null_count < -1 || null_count > length) {
    throw invalid_argument("null_count " + num(null_count) + " is outside 0.." + num(length) + " (or -1 for unknown)");
  }
  const type_layout l = layout_of(type);
  const auto want = static_cast<std::int64_t>(l.buffers.size());
  const auto got = static_cast<std::int64_t>(buffers.size());
  if (l.variadic && got < want) {
    throw invalid_argument("Type's expected number of buffers is at least " + num(want) +
                           ", but the passed number is " + num(got) + ".");
  }
  if (!l.variadic && got != want) {
    throw invalid_argument("Type's expected number of buffers (" + num(want) + ") did not match the passed number (" +
                           num(got) + ").");
  }
  if (children.size() != type.children.size()) {
    throw invalid_argument(
        "Type's expected number of children (" + num(static_cast<std::int64_t>(type.children.size())) +
        ") did not match the passed number (" + num(static_cast<std::int64_t>(children.size())) + ").");
  }
  for (std::size_t i = 0; i < children.size(); ++i) {
    if (!(children[i].type == type.children[i].type)) {
      throw invalid_argument("child " + num(static_cast<std::int64_t>(i)) + " (\"" + type.children[i].name +
                             "\") has type " + children[i].type.to_string() + ", the type " + type.to_string() +
                             " needs " + type.children[i].type.to_string());
    }
  }
  if (type.id == type_id::dictionary && !dictionary) {
    throw invalid_argument("a dictionary array of type " + type.to_string() + " needs its dictionary");
  }
  if (type.id != type_id::dictionary && dictionary) {
    throw invalid_argument("a " + type.to_string() + " array has no dictionary");
  }

  array_data a;
  a.type = type;
  a.length = length;
  a.offset = offset;
  a.null_count = null_count;
  if (type.id == type_id::null) {
    a.null_count = length;
  } else if (null_count == -1 && (!l.has_validity || buffers.empty() || buffers[0].size() == 0)) {
    // No bitmap (unions and run-end encoded have none of their own): no nulls, known now.
    a.null_count = 0;
  } else if (null_count > 0 && !l.has_validity) {
    throw invalid_argument("null_count " + num(null_count) + " for a " + type.to_string() +
                           " array, which has no validity bitmap of its own");
  }
  a.buffers = std::move(buffers);
  a.children = std::move(children);
  a.dictionary = std::move(dictionary);
  check_one_device(a);
  validate_options o = options;
  if (o.level == validation_level::none) o.level = validation_level::cheap;
  validate(a, o, s);
  return a;
}

record_batch make_record_batch(arrow::schema schema, std::vector<array_data> columns, const validate_options& options,
                               stream_view s) {
  if (columns.size() != schema.fields.size()) {
    throw invalid_argument(
        "Schema and number of arrays unequal: " + num(static_cast<std::int64_t>(schema.fields.size())) + " fields, " +
        num(static_cast<std::int64_t>(columns.size())) + " arrays");
  }
  const std::int64_t rows = columns.empty() ? 0 : columns[0].length;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    const field& f = schema.fields[i];
    if (!(columns[i].type == f.type)) {
      throw invalid_argument("Column " + num(static_cast<std::int64_t>(i)) +
                             " type not match schema: " + columns[i].type.to_string() + " vs " + f.type.to_string());
    }
    if (columns[i].length != rows) {
      throw invalid_argument("Column " + num(static_cast<std::int64_t>(i)) + " named " + f.name + " expected length " +
                             num(rows) + " but got length " + num(columns[i].length));
    }
  }
  record_batch b;
  b.schema = std::move(schema);
  b.num_rows = rows;
  b.columns = std::move(columns);
  check_one_device(b.to_struct());
  validate_options o = options;
  if (o.level == validation_level::none) o.level = validation_level::cheap;
  validate(b, o, s);
  return b;
}

placed_array make_placed_array(field f, std::int64_t length, std::vector<buffer> buffers, std::int64_t null_count,
                               std::int64_t offset, std::vector<placed_array> children,
                               std::optional<placed_array> dictionary, placement where, const validate_options& options,
                               stream_view s) {
  std::vector<array_data> kids;
  kids.reserve(children.size());
  for (placed_array& c : children) kids.push_back(std::move(c.data));
  std::shared_ptr<const array_data> dict;
  if (dictionary) dict = std::make_shared<const array_data>(std::move(dictionary->data));
  array_data d =
      make_array(f.type, length, std::move(buffers), null_count, offset, std::move(kids), std::move(dict), options, s);
  return placed_array{std::move(f), std::move(d), where};
}

placed_batch make_placed_batch(arrow::schema schema, const std::vector<placed_array>& columns, placement where,
                               const validate_options& options, stream_view s) {
  std::vector<array_data> cols;
  cols.reserve(columns.size());
  for (const placed_array& c : columns) cols.push_back(c.data);
  return placed_batch{make_record_batch(std::move(schema), std::move(cols), options, s), where};
}

}  // namespace cuarrow::arrow
