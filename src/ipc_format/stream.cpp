// Arrow IPC streams and files held in memory (include/cuarrow/ipc/stream.hpp).
#include "cuarrow/ipc/stream.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>

#include "copy_sources.hpp"
#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/error.hpp"
#include "cuarrow/ipc/metadata.hpp"
#include "device_gather.hpp"
#include "ipc_format/writer.hpp"
#include "message_io.hpp"

namespace cuarrow::ipc {
namespace detail {

std::string message_at(std::int64_t offset) { return "message at offset " + std::to_string(offset); }

void check_batch_index(int i, int n) {
  if (i < 0 || i >= n) {
    throw out_of_range("Batch number " + std::to_string(i) + " out of range: the file has " + std::to_string(n) +
                       " record batches (0 <= i < " + std::to_string(n) + ")");
  }
}

const char* kind_name(message_kind k) {
  switch (k) {
    case message_kind::none: return "NONE";
    case message_kind::schema: return "Schema";
    case message_kind::dictionary_batch: return "DictionaryBatch";
    case message_kind::record_batch: return "RecordBatch";
    case message_kind::tensor: return "Tensor";
    case message_kind::sparse_tensor: return "SparseTensor";
  }
  return "unknown";
}

// default_first_read: prefix and metadata in one copy for every message
// whose metadata is shorter (schemas of a few hundred fields).
std::optional<framed_metadata> read_framed_metadata(const read_bytes_fn& read, std::int64_t offset,
                                                    std::int64_t source_size, std::int64_t first_read,
                                                    std::string_view file) {
  const auto source = [&] { return file.empty() ? std::string("the source") : "file \"" + std::string(file) + "\""; };
  if (offset < 0 || offset > source_size) {
    throw invalid_message(message_at(offset), "outside " + source() + " of " + std::to_string(source_size) + " bytes");
  }
  if (offset == source_size) return std::nullopt;
  const std::int64_t left = source_size - offset;
  std::vector<std::byte> head = read(offset, std::min(left, std::max<std::int64_t>(first_read, 8)));
  const std::string where = message_at(offset);  // once a message, not once a check
  const message_prefix prefix = read_message_prefix(head, where);
  if (prefix.end_of_stream()) return std::nullopt;
  if (prefix.size() > left) {
    throw invalid_message(where, "metadata of " + std::to_string(prefix.metadata_length) +
                                     " bytes runs past the end of " + source() + " (" + std::to_string(left) +
                                     " bytes left)");
  }
  if (prefix.size() > static_cast<std::int64_t>(head.size())) head = read(offset, prefix.size());
  const std::span<const std::byte> framed(head.data(), static_cast<std::size_t>(prefix.size()));
  const encapsulated_metadata e = read_encapsulated_metadata(framed, where);
  framed_metadata m;
  m.metadata = read_message_metadata(e.flatbuffer);
  m.flatbuffer.assign(e.flatbuffer.begin(), e.flatbuffer.end());
  m.metadata_size = prefix.size();
  const std::int64_t body_length = m.metadata.body_length;
  if (body_length < 0 || body_length > left - prefix.size()) {
    throw invalid_message(where, "body of " + std::to_string(body_length) + " bytes runs past the end of " + source() +
                                     " (" + std::to_string(left - prefix.size()) + " bytes left)");
  }
  return m;
}

void check_block(const file_block& b, std::int64_t metadata_size, std::int64_t body_size, const std::string& where) {
  if (metadata_size != b.metadata_length || body_size != b.body_length) {
    throw invalid_message(where, "the footer says " + std::to_string(b.metadata_length) + " bytes of metadata and " +
                                     std::to_string(b.body_length) + " of body, the message " +
                                     std::to_string(metadata_size) + " and " + std::to_string(body_size));
  }
}

void expect_kind(message_kind got, message_kind want, const std::string& where) {
  if (got != want) {
    throw invalid_message(where, std::string("holds a ") + kind_name(got) + " message, not a " + kind_name(want));
  }
}

read_options for_version(const read_options& options, metadata_version v) {
  read_options o = options;
  o.version = v;
  return o;
}

}  // namespace detail

namespace {

using detail::kind_name;

std::vector<std::byte> read_bytes(const buffer& source, std::int64_t offset, std::int64_t size, stream_view s) {
  std::vector<std::byte> out(static_cast<std::size_t>(size));
  if (size > 0) copy_to_host(out.data(), source, offset, size, s);
  return out;
}

read_options for_message(const read_options& options, const message& m) {
  return detail::for_version(options, m.metadata.version);
}

}  // namespace

std::optional<message> read_message(const buffer& source, std::int64_t offset, stream_view s) {
  std::optional<detail::framed_metadata> f = detail::read_framed_metadata(
      [&](std::int64_t at, std::int64_t n) { return read_bytes(source, at, n, s); }, offset, source.size());
  if (!f) return std::nullopt;
  message m;
  m.metadata = std::move(f->metadata);
  m.flatbuffer = std::move(f->flatbuffer);
  m.body = source.slice(offset + f->metadata_size, m.metadata.body_length);
  m.offset = offset;
  m.size = f->metadata_size + m.metadata.body_length;
  return m;
}

std::vector<std::byte> serialize_to_host(const message& m, stream_view s) {
  std::vector<std::byte> out = encapsulate(m.flatbuffer);
  const std::size_t head = out.size();
  out.resize(head + static_cast<std::size_t>(m.body.size()));
  if (m.body.size() > 0) copy_to_host(out.data() + head, m.body, 0, m.body.size(), s);
  return out;
}

arrow::record_batch read_record_batch(const message& m, arrow::schema schema, const dictionary_memo* dictionaries) {
  const record_batch_header& h = m.metadata.record_batch("IPC read_record_batch");
  schema_message s;
  s.schema = std::move(schema);
  if (dictionaries != nullptr) s.dictionaries = dictionaries->fields();
  static const dictionary_memo none;
  read_options o;
  o.version = m.metadata.version;
  return read_record_batch(h, s, m.body, dictionaries != nullptr ? *dictionaries : none, o);
}

void read_dictionary(dictionary_memo& dictionaries, const message& m) {
  read_options o;
  o.version = m.metadata.version;
  dictionaries.read(m.metadata.dictionary_batch("IPC dictionary memo"), m.body, o);
}

// ---- stream_reader ----------------------------------------------------------------

stream_reader::stream_reader(buffer source, read_options options)
    : source_(std::move(source)), options_(std::move(options)) {
  std::optional<message> m = read_message(source_, 0, options_.stream);
  if (!m) throw invalid_message("stream", "empty: no schema message");
  if (m->kind() != message_kind::schema) {
    throw invalid_message(
        "stream", std::string("starts with a ") + kind_name(m->kind()) + " message; a stream starts with its Schema");
  }
  schema_ = std::get<schema_message>(m->metadata.header);
  memo_ = dictionary_memo(schema_);
  position_ = m->size;
}

std::optional<arrow::record_batch> stream_reader::read_next() {
  std::optional<batch_with_metadata> b = read_next_with_custom_metadata();
  if (!b) return std::nullopt;
  return std::move(b->batch);
}

std::optional<batch_with_metadata> stream_reader::read_next_with_custom_metadata() {
  while (!done_) {
    const std::int64_t where = position_;
    std::optional<message> m = read_message(source_, where, options_.stream);
    if (!m) {
      done_ = true;
      return std::nullopt;
    }
    position_ += m->size;
    switch (m->kind()) {
      case message_kind::dictionary_batch:
        memo_.read(std::get<dictionary_batch_header>(m->metadata.header), m->body, for_message(options_, *m));
        break;
      case message_kind::record_batch:
        return batch_with_metadata{read_record_batch(std::get<record_batch_header>(m->metadata.header), schema_,
                                                     m->body, memo_, for_message(options_, *m)),
                                   std::move(m->metadata.custom_metadata)};
      default:
        throw invalid_message(detail::message_at(where),
                              std::string("a ") + kind_name(m->kind()) +
                                  " message inside a stream (only dictionary and record batches follow "
                                  "the schema)");
    }
  }
  return std::nullopt;
}

std::vector<arrow::record_batch> stream_reader::read_all() {
  // The record batch messages up to the next dictionary batch (which
  // changes the dictionaries the batches before it are built with) or the
  // end, built and validated together: one batched read of their offsets
  // and one synchronization for the run, not one per batch.
  std::vector<arrow::record_batch> out;
  std::vector<message> pending;
  auto flush = [&] {
    std::vector<detail::batch_body> items;
    items.reserve(pending.size());
    for (std::size_t k = 0; k < pending.size(); ++k) {
      items.push_back({&std::get<record_batch_header>(pending[k].metadata.header), pending[k].body,
                       for_message(options_, pending[k])});
    }
    for (arrow::record_batch& b : detail::read_record_batches(items, schema_, memo_)) out.push_back(std::move(b));
    pending.clear();
  };
  while (!done_) {
    const std::int64_t where = position_;
    std::optional<message> m = read_message(source_, where, options_.stream);
    if (!m) {
      done_ = true;
      break;
    }
    position_ = where + m->size;
    switch (m->kind()) {
      case message_kind::dictionary_batch:
        flush();
        memo_.read(std::get<dictionary_batch_header>(m->metadata.header), m->body, for_message(options_, *m));
        break;
      case message_kind::record_batch: pending.push_back(std::move(*m)); break;
      default:
        throw invalid_message(detail::message_at(where),
                              std::string("a ") + kind_name(m->kind()) +
                                  " message inside a stream (only dictionary and record batches follow "
                                  "the schema)");
    }
  }
  flush();
  return out;
}

// ---- file_reader --------------------------------------------------------------------

file_reader::file_reader(buffer source, read_options options)
    : source_(std::move(source)), options_(std::move(options)) {
  const std::int64_t size = source_.size();
  if (size < file_header_size + file_trailer_size) {
    throw invalid_message("file", std::to_string(size) + " bytes: too short for an Arrow IPC file (magic, footer)");
  }
  check_file_magic(read_bytes(source_, 0, file_header_size, options_.stream));
  const std::vector<std::byte> trailer =
      read_bytes(source_, size - file_trailer_size, file_trailer_size, options_.stream);
  const std::int32_t footer_length = read_footer_length(trailer, size);
  const std::vector<std::byte> footer =
      read_bytes(source_, size - file_trailer_size - footer_length, footer_length, options_.stream);
  footer_ = read_footer(footer, size);
  memo_ = dictionary_memo(footer_.schema);
  for (std::size_t i = 0; i < footer_.dictionaries.size(); ++i) {
    const message m = read_block(footer_.dictionaries[i], "dictionary", i);
    detail::expect_kind(m.kind(), message_kind::dictionary_batch, "file dictionary block " + std::to_string(i));
    const auto& h = std::get<dictionary_batch_header>(m.metadata.header);
    memo_.read(h, m.body, for_message(options_, m));
  }
}

message file_reader::read_block(const file_block& b, const char* what, std::size_t index) const {
  const std::string where = std::string("file ") + what + " block " + std::to_string(index);
  std::optional<message> m = read_message(source_, b.offset, options_.stream);
  if (!m) throw invalid_message(where, "holds the end-of-stream marker, not a message");
  detail::check_block(b, m->size - m->body.size(), m->body.size(), where);
  return std::move(*m);
}

arrow::record_batch file_reader::read_batch(int i) const { return read_batch_with_custom_metadata(i).batch; }

batch_with_metadata file_reader::read_batch_with_custom_metadata(int i) const {
  detail::check_batch_index(i, num_record_batches());
  const message m =
      read_block(footer_.record_batches[static_cast<std::size_t>(i)], "record batch", static_cast<std::size_t>(i));
  detail::expect_kind(m.kind(), message_kind::record_batch, "file record batch block " + std::to_string(i));
  return {read_record_batch(std::get<record_batch_header>(m.metadata.header), footer_.schema, m.body, memo_,
                            for_message(options_, m)),
          m.metadata.custom_metadata};
}

std::vector<arrow::record_batch> file_reader::read_all() const {
  // Every batch's message, then the batches built and validated together
  // (one batched read of their offsets, one synchronization).
  std::vector<message> messages;
  messages.reserve(footer_.record_batches.size());
  for (std::size_t i = 0; i < footer_.record_batches.size(); ++i) {
    messages.push_back(read_block(footer_.record_batches[i], "record batch", i));
    detail::expect_kind(messages.back().kind(), message_kind::record_batch,
                        "file record batch block " + std::to_string(i));
  }
  std::vector<detail::batch_body> items;
  items.reserve(messages.size());
  for (const message& m : messages) {
    items.push_back({&std::get<record_batch_header>(m.metadata.header), m.body, for_message(options_, m)});
  }
  return detail::read_record_batches(items, footer_.schema, memo_);
}

// ---- writing ----------------------------------------------------------------------

namespace {

bool contains_dictionary(const arrow::data_type& t) {
  if (t.id == arrow::type_id::dictionary) return true;
  for (const arrow::field& c : t.children) {
    if (contains_dictionary(c.type)) return true;
  }
  return false;
}

// Dictionary ids as Arrow C++ numbers them: depth first over the fields,
// from 0.  Dictionaries inside a dictionary's values are not written yet.
void number_dictionaries(const arrow::data_type& t, std::vector<int>& path, std::vector<dictionary_field>& out) {
  if (t.id == arrow::type_id::dictionary) {
    if (contains_dictionary(t.values())) {
      throw invalid_argument("IPC writer: a dictionary whose values are dictionary-encoded (" + t.to_string() +
                             ") is not written yet");
    }
    out.push_back(dictionary_field{static_cast<std::int64_t>(out.size()), path});
    return;
  }
  for (std::size_t c = 0; c < t.children.size(); ++c) {
    path.push_back(static_cast<int>(c));
    number_dictionaries(t.children[c].type, path, out);
    path.pop_back();
  }
}

// The dictionary array at `path` of a batch (its columns, then children).
const arrow::array_data& array_at(const arrow::record_batch& batch, const std::vector<int>& path) {
  const arrow::array_data* a = &batch.columns.at(static_cast<std::size_t>(path.front()));
  for (std::size_t k = 1; k < path.size(); ++k) a = &a->children.at(static_cast<std::size_t>(path[k]));
  return *a;
}

// Messages laid end to end in one device allocation: the metadata from
// host bytes, the bodies from the batches' buffers, each piece at its place.
//
// Early (a stream_writer's, where the gather kernel takes the copies): the
// allocation is made when the first batches are written, its size an upper
// bound of what they take (reserve()), and each message's copies are queued
// as soon as it is appended, so that the GPU copies the first batches while
// the host lays out the next ones; finish() then waits once and returns the
// stream's bytes of it.  A bound found short, or another write() that does
// not fit, turns the bytes queued so far into one piece of a stream made as
// below.
class assembler final : public internal::message_sink {
 public:
  assembler() = default;
  /// Where finish() will put the stream, known from the start: reserve()
  /// may then allocate it early.
  assembler(context ctx, stream_view s, std::shared_ptr<device_memory_resource> resource)
      : target_(target{std::move(ctx), s, std::move(resource)}) {}
  assembler(const assembler&) = delete;
  assembler& operator=(const assembler&) = delete;
  // Early copies still queued when finish() did not wait for them (it was
  // never called, or failed): their buffers are kept until the stream has
  // passed them.
  ~assembler() override {
    if (kept_.empty() || !target_) return;
    try {
      keep_alive_until_passed(std::move(kept_), target_->s);
    } catch (...) {
      // The stream cannot take a host function: keep_alive_until_passed
      // waited for it first.
    }
  }

