// ArrowSchema export and import (c_data.hpp states the ownership rules).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <unordered_set>

#include "arrow_internal.hpp"
#include "c_internal.hpp"
#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/error.hpp"

namespace cuarrow::arrow {
namespace {

// Everything an exported ArrowSchema points to.  Children live in
// child_storage; each has its own private data, so a child moved out by the
// consumer stays valid after this node is released.
struct schema_private {
  std::string format;
  std::string name;
  std::string metadata;  // encoded; unused when has_metadata is false
  bool has_metadata = false;
  std::vector<ArrowSchema> child_storage;
  std::vector<ArrowSchema*> child_pointers;
  std::unique_ptr<ArrowSchema> dictionary;

  schema_private() = default;
  schema_private(const schema_private&) = delete;
  schema_private& operator=(const schema_private&) = delete;
  ~schema_private() {
    for (ArrowSchema& c : child_storage) {
      if (c.release != nullptr) c.release(&c);
    }
    if (dictionary && dictionary->release != nullptr) dictionary->release(dictionary.get());
  }
};

void release_schema(ArrowSchema* s) {
  if (s == nullptr || s->release == nullptr) return;
  delete static_cast<schema_private*>(s->private_data);
  s->release = nullptr;
  s->private_data = nullptr;
}

void append_int32(std::string& out, std::int32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}

std::string encode_metadata(const key_value_metadata& md) {
  std::string out;
  append_int32(out, static_cast<std::int32_t>(md.size()));
  for (const auto& [k, v] : md) {
    append_int32(out, static_cast<std::int32_t>(k.size()));
    out += k;
    append_int32(out, static_cast<std::int32_t>(v.size()));
    out += v;
  }
  return out;
}

// Fills `out` completely or throws leaving it untouched.
void fill_schema(const std::string& name, const data_type& type, bool nullable, const key_value_metadata& metadata,
                 ArrowSchema* out) {
  auto p = std::make_unique<schema_private>();
  p->format = to_format(type);
  p->name = name;
  if (!metadata.empty()) {
    p->metadata = encode_metadata(metadata);
    p->has_metadata = true;
  }
  std::int64_t flags = nullable ? ARROW_FLAG_NULLABLE : 0;
  if (type.id == type_id::map && type.keys_sorted) flags |= ARROW_FLAG_MAP_KEYS_SORTED;
  if (type.id == type_id::dictionary && type.ordered) flags |= ARROW_FLAG_DICTIONARY_ORDERED;

  p->child_storage.resize(type.children.size());
  for (ArrowSchema& c : p->child_storage) c.release = nullptr;
  for (std::size_t i = 0; i < type.children.size(); ++i) {
    const field& f = type.children[i];
    fill_schema(f.name, f.type, f.nullable, f.metadata, &p->child_storage[i]);
  }
  for (ArrowSchema& c : p->child_storage) p->child_pointers.push_back(&c);
  if (type.id == type_id::dictionary) {
    if (!type.value_type) throw invalid_argument("export: dictionary type without a value type");
    auto d = std::make_unique<ArrowSchema>();
    d->release = nullptr;
    fill_schema("", *type.value_type, true, {}, d.get());
    p->dictionary = std::move(d);
  }

  out->format = p->format.c_str();
  out->name = p->name.c_str();
  out->metadata = p->has_metadata ? p->metadata.c_str() : nullptr;
  out->flags = flags;
  out->n_children = static_cast<std::int64_t>(p->child_pointers.size());
  out->children = p->child_pointers.empty() ? nullptr : p->child_pointers.data();
  out->dictionary = p->dictionary.get();
  out->release = release_schema;
  out->private_data = p.release();
}

// ---- import ---------------------------------------------------------------------------

}  // namespace

// Decodes ArrowSchema::metadata: an int32 pair count, then for each pair an
// int32 key length, the key bytes, an int32 value length, the value bytes
// (native endianness, no terminator).
//
// The C interface gives the blob no total length (`size` is SIZE_MAX then),
// so what it claims is bounded before anything is read:
//  - a negative count or length is refused (invalid_data naming the entry);
//  - the count is at most max_metadata_pairs, each key and value at most
//    max_metadata_length bytes, the whole blob at most max_metadata_bytes;
//  - nothing is allocated in proportion to the claimed count: the result
//    grows as entries are read;
//  - with a known `size` (fuzzing, tests), nothing past it is read.
// Within these bounds a producer whose blob is shorter than it claims still
// makes this read past its end: the format carries no length to check.
key_value_metadata detail::decode_metadata(const char* md, std::size_t size, const std::string& path) {
  key_value_metadata out;
  if (md == nullptr) return out;
  const std::size_t limit = std::min<std::size_t>(size, static_cast<std::size_t>(max_metadata_bytes));
  constexpr std::size_t no_pair = std::numeric_limits<std::size_t>::max();
  std::size_t pos = 0;  // offset of the next unread byte
  // Names a part of the blob in messages, built only when one is thrown.
  auto part_name = [](const char* part, std::size_t pair) {
    return pair == no_pair ? std::string(part) : std::string(part) + " of pair " + std::to_string(pair);
  };
  // The next `n` bytes, refused if they would end beyond the blob's bound.
  auto take = [&](std::size_t n, const char* part, std::size_t pair) {
    if (n > limit - pos) {
      const std::string why = size <= static_cast<std::size_t>(max_metadata_bytes)
                                  ? "the blob's " + std::to_string(size) + " bytes"
                                  : "the largest metadata accepted (" + std::to_string(max_metadata_bytes) + " bytes)";
      throw invalid_data(path, "metadata " + part_name(part, pair) + " at byte " + std::to_string(pos) + " (" +
                                   std::to_string(n) + " bytes) would end past " + why);
    }
    const char* p = md + pos;
    pos += n;
    return p;
  };
  auto read_length = [&](const char* part, std::size_t pair, std::int32_t most) {
    const std::size_t at = pos;
    std::int32_t v;
    std::memcpy(&v, take(4, part, pair), 4);
    if (v < 0) {
      throw invalid_data(path, "metadata " + part_name(part, pair) + " is negative (" + std::to_string(v) +
                                   ") at byte " + std::to_string(at));
    }
    if (v > most) {
      throw invalid_data(path, "metadata " + part_name(part, pair) + " " + std::to_string(v) + " at byte " +
                                   std::to_string(at) + " is more than the " + std::to_string(most) + " accepted");
    }
    return static_cast<std::size_t>(v);
  };
  const std::size_t n = read_length("pair count", no_pair, max_metadata_pairs);
  out.reserve(std::min<std::size_t>(n, 64));  // a sane bound; further entries grow the vector
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t kl = read_length("key length", i, max_metadata_length);
    std::string key(take(kl, "key", i), kl);
    const std::size_t vl = read_length("value length", i, max_metadata_length);
    std::string value(take(vl, "value", i), vl);
    out.emplace_back(std::move(key), std::move(value));
  }
  return out;
}

