// Reassembles block records from session_cache.proto BlockChunks, checking the chunk
// protocol (the same on both sides: StoreBlocks on the server, FetchBlocks on the client):
//   - records have indices 0, 1, 2, ... in order; a record's chunks arrive in order,
//     the first at offset 0, each at the offset where the previous one ended;
//   - every chunk of a record carries the same record_bytes, in [1, max_record_bytes];
//   - a chunk's data is non-empty and does not run past record_bytes.
// A record whose last chunk arrived is handed out whole; nothing of an unfinished one is.
//
// Threading: not thread-safe (one per call).
#ifndef KVSERVE_CACHE_RECORD_ASSEMBLER_H_
#define KVSERVE_CACHE_RECORD_ASSEMBLER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace kvserve::cache {

class RecordAssembler {
 public:
  explicit RecordAssembler(int64_t max_record_bytes) : max_record_bytes_(max_record_bytes) {}

  // Feeds one chunk; `data` may be taken (moved from) when it is a whole record, so that
  // single-chunk records are never copied. On success, returns the completed record
  // (moved out) when this chunk was its last, nullopt otherwise. Errors, naming the
  // field: INVALID_ARGUMENT (chunks.index / chunks.offset / chunks.record_bytes /
  // chunks.data out of order or inconsistent), RESOURCE_EXHAUSTED (record_bytes above
  // max_record_bytes). After an error the assembler must not be used again.
  absl::Status Add(int32_t index, int64_t offset, int64_t record_bytes, std::string* data,
                   std::optional<std::string>* completed);

  // The same checks and errors, for a caller that only reads each record: nothing is
  // moved or kept. *completed views `data` (a whole record in one chunk) or the
  // assembler's buffer (chunks copied into it; its capacity is kept for the next record),
  // valid until the next call or until `data`'s storage changes.
  absl::Status AddView(int32_t index, int64_t offset, int64_t record_bytes, std::string_view data,
                       std::optional<std::string_view>* completed);

  // True while a record has started and not completed (a stream ending now truncates it).
  bool mid_record() const { return received_bytes_ > 0; }
  // Index the next new record must carry (= records completed).
  int32_t next_index() const { return next_index_; }

 private:
  // The chunk protocol's checks of a chunk of `size` bytes (Add's errors).
  absl::Status Check(int32_t index, int64_t offset, int64_t record_bytes, int64_t size) const;
  // Appends a checked chunk to buffer_ (reserving record_bytes at a record's first chunk);
  // true when the record is complete (the assembler then expects the next index).
  bool Append(int64_t record_bytes, std::string_view data);

  const int64_t max_record_bytes_;
  int32_t next_index_ = 0;
  int64_t record_bytes_ = 0;    // of the record in progress
  int64_t received_bytes_ = 0;  // of the record in progress; 0 = none in progress
  std::string buffer_;
};

}  // namespace kvserve::cache

#endif  // KVSERVE_CACHE_RECORD_ASSEMBLER_H_