  // Appends host bytes: kept in one host vector, which finish() copies once
  // into one block of pinned memory, so that every message's metadata is a
  // DMA of the batched copies.
  // The padding that ends the body before them travels with them (its
  // zeros put in front of the bytes): one piece less per message.
  void add_host(const std::vector<std::byte>& bytes) override {
    if (bytes.empty()) return;
    std::int64_t at = length_, zeros = 0;
    if (!segments_.empty() && segments_.back().what == kind::gap &&
        segments_.back().at + segments_.back().size == length_) {
      at = segments_.back().at;
      zeros = segments_.back().size;
      segments_.pop_back();
      --gaps_;
    }
    const auto n = static_cast<std::int64_t>(bytes.size());
    // Host bytes right after host bytes (the schema and the first batch's
    // metadata, a footer after the end-of-stream marker) are one piece.
    if (!segments_.empty() && segments_.back().what == kind::host &&
        segments_.back().at + segments_.back().size == at &&
        segments_.back().from + segments_.back().size == static_cast<std::int64_t>(host_.size())) {
      segments_.back().size += zeros + n;
    } else {
      segments_.push_back({at, static_cast<std::int64_t>(host_.size()), zeros + n, kind::host, 0});
    }
    host_.resize(host_.size() + static_cast<std::size_t>(zeros), std::byte{0});
    host_.insert(host_.end(), bytes.begin(), bytes.end());
    length_ += n;
  }

