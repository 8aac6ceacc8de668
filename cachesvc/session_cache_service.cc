#include "cachesvc/session_cache_service.h"

#include <algorithm>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cache/block_record.h"
#include "cache/record_assembler.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"

namespace kvserve::cachesvc {
namespace {

grpc::Status ToGrpc(const absl::Status& status) {
  // absl and gRPC status codes are the same numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status ParseHash(const std::string& bytes, const std::string& field, BlockHash* hash) {
  if (!cache::HashFromBytes(bytes, hash)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be 16 bytes, got ", bytes.size()));
  }
  return absl::OkStatus();
}

// The partition and chain of a Lookup or FetchBlocks request.
template <typename Request>
absl::Status ParseChain(const Request& request, int32_t max_chain_blocks, BlockHash* partition,
                        std::vector<BlockHash>* chain) {
  if (absl::Status s = ParseHash(request.partition(), "partition", partition); !s.ok()) return s;
  if (request.block_hashes_size() > max_chain_blocks) {
    return absl::InvalidArgumentError(absl::StrCat("block_hashes has ", request.block_hashes_size(),
                                                   " hashes; at most ", max_chain_blocks,
                                                   " (max-chain-blocks)"));
  }
  chain->resize(request.block_hashes_size());
  for (int i = 0; i < request.block_hashes_size(); ++i) {
    if (absl::Status s =
            ParseHash(request.block_hashes(i), absl::StrCat("block_hashes[", i, "]"), &(*chain)[i]);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// Seconds from `now` to `expires_at`, rounded up (a live record never says 0).
int64_t SecondsLeft(absl::Time expires_at, absl::Time now) {
  return absl::ToInt64Seconds(absl::Ceil(expires_at - now, absl::Seconds(1)));
}

// Milliseconds from `now` to `t`, rounded up.
int64_t MillisecondsLeft(absl::Time t, absl::Time now) {
  return absl::ToInt64Milliseconds(absl::Ceil(t - now, absl::Milliseconds(1)));
}

absl::Status LeaseConflict(const StoredSession& s, absl::Time now) {
  return absl::AbortedError(absl::StrCat(
      "session \"", s.id, "\" is leased by another turn (\"", s.lease_holder, "\") for ",
      MillisecondsLeft(s.lease_expires_at, now), " ms more; retry after it commits or expires"));
}

void SessionToProto(const StoredSession& s, absl::Time now, v1::SessionRecord* out) {
  out->set_session_id(s.id);
  out->set_version(s.version);
  out->set_closed(s.closed);
  if (s.HasLiveLease(now)) {
    out->set_lease_holder(s.lease_holder);
    out->set_lease_expires_in_ms(MillisecondsLeft(s.lease_expires_at, now));
  }
  out->set_partition(cache::HashToBytes(s.partition));
  out->mutable_tokens()->Assign(s.tokens.begin(), s.tokens.end());
  out->mutable_turn_ends()->Assign(s.turn_ends.begin(), s.turn_ends.end());
  if (s.has_head) out->set_head_block_hash(cache::HashToBytes(s.head));
  out->set_owner(s.owner);
  out->set_tenant(s.tenant);
  out->set_expires_in_seconds(SecondsLeft(s.expires_at, now));
}

// A FetchBlocksResponse encoded by hand as gRPC slices, in session_cache.proto's wire
// format (any protobuf parser reads it as the generated message): per chunk, the tag and
// length of `chunks`, BlockChunk's fields 1-3 (serialized by protobuf) and the tag and
// length of `data`, copied into one small slice; then the data itself as a slice that
// holds a reference to the stored record (never copied; released when gRPC is done).
class FetchResponseEncoder {
 public:
  bool empty() const { return slices_.empty(); }
  // Data bytes of the chunks added since the last Take().
  int64_t data_bytes() const { return data_bytes_; }

  // Adds bytes [offset, offset + n) of `record` (n >= 1) as a chunk of record `index`.
  void AddChunk(int32_t index, const RecordPtr& record, int64_t offset, int64_t n) {
    using google::protobuf::io::CodedOutputStream;
    v1::BlockChunk fields;
    fields.set_index(index);
    fields.set_offset(offset);
    fields.set_record_bytes(static_cast<int64_t>(record->size()));
    const size_t fields_size = fields.ByteSizeLong();
    const uint64_t data_size = static_cast<uint64_t>(n);
    const uint64_t chunk_size =
        fields_size + 1 + CodedOutputStream::VarintSize64(data_size) + data_size;
    std::string head(1 + CodedOutputStream::VarintSize64(chunk_size) + fields_size + 1 +
                         CodedOutputStream::VarintSize64(data_size),
                     '\0');
    auto* p = reinterpret_cast<uint8_t*>(head.data());
    *p++ = kChunksTag;
    p = CodedOutputStream::WriteVarint64ToArray(chunk_size, p);
    p = fields.SerializeWithCachedSizesToArray(p);
    *p++ = kDataTag;
    CodedOutputStream::WriteVarint64ToArray(data_size, p);
    slices_.emplace_back(head);
    // gRPC only reads a slice's bytes; the const_cast is for its C-style constructor.
    slices_.emplace_back(const_cast<char*>(record->data()) + offset, static_cast<size_t>(n),
                         &ReleaseRecord, new RecordPtr(record));
    data_bytes_ += n;
  }

  // The message so far; starts a new one.
  grpc::ByteBuffer Take() {
    grpc::ByteBuffer buffer(slices_.data(), slices_.size());
    slices_.clear();
    data_bytes_ = 0;
    return buffer;
  }

 private:
  // Field 1 (FetchBlocksResponse.chunks) and field 4 (BlockChunk.data), length-delimited.
  static constexpr uint8_t kChunksTag = (1 << 3) | 2;
  static constexpr uint8_t kDataTag = (4 << 3) | 2;
  static_assert(v1::FetchBlocksResponse::kChunksFieldNumber == 1 &&
                v1::BlockChunk::kDataFieldNumber == 4);

  static void ReleaseRecord(void* record) { delete static_cast<RecordPtr*>(record); }

  std::vector<grpc::Slice> slices_;
  int64_t data_bytes_ = 0;
};
}  // namespace

SessionCacheService::SessionCacheService(const Options& options, BlockStore* blocks,
                                         SessionIndex* sessions, CacheMetrics* metrics,
                                         const common::Clock* clock, const server::BearerAuth* auth)
    : options_(options),
      blocks_(blocks),
      sessions_(sessions),
      metrics_(metrics),
      clock_(clock),
      auth_(auth) {
  // A split stream for FetchBlocks: it reads the one request, then writes raw responses.
  // Methods are numbered in proto order; the index comes from the descriptor, not a
  // constant, so reordering the proto cannot hand this handler another method.
  const int fetch_index = google::protobuf::DescriptorPool::generated_pool()
                              ->FindServiceByName("kvserve.v1.SessionCache")
                              ->FindMethodByName("FetchBlocks")
                              ->index();
  MarkMethodStreamed(
      fetch_index,
      new grpc::internal::SplitServerStreamingHandler<v1::FetchBlocksRequest, grpc::ByteBuffer>(
          [this](grpc::ServerContext* context,
                 grpc::ServerSplitStreamer<v1::FetchBlocksRequest, grpc::ByteBuffer>* stream) {
            return StreamedFetchBlocks(context, stream);
          }));
}

grpc::Status SessionCacheService::Handle(const char* method, grpc::ServerContext* context,
                                         const std::function<absl::Status()>& body) {
  const absl::Time start = absl::Now();
  if (options_.injected_delay > absl::ZeroDuration()) absl::SleepFor(options_.injected_delay);
  absl::Status status;
  if (auth_ != nullptr) status = auth_->AuthenticateCall(context->client_metadata()).status();
  if (status.ok()) status = body();
  metrics_->RecordRpc(method, absl::StatusCodeToString(status.code()), absl::Now() - start);
  return ToGrpc(status);
}

grpc::Status SessionCacheService::Lookup(grpc::ServerContext* context,
                                         const v1::LookupRequest* request,
                                         v1::LookupResponse* response) {
  return Handle("Lookup", context, [&] { return DoLookup(*request, response); });
}

absl::Status SessionCacheService::DoLookup(const v1::LookupRequest& request,
                                           v1::LookupResponse* response) {
  BlockHash partition;
  std::vector<BlockHash> chain;
  if (absl::Status s = ParseChain(request, options_.max_chain_blocks, &partition, &chain);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<LookupResult> found = blocks_->Lookup(partition, chain, clock_->Now());
  if (!found.ok()) return found.status();
  metrics_->RecordLookup(static_cast<int64_t>(chain.size()), found->present_blocks);
  response->set_present_blocks(found->present_blocks);
  response->set_present_bytes(found->present_bytes);
  return absl::OkStatus();
}

grpc::Status SessionCacheService::StreamedFetchBlocks(
    grpc::ServerContext* context,
    grpc::ServerSplitStreamer<v1::FetchBlocksRequest, grpc::ByteBuffer>* stream) {
  return Handle("FetchBlocks", context, [&] { return DoFetch(context, stream); });
}

absl::Status SessionCacheService::DoFetch(
    grpc::ServerContext* context,
    grpc::ServerSplitStreamer<v1::FetchBlocksRequest, grpc::ByteBuffer>* stream) {
  v1::FetchBlocksRequest request;
  if (!stream->Read(&request)) return absl::CancelledError("no request");
  BlockHash partition;
  std::vector<BlockHash> chain;
  if (absl::Status s = ParseChain(request, options_.max_chain_blocks, &partition, &chain);
      !s.ok()) {
    return s;
  }
  if (request.max_chunk_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_chunk_bytes must be >= 0, got ", request.max_chunk_bytes()));
  }
  const int64_t chunk_bytes = request.max_chunk_bytes() == 0
                                  ? options_.default_chunk_bytes
                                  : std::clamp(request.max_chunk_bytes(), options_.min_chunk_bytes,
                                               options_.max_chunk_bytes);
  // Chunks of consecutive records share a message until it holds chunk_bytes of data. A
  // record that fits in one message is never split: when the message has no room left for
  // it, the message goes first. So each such record reaches the client as one chunk, which
  // it reads in place (RemoteCacheClient: no reassembly copy, and the parsed chunks of
  // equal-sized records reuse their memory message after message); only records above
  // chunk_bytes travel in pieces.
  FetchResponseEncoder message;
  auto flush = [&]() -> absl::Status {
    if (message.empty()) return absl::OkStatus();
    if (!stream->Write(message.Take())) return absl::CancelledError("the client went away");
    return absl::OkStatus();
  };
  for (size_t i = 0; i < chain.size(); ++i) {
    if (context->IsCancelled()) return absl::CancelledError("cancelled by the client");
    absl::StatusOr<RecordPtr> record = blocks_->Get({partition, chain[i]}, clock_->Now());
    if (!record.ok()) return record.status();
    if (*record == nullptr) {  // evicted meanwhile: the caller uses the prefix it got
      metrics_->RecordFetchMiss(static_cast<int64_t>(chain.size() - i));
      break;
    }
    const int64_t size = static_cast<int64_t>((*record)->size());
    if (size <= chunk_bytes && message.data_bytes() + size > chunk_bytes) {
      if (absl::Status s = flush(); !s.ok()) return s;
    }
    for (int64_t offset = 0; offset < size;) {
      const int64_t n = std::min(size - offset, chunk_bytes - message.data_bytes());
      message.AddChunk(static_cast<int32_t>(i), *record, offset, n);
      offset += n;
      if (message.data_bytes() == chunk_bytes) {
        if (absl::Status s = flush(); !s.ok()) return s;
      }
    }
    metrics_->RecordServed(size);
  }
  return flush();
}

grpc::Status SessionCacheService::StoreBlocks(grpc::ServerContext* context,
                                              grpc::ServerReader<v1::StoreBlocksRequest>* reader,
                                              v1::StoreBlocksResponse* response) {
  return Handle("StoreBlocks", context, [&] { return DoStore(reader, response); });
}

absl::Status SessionCacheService::DoStore(grpc::ServerReader<v1::StoreBlocksRequest>* reader,
                                          v1::StoreBlocksResponse* response) {
  cache::RecordAssembler assembler(options_.max_record_bytes);
  BlockHash partition;
  v1::StoreBlocksRequest message;
  for (bool first = true; reader->Read(&message); first = false) {
    if (first) {
      if (absl::Status s = ParseHash(message.partition(), "partition", &partition); !s.ok()) {
        return s;
      }
    } else if (!message.partition().empty() &&
               message.partition() != cache::HashToBytes(partition)) {
      return absl::InvalidArgumentError("partition must be set in the first message only");
    }
    for (v1::BlockChunk& chunk : *message.mutable_chunks()) {
      std::optional<std::string> record;
      if (absl::Status s = assembler.Add(chunk.index(), chunk.offset(), chunk.record_bytes(),
                                         chunk.mutable_data(), &record);
          !s.ok()) {
        return s;
      }
      if (!record.has_value()) continue;
      if (absl::Status s = StoreRecord(partition, *std::move(record), response); !s.ok()) {
        return s;
      }
    }
  }
  // Read() is false at the client's half-close and when the call was cancelled; either
  // way an unfinished record is dropped whole.
  if (assembler.mid_record()) {
    metrics_->RecordRejected(cache::RecordCheckName(cache::RecordCheck::kTruncated));
    response->set_rejected_blocks(response->rejected_blocks() + 1);
  }
  return absl::OkStatus();
}

absl::Status SessionCacheService::StoreRecord(const BlockHash& partition, std::string record,
                                              v1::StoreBlocksResponse* response) {
  cache::BlockRecordView view;
  cache::RecordExpectation expected;
  expected.identity = &partition;
  const cache::RecordCheck check = cache::ParseAndCheckBlockRecord(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(record.data()), record.size()),
      expected, &view);
  if (check != cache::RecordCheck::kOk) {
    metrics_->RecordRejected(cache::RecordCheckName(check));
    response->set_rejected_blocks(response->rejected_blocks() + 1);
    return absl::OkStatus();
  }
  // A record that arrived as one large protobuf field may carry spare capacity; the
  // store keeps exactly its bytes.
  if (record.capacity() > record.size() + record.size() / 64) record.shrink_to_fit();
  const BlockHash key = view.hash;
  const BlockHash parent = view.parent;
  const int64_t size = static_cast<int64_t>(record.size());
  absl::StatusOr<PutOutcome> outcome =
      blocks_->Put({partition, key}, parent, std::make_shared<const std::string>(std::move(record)),
                   clock_->Now());
  if (!outcome.ok()) return outcome.status();
  if (*outcome == PutOutcome::kNoRoom) {
    metrics_->RecordDropped();
    response->set_dropped_blocks(response->dropped_blocks() + 1);
    return absl::OkStatus();
  }
  metrics_->RecordStored(size);
  response->set_stored_blocks(response->stored_blocks() + 1);
  return absl::OkStatus();
}

grpc::Status SessionCacheService::PutSession(grpc::ServerContext* context,
                                             const v1::PutSessionRequest* request,
                                             v1::PutSessionResponse* response) {
  return Handle("PutSession", context, [&] { return DoPutSession(*request, response); });
}

absl::Status SessionCacheService::CheckName(const std::string& field, const std::string& value,
                                            bool may_be_empty) const {
  const int64_t max_id = options_.max_session_id_bytes;
  if ((value.empty() && !may_be_empty) || static_cast<int64_t>(value.size()) > max_id) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must have ", may_be_empty ? 0 : 1,
                                                   " to ", max_id, " bytes, got ", value.size()));
  }
  return absl::OkStatus();
}

absl::Status SessionCacheService::DoPutSession(const v1::PutSessionRequest& request,
                                               v1::PutSessionResponse* response) {
  const v1::SessionRecord& r = request.record();
  if (absl::Status st = CheckName("record.session_id", r.session_id(), false); !st.ok()) return st;
  for (const auto& [name, value] : {std::pair{"record.owner", &r.owner()},
                                    {"record.tenant", &r.tenant()},
                                    {"lease_holder", &request.lease_holder()}}) {
    if (absl::Status st = CheckName(name, *value, true); !st.ok()) return st;
  }
  if (request.expected_version() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected_version must be >= 0, got ", request.expected_version()));
  }
  StoredSession s;
  s.id = r.session_id();
  s.owner = r.owner();
  s.tenant = r.tenant();
  if (absl::Status st = ParseHash(r.partition(), "record.partition", &s.partition); !st.ok()) {
    return st;
  }
  if (!r.head_block_hash().empty()) {
    if (absl::Status st = ParseHash(r.head_block_hash(), "record.head_block_hash", &s.head);
        !st.ok()) {
      return st;
    }
    s.has_head = true;
  }
  if (r.tokens_size() > options_.max_session_tokens) {
    return absl::ResourceExhaustedError(
        absl::StrCat("record.tokens has ", r.tokens_size(), " tokens; at most ",
                     options_.max_session_tokens, " (max-session-tokens)"));
  }
  for (int i = 0; i < r.tokens_size(); ++i) {
    if (r.tokens(i) < 0) {
      return absl::InvalidArgumentError(absl::StrCat("record.tokens[", i, "] is negative"));
    }
  }
  for (int i = 0; i < r.turn_ends_size(); ++i) {
    const int32_t lo = i == 0 ? 0 : r.turn_ends(i - 1);
    if (r.turn_ends(i) < lo || r.turn_ends(i) > r.tokens_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("record.turn_ends[", i, "] must be ascending and in [0, tokens_size()]"));
    }
  }
  if (r.turn_ends_size() > 0 && r.turn_ends(r.turn_ends_size() - 1) != r.tokens_size()) {
    return absl::InvalidArgumentError("record.turn_ends: the last must equal tokens_size()");
  }
  if (r.ttl_seconds() < 0 || absl::Seconds(r.ttl_seconds()) > options_.max_session_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("record.ttl_seconds must be in [0, ",
                                                   absl::ToInt64Seconds(options_.max_session_ttl),
                                                   "] (max-session-ttl), got ", r.ttl_seconds()));
  }
  s.tokens.assign(r.tokens().begin(), r.tokens().end());
  s.turn_ends.assign(r.turn_ends().begin(), r.turn_ends().end());
  const absl::Time now = clock_->Now();
  s.expires_at =
      now + (r.ttl_seconds() == 0 ? options_.default_session_ttl : absl::Seconds(r.ttl_seconds()));
  const int64_t expected = request.expected_version();
  const std::string& holder = request.lease_holder();
  // A compare-and-set on the version: refused on a tombstone (whatever the version), on
  // another version, or while another holder's lease is live. The write ends any lease.
  absl::StatusOr<SessionUpdate> update = sessions_->Update(
      s.id,
      [&](std::optional<StoredSession>& stored) -> absl::StatusOr<bool> {
        if (stored.has_value() && stored->closed) {
          return absl::FailedPreconditionError(absl::StrCat(
              "session \"", s.id, "\" is closed (a tombstone at version ", stored->version, ")"));
        }
        const int64_t version = stored.has_value() ? stored->version : 0;
        if (version != expected) {
          return absl::AbortedError(absl::StrCat("session \"", s.id, "\" is at version ", version,
                                                 ", not ", expected,
                                                 " (expected_version): re-read it and retry"));
        }
        if (stored.has_value() && stored->HasLiveLease(now) && stored->lease_holder != holder) {
          return LeaseConflict(*stored, now);
        }
        StoredSession next = s;  // a copy: the store may run this more than once
        next.version = version + 1;
        stored = std::move(next);
        return true;
      },
      now);
  if (!update.ok()) return update.status();
  response->set_version(update->record->version);
  return absl::OkStatus();
}