namespace {

key_value_metadata decode_metadata(const char* md, const std::string& path) {
  return detail::decode_metadata(md, std::numeric_limits<std::size_t>::max(), path);
}

// What one import has walked: every node once, a bounded number of them.
struct schema_walk {
  std::unordered_set<const ArrowSchema*> seen;
  std::int64_t nodes = 0;

  void enter(const ArrowSchema* s, const std::string& path) {
    if (!seen.insert(s).second) {
      throw invalid_data(path,
                         "this ArrowSchema node is reached a second time: children and dictionaries must "
                         "form a tree (shared or cyclic nodes are refused)");
    }
    if (++nodes > max_schema_nodes) {
      throw invalid_data(path, "the schema has more than " + std::to_string(max_schema_nodes) + " nodes");
    }
  }
};

std::string child_schema_path(const std::string& parent, std::int64_t i, const ArrowSchema* c) {
  std::string s = parent + " \u2192 child " + std::to_string(i);
  if (c != nullptr && c->name != nullptr) s += " (\"" + std::string(c->name) + "\")";
  return s;
}

field read_field_at(const ArrowSchema* s, const std::string& path, int depth, schema_walk& walk) {
  if (s == nullptr) throw invalid_data(path, "null ArrowSchema pointer");
  if (s->release == nullptr) throw invalid_data(path, "the ArrowSchema is released (release == NULL)");
  if (depth > max_schema_depth) {
    throw invalid_data(path, "schema nested more than " + std::to_string(max_schema_depth) + " levels deep");
  }
  walk.enter(s, path);
  if (s->format == nullptr) throw invalid_format("", path, "format is NULL");
  field f;
  f.name = s->name != nullptr ? s->name : "";
  f.nullable = (s->flags & ARROW_FLAG_NULLABLE) != 0;
  f.metadata = decode_metadata(s->metadata, path);
  data_type t = parse_format(s->format, path);

  if (s->n_children < 0) throw invalid_data(path, "negative n_children " + std::to_string(s->n_children));
  if (s->n_children > 0 && s->children == nullptr) {
    throw invalid_data(path, "n_children is " + std::to_string(s->n_children) + " but children is NULL");
  }
  if (s->n_children > max_schema_nodes) {
    throw invalid_data(path, "n_children " + std::to_string(s->n_children) + " is more than the " +
                                 std::to_string(max_schema_nodes) + " nodes a schema may have");
  }
  const int want = required_children(t.id);
  const bool unions = t.id == type_id::sparse_union || t.id == type_id::dense_union;
  if (unions && s->n_children != static_cast<std::int64_t>(t.type_codes.size())) {
    throw invalid_data(path, "union format \"" + std::string(s->format) + "\" declares " +
                                 std::to_string(t.type_codes.size()) + " type codes but the schema has " +
                                 std::to_string(s->n_children) + " children");
  }
  if (want >= 0 && s->n_children != want) {
    throw invalid_data(path, "type " + std::string(to_string(t.id)) + " (format \"" + s->format + "\") has " +
                                 std::to_string(s->n_children) + " children (expected " + std::to_string(want) + ")");
  }
  for (std::int64_t i = 0; i < s->n_children; ++i) {
    const ArrowSchema* c = s->children[i];
    t.children.push_back(read_field_at(c, child_schema_path(path, i, c), depth + 1, walk));
  }
  if (t.id == type_id::map) {
    const data_type& e = t.children[0].type;
    if (e.id != type_id::struct_ || e.children.size() != 2) {
      throw invalid_data(path, "map entries must be a struct of 2 fields (key, value), not " + e.to_string());
    }
    t.keys_sorted = (s->flags & ARROW_FLAG_MAP_KEYS_SORTED) != 0;
  }
  if (t.id == type_id::run_end_encoded) {
    const type_id r = t.children[0].type.id;
    if (r != type_id::int16 && r != type_id::int32 && r != type_id::int64) {
      throw invalid_data(path, "run ends must be int16, int32 or int64, not " + t.children[0].type.to_string());
    }
  }
  if (s->dictionary != nullptr) {
    if (!is_integer(t.id)) {
      throw invalid_format(s->format, path, "a dictionary-encoded field needs an integer index format");
    }
    field values = read_field_at(s->dictionary, detail::dictionary_path(path), depth + 1, walk);
    data_type d(type_id::dictionary);
    d.index_type = t.id;
    d.value_type = std::make_shared<const data_type>(std::move(values.type));
    d.ordered = (s->flags & ARROW_FLAG_DICTIONARY_ORDERED) != 0;
    t = std::move(d);
  }
  f.type = std::move(t);
  return f;
}

std::string root_path(const ArrowSchema& in) {
  if (in.name != nullptr && in.name[0] != '\0') return "field \"" + std::string(in.name) + "\"";
  return "schema";
}

// Releases the struct when it goes out of scope (import always consumes).
struct release_guard {
  ArrowSchema* s;
  ~release_guard() {
    if (s != nullptr && s->release != nullptr) s->release(s);
  }
};

}  // namespace