  // The pieces at their places (their buffers taken over), and the bytes
  // between them (the padding after each buffer, at most 7 bytes) noted
  // as gaps, which finish() sets to zero.
  void add_body(body_layout&& body) override {
    std::int64_t covered = length_;
    for (body_piece& p : body.pieces) {
      if (p.size <= 0) continue;
      const std::int64_t at = length_ + p.body_offset;
      if (at > covered) add_gap(covered, at - covered);
      segments_.push_back({at, p.source_offset, p.size, kind::body, sources_.size()});
      sources_.push_back(std::move(p.source));
      covered = std::max(covered, at + p.size);
    }
    length_ += body.body_length;
    if (length_ > covered) add_gap(covered, length_ - covered);
  }

  // Early, where it can be: room for `bound` more bytes, allocated now
  // (what was appended so far queued into it).  Not where the bound may
  // overshoot by much: the bytes of sliced arrays (`loose`, which a
  // layout may take a few of) are at most those of the rest, or
  // kLooseBytes.  A reservation that has no room for `bound` more ends
  // early mode (demote).
  bool reserve(std::int64_t bound, std::int64_t loose) override {
    if (reserved_) {
      if (bound <= reserved_->size() - length_) return true;
      demote();
      return false;
    }
    if (!target_ || demoted_ || loose > std::max(kLooseBytes, bound - loose) ||
        bound > std::numeric_limits<std::int64_t>::max() - length_ ||
        !cuarrow::detail::gathers_device_copies(target_->ctx)) {
      return false;
    }
    // The gaps' zeros at the room's end, past any stream it holds: one
    // allocation, set by a copy from pinned memory (set_zeros), not by a
    // memset of an allocation of their own, which kept it by a host
    // function that the stream waited for before the first launch.
    try {
      const cuarrow::detail::timed t(&counters.allocate_ns);
      buffer room = allocate_device(target_->ctx, length_ + bound + kMaxZeros, target_->s, target_->resource);
      zeros_ = room.slice(length_ + bound, kMaxZeros);
      reserved_ = room.slice(0, length_ + bound);
    } catch (const out_of_memory&) {
      reserved_.reset();
      return false;  // finish() asks for the stream's exact size instead
    }
    set_zeros();
    // What is pending (the schema) joins the first part, after its launch,
    // unless it holds bodies (an earlier write that did not copy early).
    if (std::any_of(segments_.begin(), segments_.end(), [](const segment& g) { return g.what != kind::host; })) {
      queue_pending();
    }
    return true;
  }

  // What a failed write appended is forgotten (early, its queued copies
  // land in bytes that later messages overwrite or the result leaves out).
  void truncate(std::int64_t length) override {
    std::erase_if(segments_, [&](const segment& g) {
      if (g.at < length) return false;
      if (g.what == kind::body) sources_[g.source] = buffer();
      return true;
    });
    if (!segments_.empty() && segments_.back().at + segments_.back().size > length) {
      segments_.back().size = length - segments_.back().at;
    }
    gaps_ = std::count_if(segments_.begin(), segments_.end(), [](const segment& g) { return g.what == kind::gap; });
    length_ = std::min(length_, length);
    queued_ = std::min(queued_, length);
  }