grpc::Status SessionCacheService::GetSession(grpc::ServerContext* context,
                                             const v1::GetSessionRecordRequest* request,
                                             v1::SessionRecord* response) {
  return Handle("GetSession", context, [&] { return DoGetSession(*request, response); });
}

absl::Status SessionCacheService::DoGetSession(const v1::GetSessionRecordRequest& request,
                                               v1::SessionRecord* response) {
  const absl::Time now = clock_->Now();
  const std::string& id = request.session_id();
  const std::string& holder = request.lease_holder();
  if (absl::Status st = CheckName("lease_holder", holder, true); !st.ok()) return st;
  if (holder.empty()) {
    absl::StatusOr<StoredSession> s = sessions_->Get(id, now);
    if (!s.ok()) return s.status();
    SessionToProto(*s, now, response);
    return absl::OkStatus();
  }
  if (absl::Status st = CheckName("session_id", id, false); !st.ok()) return st;
  if (request.lease_ms() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease_ms must be > 0 with a lease_holder, got ", request.lease_ms()));
  }
  const absl::Time lease_end =
      now + std::min(absl::Milliseconds(request.lease_ms()), options_.max_session_lease);
  // Takes the lease, or renews it for its holder; a tombstone is answered, never leased.
  absl::StatusOr<SessionUpdate> update = sessions_->Update(
      id,
      [&](std::optional<StoredSession>& stored) -> absl::StatusOr<bool> {
        if (!stored.has_value()) {
          return absl::NotFoundError(absl::StrCat("no session \"", id, "\""));
        }
        if (stored->closed) return false;
        if (stored->HasLiveLease(now) && stored->lease_holder != holder) {
          return LeaseConflict(*stored, now);
        }
        stored->lease_holder = holder;
        stored->lease_expires_at = lease_end;
        // A leased record does not expire under its holder's turn.
        stored->expires_at = std::max(stored->expires_at, lease_end);
        return true;
      },
      now);
  if (!update.ok()) return update.status();
  SessionToProto(*update->record, now, response);
  return absl::OkStatus();
}