void export_field(const field& f, ArrowSchema* out) {
  if (out == nullptr) throw invalid_argument("export_field: null output ArrowSchema");
  fill_schema(f.name, f.type, f.nullable, f.metadata, out);
}

void export_type(const data_type& type, ArrowSchema* out) { export_field(field("", type, true), out); }

void export_schema(const arrow::schema& s, ArrowSchema* out) {
  if (out == nullptr) throw invalid_argument("export_schema: null output ArrowSchema");
  fill_schema("", struct_(s.fields), false, s.metadata, out);
}

field read_field(const ArrowSchema& in) {
  schema_walk walk;
  return read_field_at(&in, root_path(in), 0, walk);
}

bool is_struct_schema(const ArrowSchema& in) noexcept {
  return in.format != nullptr && std::string_view(in.format) == "+s";
}

arrow::schema read_schema(const ArrowSchema& in) {
  if (in.release == nullptr) throw invalid_data("schema", "the ArrowSchema is released (release == NULL)");
  if (!is_struct_schema(in)) {
    throw invalid_format(in.format ? in.format : "", "schema", "a record batch schema must be a struct (\"+s\")");
  }
  if (in.n_children < 0 || (in.n_children > 0 && in.children == nullptr)) {
    throw invalid_data("schema", "bad children (n_children " + std::to_string(in.n_children) + ")");
  }
  if (in.n_children > max_schema_nodes) {
    throw invalid_data("schema", "the schema has more than " + std::to_string(max_schema_nodes) + " nodes");
  }
  schema_walk walk;
  walk.enter(&in, "schema");
  arrow::schema out;
  out.metadata = decode_metadata(in.metadata, "schema");
  for (std::int64_t i = 0; i < in.n_children; ++i) {
    const ArrowSchema* c = in.children[i];
    const std::string path =
        detail::column_path(c != nullptr && c->name != nullptr ? c->name : "#" + std::to_string(i));
    out.fields.push_back(read_field_at(c, path, 1, walk));
  }
  return out;
}

field import_field(ArrowSchema* in) {
  if (in == nullptr) throw invalid_argument("import_field: null ArrowSchema pointer");
  release_guard guard{in};
  return read_field(*in);
}

arrow::schema import_schema(ArrowSchema* in) {
  if (in == nullptr) throw invalid_argument("import_schema: null ArrowSchema pointer");
  release_guard guard{in};
  return read_schema(*in);
}

}  // namespace cuarrow::arrow