  // Early: what is left of a write's messages queued (see appended()).
  void flush() override {
    if (reserved_) queue_pending();
  }

  // Early: what is left queued with the reads (into one pinned block), and
  // one wait, which finish() then need not repeat.  The end of a stream
  // and the check of its assumed offsets so take one launch and one wait,
  // not two of each.
  std::optional<buffer> flush_and_read(std::span<const arrow::detail::host_read> reads) override {
    if (!reserved_ || length_ > reserved_->size()) return std::nullopt;  // not early, or to be demoted
    std::optional<arrow::detail::queued_reads> q = arrow::detail::reads_into_pinned(reads, target_->ctx);
    if (!q) return std::nullopt;
    queue_pending(q->pieces);
    // The reads' destination is kept with the parts' sources: a wait that
    // fails leaves them all to the destructor (keep_alive_until_passed).
    kept_.push_back(q->bytes);
    const cuarrow::detail::timed t(&counters.wait_ns);
    target_->s.synchronize(target_->ctx);
    waited_ = true;
    return std::move(q->bytes);
  }

  // One allocation on `ctx`; every piece and the metadata in batched
  // copies on `s`, which is synchronized once.  The padding is zeroed by
  // small copies from a zeroed allocation where they are few for the
  // stream's size, else by one memset of the whole stream first (a second
  // write of every byte: about half a device-to-device copy's time, which
  // thousands of tiny copies could exceed).  The copies are made and
  // queued in parts of growing size (1,024 pieces, then 2,048, ...), so
  // that the GPU copies the first parts while the host makes the rest (a
  // table's thousands of pieces take the host a while to plan).
  //
  // Where the copy engine gives many copies within the device to cuarrow's
  // gather kernel (gathers_device_copies), a gap costs a few bytes of a
  // launch, not a driver call: no memset, and the metadata goes to the
  // device in one copy first, its pieces then copied within the device
  // with the bodies (one launch per 1,000 pieces instead of a driver copy
  // each: about 5 us a copy on the H200 machine).
  //
  // Early (reserve()): what is left queued into the reservation, one wait,
  // and the stream's bytes of it; a reservation that overshot the stream
  // by more than an eighth (and kSlackBytes) is copied into an allocation
  // of the stream's size instead, so that the result does not hold memory
  // it does not use.
  buffer finish(const context& ctx, stream_view s, std::shared_ptr<device_memory_resource> resource = nullptr) {
    if (reserved_) queue_pending();  // which demotes where the bound fell short
    if (reserved_) {
      buffer out = std::move(*reserved_);
      reserved_.reset();
      kept_.push_back(std::move(zeros_));
      queued_ = 0;
      const std::int64_t unused = out.size() - length_;
      if (unused > std::max(kSlackBytes, length_ / 8)) {
        buffer exact = [&] {
          const cuarrow::detail::timed t(&counters.allocate_ns);
          return allocate_device(ctx, length_, s, std::move(resource));
        }();
        const copy_piece whole{exact, 0, out, 0, length_};
        copy_batch_async({&whole, 1}, s);
        waited_ = false;
        out = std::move(exact);
      }
      if (!waited_) {
        const cuarrow::detail::timed t(&counters.wait_ns);
        s.synchronize(ctx);
      }
      kept_.clear();
      return out.size() == length_ ? out : out.slice(0, length_);
    }
    buffer out = [&] {
      const cuarrow::detail::timed t(&counters.allocate_ns);
      return allocate_device(ctx, length_, s, std::move(resource));
    }();
    std::optional<cuarrow::detail::timed> queueing(&counters.queue_ns);
    const bool gathered = cuarrow::detail::gathers_device_copies(ctx);
    if (!gathered && gaps_ > 0 && gaps_ > length_ / kGapCopyWorth) {
      fill_async(out, 0, length_, 0, s);
      std::erase_if(segments_, [](const segment& g) { return g.what == kind::gap; });
      widest_gap_ = 0;
    }
    buffer host = host_.empty() ? buffer() : host_block(ctx, s, gathered), zeros;  // kept_ keeps the pinned block
    if (widest_gap_ > 0) {
      zeros = allocate_device(ctx, widest_gap_, s);
      fill_async(zeros, 0, widest_gap_, 0, s);
    }
    std::vector<copy_piece> part;
    std::size_t size = kFirstPart;
    for (std::size_t at = 0; at < segments_.size(); at += size, size *= 2) {
      const std::size_t end = std::min(segments_.size(), at + size);
      part.clear();
      part.reserve(end - at);
      for (std::size_t i = at; i < end; ++i) part.push_back(piece_of(segments_[i], out, host, zeros));
      copy_batch_async(part, s);
    }
    queueing.reset();
    {
      const cuarrow::detail::timed t(&counters.wait_ns);
      s.synchronize(ctx);
    }
    kept_.clear();
    clear_pending();
    return out;
  }

 protected:
  // Early: queued in parts, the first of kEarlyPartBytes or more (so that
  // the GPU starts soon), each next at least twice what is queued (each
  // part costs the GPU a wait for a host function, tens of microseconds,
  // and the host a launch and a few driver calls), the rest at the end of
  // the write (flush).
  void appended() override {
    if (reserved_ && length_ - queued_ >= std::max(kEarlyPartBytes, 2 * queued_)) queue_pending();
  }

 private:
  static constexpr std::size_t kFirstPart = 1024;  // pieces in the first batched copy
  // The zeros' largest size (wider gaps are split): the gaps are a body's padding,
  // a few bytes each.  Early, set by a copy from the host, which
  // transfer_stats counts: 512 bytes a write.
  static constexpr std::int64_t kMaxZeros = 512;
  // Gaps are zeroed by copies while the stream has at least this many bytes
  // per gap: a memset of 4 MiB takes the H200 about 1-2 us, what one tiny
  // copy of a batch might cost were the copies run one after another
  // (bench/batch_copy_probe.py measures both).
  static constexpr std::int64_t kGapCopyWorth = std::int64_t{4} << 20;
  // Early mode: the bytes of sliced arrays a reservation may count on top
  // of the rest's, and what it may overshoot the stream by and still be
  // returned (besides an eighth of the stream).
  static constexpr std::int64_t kLooseBytes = std::int64_t{64} << 20;
  static constexpr std::int64_t kSlackBytes = std::int64_t{1} << 20;
  // Early mode's first part: 64 MiB take an H100 about 45 us to copy
  // within the device, longer than the host takes to queue a part.
  static constexpr std::int64_t kEarlyPartBytes = std::int64_t{64} << 20;
  // A part's metadata pieces go to the device as one copy and then within
  // the device with the bodies where they are this many or more; fewer are
  // copied from pinned memory directly (a driver copy each, but no upload
  // and no second batched copy: one host function less on the stream).
  static constexpr std::size_t kUploadedHostPieces = 8;
  enum class kind : unsigned char { host, body, gap };
  struct segment {
    std::int64_t at = 0;    // offset in the stream
    std::int64_t from = 0;  // offset in host_ or the source buffer
    std::int64_t size = 0;
    kind what = kind::body;
    std::size_t source = 0;  // index in sources_ (bodies)
  };
  struct target {
    context ctx;
    stream_view s;
    std::shared_ptr<device_memory_resource> resource;
  };