grpc::Status SessionCacheService::ReleaseSessionLease(
    grpc::ServerContext* context, const v1::ReleaseSessionLeaseRequest* request,
    v1::ReleaseSessionLeaseResponse* /*response*/) {
  return Handle("ReleaseSessionLease", context, [&] { return DoReleaseLease(*request); });
}

absl::Status SessionCacheService::DoReleaseLease(const v1::ReleaseSessionLeaseRequest& request) {
  if (absl::Status st = CheckName("session_id", request.session_id(), false); !st.ok()) return st;
  if (absl::Status st = CheckName("lease_holder", request.lease_holder(), false); !st.ok()) {
    return st;
  }
  const std::string& holder = request.lease_holder();
  absl::StatusOr<SessionUpdate> update = sessions_->Update(
      request.session_id(),
      [&](std::optional<StoredSession>& stored) -> absl::StatusOr<bool> {
        if (!stored.has_value() || stored->lease_holder != holder) return false;
        stored->lease_holder.clear();
        stored->lease_expires_at = absl::InfinitePast();
        return true;
      },
      clock_->Now());
  return update.status();
}

grpc::Status SessionCacheService::DeleteSession(grpc::ServerContext* context,
                                                const v1::DeleteSessionRequest* request,
                                                v1::DeleteSessionResponse* /*response*/) {
  return Handle("DeleteSession", context, [&] { return DoDeleteSession(*request); });
}