  void add_gap(std::int64_t at, std::int64_t size) {
    for (std::int64_t done = 0; done < size; done += kMaxZeros) {
      const std::int64_t n = std::min(kMaxZeros, size - done);
      segments_.push_back({at + done, 0, n, kind::gap, 0});
      widest_gap_ = std::max(widest_gap_, n);
      ++gaps_;
    }
  }

  // `n` bytes of host memory to copy to the device from: pinned (ordinary
  // memory when the pool has no room).
  static buffer host_source(const context& ctx, std::int64_t n) {
    std::optional<buffer> pinned = try_allocate_pinned_pooled(ctx, n);
    return pinned ? std::move(*pinned) : allocate_host(n);
  }

  // host_ in one block of pinned memory (host_source), the source of the
  // metadata's copies.  `gathered`: then copied
  // to the device in one copy on `s`, and that copy is the source (the
  // metadata's pieces are then copied within the device with the bodies,
  // not one driver copy each from the host).  The pinned block is kept
  // (kept_) until finish() has waited for the stream.
  buffer host_block(const context& ctx, stream_view s, bool gathered) {
    const auto n = static_cast<std::int64_t>(host_.size());
    buffer host = host_source(ctx, n);
    std::memcpy(host.mutable_host_data(), host_.data(), host_.size());
    if (!gathered) return host;
    buffer on_device = [&] {
      // Called while the copies are queued (queue_ns runs): the allocation
      // is allocate_ns's, not both.
      const cuarrow::detail::timed t(&counters.allocate_ns, &counters.queue_ns);
      return allocate_device(ctx, n, s);
    }();
    const copy_piece up{on_device, 0, host, 0, n};
    copy_batch_async({&up, 1}, s, kKept);
    kept_.push_back(std::move(host));
    return on_device;
  }

  // The copy of a segment into `out` (a body's source taken over).
  copy_piece piece_of(segment& g, const buffer& out, const buffer& host, const buffer& zeros) {
    switch (g.what) {
      case kind::host: return copy_piece{out, g.at, host, g.from, g.size};
      case kind::body: return copy_piece{out, g.at, std::move(sources_[g.source]), g.from, g.size};
      case kind::gap: break;
    }
    return copy_piece{out, g.at, zeros, 0, g.size};
  }

  void clear_pending() {
    segments_.clear();
    sources_.clear();
    host_.clear();
    gaps_ = 0;
    widest_gap_ = 0;
  }

  // Early: the gaps' zeros (zeros_, at the room's end) set by a copy from
  // a pinned block, queued before any part whose gaps read them.
  void set_zeros() {
    const cuarrow::detail::timed t(&counters.queue_ns);
    waited_ = false;
    buffer block = host_source(target_->ctx, kMaxZeros);
    std::memset(block.mutable_host_data(), 0, static_cast<std::size_t>(kMaxZeros));
    const copy_piece zeros{zeros_, 0, block, 0, kMaxZeros};
    copy_batch_async({&zeros, 1}, target_->s, kKept);
    kept_.push_back(std::move(block));
  }

  // Early: what was appended since the last call, queued into the
  // reservation in one batched copy on the target's stream, with `also`
  // (copies of the caller's: flush_and_read's reads); past its end (the
  // bound fell short), demoted instead.
  void queue_pending(std::span<const copy_piece> also = {}) {
    if (segments_.empty() && also.empty()) return;
    if (length_ > reserved_->size()) return demote();
    waited_ = false;
    const cuarrow::detail::timed t(&counters.queue_ns);
    const auto host_pieces = static_cast<std::size_t>(
        std::count_if(segments_.begin(), segments_.end(), [](const segment& g) { return g.what == kind::host; }));
    const buffer host =
        host_.empty() ? buffer() : host_block(target_->ctx, target_->s, host_pieces >= kUploadedHostPieces);
    std::vector<copy_piece> part;
    part.reserve(segments_.size() + also.size());
    for (segment& g : segments_) part.push_back(piece_of(g, *reserved_, host, zeros_));
    part.insert(part.end(), also.begin(), also.end());
    // No host function per part: the sources are kept here (kept_) until
    // finish() has waited for the stream.
    copy_batch_async(part, target_->s, kKept);
    for (copy_piece& p : part) kept_.push_back(std::move(p.src));
    counters.early_messages = counters.messages;  // every message so far is queued now
    queued_ = length_;
    clear_pending();
  }

  // The end of early mode: the bytes queued into the reservation become
  // the first piece of the stream that finish() makes (one copy within
  // the device), and this assembler reserves no more.
  void demote() {
    demoted_ = true;
    if (!reserved_) return;
    if (queued_ > 0) {
      segments_.insert(segments_.begin(), segment{0, 0, queued_, kind::body, sources_.size()});
      sources_.push_back(std::move(*reserved_));
    }
    reserved_.reset();
    kept_.push_back(std::move(zeros_));
    queued_ = 0;
  }