absl::Status SessionCacheService::DoDeleteSession(const v1::DeleteSessionRequest& request) {
  const std::string& id = request.session_id();
  if (absl::Status st = CheckName("session_id", id, false); !st.ok()) return st;
  const absl::Time now = clock_->Now();
  // A tombstone replaces the record (or stands for one never seen here); closing a
  // tombstone again changes nothing.
  absl::StatusOr<SessionUpdate> update = sessions_->Update(
      id,
      [&](std::optional<StoredSession>& stored) -> absl::StatusOr<bool> {
        if (stored.has_value() && stored->closed) return false;
        StoredSession tombstone;
        tombstone.id = id;
        tombstone.closed = true;
        tombstone.version = stored.has_value() ? stored->version + 1 : 1;
        tombstone.expires_at = now + options_.session_tombstone_ttl;
        if (stored.has_value()) {
          tombstone.partition = stored->partition;
          tombstone.owner = stored->owner;
          tombstone.tenant = stored->tenant;
        }
        stored = std::move(tombstone);
        return true;
      },
      now);
  return update.status();
}

grpc::Status SessionCacheService::ListSessions(grpc::ServerContext* context,
                                               const v1::ListSessionsRequest* request,
                                               v1::ListSessionsResponse* response) {
  return Handle("ListSessions", context, [&] { return DoListSessions(*request, response); });
}