  std::vector<segment> segments_;  // in stream order, not yet queued
  std::vector<buffer> sources_;
  std::vector<std::byte> host_;
  std::int64_t widest_gap_ = 0;
  std::int64_t gaps_ = 0;
  std::optional<target> target_;
  std::optional<buffer> reserved_;  // early: the stream's allocation, [0, queued_) queued into it
  buffer zeros_;                    // early: kMaxZeros zeroed bytes, the gaps' source
  // The buffers of copies queued with caller_keeps_buffers (the early
  // parts, the metadata's uploads), until finish() has waited for them.
  std::vector<buffer> kept_;
  static constexpr batch_copy_options kKept{.caller_keeps_buffers = true};
  std::int64_t queued_ = 0;
  bool demoted_ = false;
  bool waited_ = false;  // early: nothing queued since flush_and_read waited
};

}  // namespace

struct encoded_schema::state {
  schema_message message;               // the schema and its dictionaries' ids (Arrow C++'s numbering)
  std::vector<std::byte> encapsulated;  // its message, encapsulated (write_encapsulated_metadata)
};

encoded_schema::encoded_schema(arrow::schema schema) {
  auto st = std::make_shared<state>();
  message_metadata m;
  schema_message sm;
  sm.schema = std::move(schema);
  std::vector<int> path;
  for (std::size_t i = 0; i < sm.schema.fields.size(); ++i) {
    path = {static_cast<int>(i)};
    number_dictionaries(sm.schema.fields[i].type, path, sm.dictionaries);
  }
  m.header = std::move(sm);
  st->encapsulated = write_encapsulated_metadata(m);
  st->message = std::move(std::get<schema_message>(m.header));
  state_ = std::move(st);
}

const arrow::schema& encoded_schema::schema() const noexcept { return state_->message.schema; }

namespace internal {

file_block message_sink::append(const message_metadata& m, body_layout* body) {
  const std::vector<std::byte> meta = [&] {
    const cuarrow::detail::timed t(&counters.metadata_ns);
    return write_encapsulated_metadata(m);
  }();
  return append_encoded(meta, body);
}

file_block message_sink::append_encoded(const std::vector<std::byte>& meta, body_layout* body) {
  ++counters.messages;
  if (body != nullptr) {
    counters.body_pieces +=
        std::count_if(body->pieces.begin(), body->pieces.end(), [](const body_piece& p) { return p.size > 0; });
  }
  file_block b;
  b.offset = length_;
  b.metadata_length = static_cast<std::int32_t>(meta.size());
  b.body_length = body != nullptr ? body->body_length : 0;
  add_host(meta);
  if (body != nullptr) add_body(std::move(*body));
  appended();
  return b;
}

void message_sink::truncate(std::int64_t) {
  throw error("IPC writer: this sink cannot take back what was appended (it reserves nothing)");
}

message_writer::message_writer(encoded_schema schema, stream_writer::format f, stream_view s,
                               arrow::key_value_metadata footer, write_options options, message_sink& sink)
    : schema_(std::move(schema)),
      format_(f),
      s_(s),
      footer_metadata_(std::move(footer)),
      options_(std::move(options)),
      sink_(sink) {
  if (options_.compression) (void)max_framed_size(*options_.compression, 0);  // throws when the build lacks it
  if (options_.compress_group_bytes < 0) {
    throw invalid_argument("write_options::compress_group_bytes must be 0 (512 MiB) or more, not " +
                           std::to_string(options_.compress_group_bytes));
  }
  if (format_ == stream_writer::format::file) {
    std::vector<std::byte> magic(static_cast<std::size_t>(file_header_size), std::byte{0});
    std::memcpy(magic.data(), file_magic.data(), file_magic.size());
    sink_.add_host(magic);
  }
  const std::int64_t before = sink_.length();
  sink_.append_encoded(schema_.state_->encapsulated, nullptr);
  schema_bytes_ = sink_.length() - before;
}

const arrow::schema& message_writer::schema() const noexcept { return schema_.schema(); }

const schema_message& message_writer::message_schema() const noexcept { return schema_.state_->message; }

body_layout message_writer::layout(const arrow::record_batch& batch) const {
  body_layout l = [&] {
    const cuarrow::detail::timed t(&sink_.counters.layout_ns);
    return layout_body(batch, s_);
  }();
  if (!options_.compression) return l;
  const cuarrow::detail::timed t(&sink_.counters.compress_ns);
  return std::move(detail::compress_bodies(std::span<const body_layout>(&l, 1), *options_.compression,
                                           options_.compress, options_.compress_threads, s_,
                                           &sink_.counters.compress_copy_ns)
                       .front());
}

write_stats write_counters::snapshot() const noexcept {
  using cuarrow::detail::seconds_of;
  write_stats r;
  r.batches = batches;
  r.early_messages = early_messages;
  r.messages = messages;
  r.body_pieces = body_pieces;
  r.layout_seconds = seconds_of(layout_ns);
  r.compress_seconds = seconds_of(compress_ns);
  r.compress_copy_seconds = seconds_of(compress_copy_ns);
  r.metadata_seconds = seconds_of(metadata_ns);
  r.allocate_seconds = seconds_of(allocate_ns);
  r.queue_seconds = seconds_of(queue_ns);
  r.wait_seconds = seconds_of(wait_ns);
  r.file_write_seconds = seconds_of(file_write_ns);
  return r;
}

namespace {

// Whether two dictionaries hold the same values (their types and values,
// whatever their memory), compared on host copies.
bool same_values(const arrow::array_data& a, const arrow::array_data& b, stream_view s) {
  if (a.length != b.length || !(a.type == b.type)) return false;
  const std::vector<arrow::array_data> both = arrow::to_host(std::vector<arrow::array_data>{a, b}, s);
  return arrow::equals(both[0], both[1]);
}

}  // namespace

void message_writer::send_dictionaries(const arrow::record_batch& batch) {
  for (const dictionary_field& d : message_schema().dictionaries) {
    const arrow::array_data& a = array_at(batch, d.path);
    if (!a.dictionary) throw invalid_argument("dictionary column without a dictionary");
    auto it = sent_.find(d.id);
    if (it != sent_.end() && it->second == a.dictionary) continue;
    // Another object may hold the same values (each chunk of a table moved
    // to the device gets its own copy of a shared dictionary): compared by
    // content, as Arrow's writer compares them, on host copies.
    if (it != sent_.end() && same_values(*it->second, *a.dictionary, s_)) continue;
    if (it != sent_.end() && format_ == stream_writer::format::file) {
      throw invalid_argument(
          "dictionary replacement in an IPC file: the file format allows one dictionary per "
          "field (write a stream, or unify the dictionaries first)");
    }
    arrow::record_batch one;
    one.schema.fields = {arrow::field("dictionary", a.dictionary->type)};
    one.num_rows = a.dictionary->length;
    one.columns = {*a.dictionary};
    body_layout l = layout(one);
    message_metadata m;
    dictionary_batch_header h;
    h.id = d.id;
    h.data = std::move(l.header);
    m.header = std::move(h);
    m.body_length = l.body_length;
    dictionary_blocks_.push_back(sink_.append(m, &l));
    sent_[d.id] = a.dictionary;
  }
}

void message_writer::write(const arrow::record_batch& batch, const arrow::key_value_metadata& custom_metadata,
                           const char* who) {
  write(std::span<const arrow::record_batch>(&batch, 1),
        std::span<const arrow::key_value_metadata>(&custom_metadata, 1), who);
}

void message_writer::check(detail::batch_refs batches, std::span<const arrow::key_value_metadata> custom_metadata,
                           const char* who) const {
  if (!custom_metadata.empty() && custom_metadata.size() != batches.size()) {
    throw invalid_argument(std::string(who) + ": " + std::to_string(custom_metadata.size()) + " custom metadata for " +
                           std::to_string(batches.size()) + " batches (give one per batch, or none)");
  }
  for (std::size_t i = 0; i < batches.size(); ++i) {
    if (!(batches[i]->schema == schema())) {
      throw invalid_argument(
          std::string(who) +
          (batches.size() == 1 ? std::string(": the batch's schema") : ": the schema of batch " + std::to_string(i)) +
          " differs from the writer's");
    }
  }
}

void message_writer::write(std::span<const arrow::record_batch> batches,
                           std::span<const arrow::key_value_metadata> custom_metadata, const char* who,
                           std::vector<arrow::record_batch>* owned) {
  write(detail::refs_of(batches), custom_metadata, who, owned);
}

void message_writer::write(detail::batch_refs batches, std::span<const arrow::key_value_metadata> custom_metadata,
                           const char* who, std::vector<arrow::record_batch>* owned) {
  check(batches, custom_metadata, who);
  settle();  // an earlier write's assumed offsets, before anything else is appended
  if (write_early(batches, custom_metadata, owned)) return;
  // Every batch laid out first, their device offsets read together (one
  // round trip per level of nesting for all of them).
  std::vector<body_layout> all = [&] {
    const cuarrow::detail::timed t(&sink_.counters.layout_ns);
    return detail::layout_bodies(batches, s_);
  }();
  // Compressed, into a file: each group's bodies are written on a thread
  // of their own while the next group is compressed (the sink is touched
  // by one thread at a time: a group is appended only once the last one is
  // written).  A write that fails waits for the one in flight first.
  std::future<void> writing;
  const auto written = [&] {
    if (writing.valid()) writing.get();
  };
  struct waits_for {
    std::future<void>& f;
    ~waits_for() {
      if (f.valid()) f.wait();
    }
  } in_flight{writing};
  const std::int64_t group_bytes =
      options_.compress_group_bytes > 0 ? options_.compress_group_bytes : compressed_group_bytes;
  std::size_t first = 0;
  while (first < batches.size()) {
    // Uncompressed, a layout is known before its bytes move: every batch
    // in one group.  Compressed, a group holds at most compressed_group_
    // bytes of uncompressed body (one batch at least): the host copy and
    // the framed buffers of a group are kept until the sink has written
    // them, in blocks of the pinned pool, which must hold two or three
    // groups' worth and still reuse its blocks.
    std::vector<body_layout> layouts;
    std::int64_t bytes = 0;
    std::size_t end = first;
    while (end < batches.size() &&
           (layouts.empty() || !options_.compression || bytes + all[end].body_length <= group_bytes)) {
      layouts.push_back(std::move(all[end]));
      bytes += layouts.back().body_length;
      ++end;
    }
    if (options_.compression) {
      const cuarrow::detail::timed t(&sink_.counters.compress_ns);
      layouts = detail::compress_bodies(layouts, *options_.compression, options_.compress, options_.compress_threads,
                                        s_, &sink_.counters.compress_copy_ns);
    }
    written();
    for (std::size_t k = 0; k < layouts.size(); ++k) {
      const std::size_t i = first + k;
      send_dictionaries(*batches[i]);
      message_metadata m;
      m.header = std::move(layouts[k].header);  // the sink takes the pieces, not the header
      m.body_length = layouts[k].body_length;
      if (!custom_metadata.empty()) m.custom_metadata = custom_metadata[i];
      batch_blocks_.push_back(sink_.append(m, &layouts[k]));
      ++sink_.counters.batches;
    }
    first = end;
    if (options_.compression && first < batches.size() && sink_.concurrent_flush()) {
      writing = std::async(std::launch::async, [this] { sink_.flush(); });
    } else {
      sink_.flush();
    }
  }
}

bool message_writer::write_early(detail::batch_refs batches, std::span<const arrow::key_value_metadata> custom_metadata,
                                 std::vector<arrow::record_batch>* owned) {
  // Uncompressed bodies without dictionaries (a dictionary message's size
  // is known only once it is compared with the last one sent).
  if (options_.compression || !message_schema().dictionaries.empty() || batches.empty()) return false;
  // Room for every message of the call, and for what finish() adds (the
  // end-of-stream marker; a file's footer: the schema, a block per
  // message, the footer's metadata).
  const detail::group_bound b = detail::body_bound(batches);
  constexpr std::int64_t kMetadataBase = 512, kMetadataPerEntry = 32;
  std::int64_t bound = b.bytes + b.loose + b.entries * kMetadataPerEntry +
                       static_cast<std::int64_t>(batches.size()) * kMetadataBase + 16;
  for (const arrow::key_value_metadata& kv : custom_metadata) {
    for (const auto& [k, v] : kv) bound += static_cast<std::int64_t>(k.size() + v.size()) + 64;
  }
  if (format_ == stream_writer::format::file) {
    bound += schema_bytes_ + kMetadataBase +
             32 * static_cast<std::int64_t>(batch_blocks_.size() + dictionary_blocks_.size() + batches.size());
    for (const auto& [k, v] : footer_metadata_) bound += static_cast<std::int64_t>(k.size() + v.size()) + 64;
  }
  if (!sink_.reserve(bound, b.loose)) return false;
  // Each batch's message goes to the sink as soon as its layout is known,
  // which queues its copies while the next batches are laid out.  The
  // offsets of unsliced arrays are assumed to use all their values, not
  // read first (so that the GPU starts on the first batch without waiting
  // for a read of the device), and checked later (settle(): at the next
  // write or at finish, where the read waits for copies that are queued
  // anyway).  A failure midway takes back what the call appended.
  unchecked_write w = mark();
  std::vector<detail::assumed_offset> assumed;
  try {
    append_early(batches, custom_metadata, &assumed);
  } catch (...) {
    take_back(w);
    throw;
  }
  if (assumed.empty()) return true;
  // Kept for a rewrite: taken over where the caller gave them up (a copy
  // of a table's batches costs the host about 1 us a batch and column).
  w.columns.reserve(batches.size());
  w.rows.reserve(batches.size());
  if (owned != nullptr) {
    for (arrow::record_batch& taken : *owned) {
      w.columns.push_back(std::move(taken.columns));
      w.rows.push_back(taken.num_rows);
    }
    owned->clear();  // left empty, not as batches without columns (stream_writer::write's promise)
  } else {
    for (const arrow::record_batch* const p : batches) {
      w.columns.push_back(p->columns);
      w.rows.push_back(p->num_rows);
    }
  }
  w.custom_metadata.assign(custom_metadata.begin(), custom_metadata.end());
  unchecked_.push_back(std::move(w));
  assumed_.insert(assumed_.end(), std::make_move_iterator(assumed.begin()), std::make_move_iterator(assumed.end()));
  return true;
}

message_writer::unchecked_write message_writer::mark() const {
  const internal::write_counters& c = sink_.counters;
  return {sink_.length(), batch_blocks_.size(), {c.batches, c.messages, c.body_pieces, c.early_messages}, {}, {}, {}};
}

void message_writer::take_back(const unchecked_write& w) {
  batch_blocks_.resize(w.blocks);
  sink_.counters.batches = w.counted[0];
  sink_.counters.messages = w.counted[1];
  sink_.counters.body_pieces = w.counted[2];
  sink_.counters.early_messages = w.counted[3];
  sink_.truncate(w.length);
}

void message_writer::append_early(detail::batch_refs batches,
                                  std::span<const arrow::key_value_metadata> custom_metadata,
                                  std::vector<detail::assumed_offset>* assumed) {
  std::int64_t appending_ns = 0;
  const auto start = std::chrono::steady_clock::now();
  detail::layout_bodies_each(
      batches, s_,
      [&](std::size_t i, body_layout&& l) {
        const auto t = std::chrono::steady_clock::now();
        message_metadata m;
        m.header = std::move(l.header);
        m.body_length = l.body_length;
        if (!custom_metadata.empty()) m.custom_metadata = custom_metadata[i];
        batch_blocks_.push_back(sink_.append(m, &l));
        ++sink_.counters.batches;
        appending_ns +=
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t).count();
      },
      assumed);
  sink_.counters.layout_ns.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count() -
      appending_ns);
  sink_.flush();
}