absl::Status SessionCacheService::DoListSessions(const v1::ListSessionsRequest& request,
                                                 v1::ListSessionsResponse* response) {
  constexpr int32_t kDefaultPageSize = 100;
  constexpr int32_t kMaxPageSize = 1000;  // session_cache.proto
  BlockHash partition;
  const bool filtered = !request.partition().empty();
  if (filtered) {
    if (absl::Status s = ParseHash(request.partition(), "partition", &partition); !s.ok()) {
      return s;
    }
  }
  if (request.page_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size must be >= 0, got ", request.page_size()));
  }
  const int32_t page_size =
      request.page_size() == 0 ? kDefaultPageSize : std::min(request.page_size(), kMaxPageSize);
  const absl::Time now = clock_->Now();
  absl::StatusOr<SessionRecordStore::Page> page =
      sessions_->List(filtered ? &partition : nullptr, page_size, request.page_token(), now);
  if (!page.ok()) return page.status();
  for (const StoredSession& s : page->sessions) SessionToProto(s, now, response->add_sessions());
  response->set_next_page_token(page->next_page_token);
  return absl::OkStatus();
}

grpc::Status SessionCacheService::GetStats(grpc::ServerContext* context,
                                           const v1::GetStatsRequest* /*request*/,
                                           v1::CacheStats* response) {
  return Handle("GetStats", context, [&] {
    DoGetStats(response);
    return absl::OkStatus();
  });
}

void SessionCacheService::DoGetStats(v1::CacheStats* response) {
  const BlockStoreStats b = blocks_->stats();
  const CacheTotals t = metrics_->totals();
  response->set_blocks(b.blocks);
  response->set_bytes(b.bytes);
  response->set_capacity_bytes(b.capacity_bytes);
  response->set_sessions(sessions_->size());
  response->set_lookups_total(t.lookups);
  response->set_hit_blocks_total(t.hit_blocks);
  response->set_miss_blocks_total(t.miss_blocks);
  response->set_stored_blocks_total(t.stored_blocks);
  response->set_rejected_blocks_total(t.rejected_blocks);
  int64_t evicted = 0;
  for (const auto& [reason, count] : b.evictions) evicted += count;
  response->set_evicted_blocks_total(evicted);
  response->set_bytes_stored_total(t.bytes_stored);
  response->set_bytes_served_total(t.bytes_served);
  response->set_backend(blocks_->name());
}

}  // namespace kvserve::cachesvc