bool message_writer::assumptions_held() {
  const bool held = [&] {
    const cuarrow::detail::timed t(&sink_.counters.wait_ns);
    return detail::assumptions_hold(assumed_, s_);
  }();
  return checked(held);
}

bool message_writer::flushed_and_held() {
  // No reads (nothing assumed) come back as nullopt, as reads the sink
  // cannot make: then flushed, and checked as before.
  if (const std::optional<buffer> read = sink_.flush_and_read(detail::assumed_reads(assumed_))) {
    return checked(detail::assumptions_hold(assumed_, *read));
  }
  sink_.flush();
  return assumptions_held();
}

bool message_writer::checked(bool held) {
  assumed_.clear();
  if (held) unchecked_.clear();
  retaking_ = !held;
  return held;
}

void message_writer::settle() {
  if (unchecked_.empty() || (!retaking_ && assumptions_held())) return;
  // An offset did not hold (values past the last offset, offsets not from
  // 0): every message from the first unchecked write on is taken back and
  // written again from offsets read.  Should that fail, the writer stays
  // at that point (retaking_), and the next call writes them again.
  take_back(unchecked_.front());
  try {
    for (const unchecked_write& w : unchecked_) {
      std::vector<arrow::record_batch> batches;
      batches.reserve(w.columns.size());
      for (std::size_t i = 0; i < w.columns.size(); ++i) batches.push_back({schema(), w.rows[i], w.columns[i]});
      append_early(detail::refs_of(batches), w.custom_metadata, nullptr);
    }
  } catch (...) {
    take_back(unchecked_.front());
    throw;
  }
  unchecked_.clear();
  retaking_ = false;
}

void message_writer::finish() {
  if (!unchecked_.empty() && !retaking_) {
    // The end queued with the last copies and the reads of the assumed
    // offsets (one launch where the sink can), so that one wait covers
    // them all; where an offset did not hold, settle() takes the end back
    // with the unchecked writes' messages (it follows them).
    add_end();
    if (flushed_and_held()) return;
  }
  settle();
  add_end();
}

void message_writer::add_end() {
  sink_.add_host(end_of_stream_marker());
  if (format_ == stream_writer::format::file) {
    file_footer footer;
    footer.schema = message_schema();
    footer.dictionaries = dictionary_blocks_;
    footer.record_batches = batch_blocks_;
    footer.custom_metadata = footer_metadata_;
    sink_.add_host(write_file_trailer(footer));
  }
}

}  // namespace internal

struct stream_writer::state {
  state(encoded_schema sch, context c, format fmt, stream_view sv, arrow::key_value_metadata footer,
        write_options options, std::shared_ptr<device_memory_resource> r)
      : ctx(std::move(c)),
        s(sv),
        resource(std::move(r)),
        writer(std::move(sch), fmt, sv, std::move(footer), std::move(options), out) {}

  context ctx;
  stream_view s;
  std::shared_ptr<device_memory_resource> resource;  // null: the context's
  bool finished = false;
  assembler out{ctx, s, resource};  // before the writer, which writes into it from its constructor
  internal::message_writer writer;
};

stream_writer::stream_writer(arrow::schema schema, context ctx, format f, stream_view s,
                             arrow::key_value_metadata footer_metadata, write_options options,
                             std::shared_ptr<device_memory_resource> resource)
    : stream_writer(encoded_schema(std::move(schema)), std::move(ctx), f, s, std::move(footer_metadata),
                    std::move(options), std::move(resource)) {}

stream_writer::stream_writer(encoded_schema schema, context ctx, format f, stream_view s,
                             arrow::key_value_metadata footer_metadata, write_options options,
                             std::shared_ptr<device_memory_resource> resource)
    : state_(std::make_unique<state>(std::move(schema), std::move(ctx), f, s, std::move(footer_metadata),
                                     std::move(options), std::move(resource))) {}

stream_writer::~stream_writer() = default;

void stream_writer::write(const arrow::record_batch& batch, const arrow::key_value_metadata& custom_metadata) {
  state& st = *state_;
  if (st.finished) throw invalid_argument("stream_writer: already finished");
  st.writer.write(batch, custom_metadata, "stream_writer");
}

void stream_writer::write(std::span<const arrow::record_batch> batches,
                          std::span<const arrow::key_value_metadata> custom_metadata) {
  write(detail::refs_of(batches), custom_metadata);
}

void stream_writer::write(std::span<const arrow::record_batch* const> batches,
                          std::span<const arrow::key_value_metadata> custom_metadata) {
  state& st = *state_;
  if (st.finished) throw invalid_argument("stream_writer: already finished");
  st.writer.write(batches, custom_metadata, "stream_writer");
}

void stream_writer::write(std::vector<arrow::record_batch>&& batches,
                          std::span<const arrow::key_value_metadata> custom_metadata) {
  state& st = *state_;
  if (st.finished) throw invalid_argument("stream_writer: already finished");
  st.writer.write(batches, custom_metadata, "stream_writer", &batches);
}

buffer stream_writer::finish() {
  state& st = *state_;
  if (st.finished) throw invalid_argument("stream_writer: already finished");
  st.finished = true;
  st.writer.finish();
  return st.out.finish(st.ctx, st.s, st.resource);
}

write_stats stream_writer::stats() const noexcept { return state_->out.counters.snapshot(); }

buffer serialize_record_batch(const arrow::record_batch& batch, const context& ctx, stream_view s) {
  for (const arrow::field& f : batch.schema.fields) {
    if (contains_dictionary(f.type)) {
      throw invalid_argument("serialize_record_batch: column \"" + f.name +
                             "\" is dictionary-encoded; its dictionary travels in a stream (stream_writer)");
    }
  }
  body_layout layout = layout_body(batch, s);
  message_metadata m;
  m.header = layout.header;
  m.body_length = layout.body_length;
  assembler out;
  out.append(m, &layout);
  return out.finish(ctx, s);
}

}  // namespace cuarrow::ipc
