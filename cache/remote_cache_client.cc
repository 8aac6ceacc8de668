#include "cache/remote_cache_client.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/block_record.h"
#include "cache/record_assembler.h"
#include "cache/record_transport.h"

namespace kvserve::cache {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  // gRPC and absl status codes are the same numbers.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

template <typename Request>
void SetChain(const cache::BlockHash& partition, std::span<const cache::BlockHash> chain,
              Request* request) {
  request->set_partition(cache::HashToBytes(partition));
  request->mutable_block_hashes()->Reserve(static_cast<int>(chain.size()));
  for (const cache::BlockHash& h : chain) request->add_block_hashes(cache::HashToBytes(h));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RemoteCacheClient>> RemoteCacheClient::Create(
    const Options& options) {
  if (options.target.empty()) return absl::InvalidArgumentError("the cache target is empty");
  if (options.fetch_chunk_bytes < 1 || options.store_chunk_bytes < 1 ||
      options.store_chunk_bytes > options.max_message_bytes - (64 << 10) ||
      options.max_record_bytes < 1) {
    return absl::InvalidArgumentError(
        "cache client: chunk sizes must be >= 1 and below max_message_bytes - 64 KiB");
  }
  if (options.channels < 1 || options.fetch_streams < 1 || options.fetch_min_stream_blocks < 1) {
    return absl::InvalidArgumentError(
        "cache client: channels, fetch_streams and fetch_min_stream_blocks must be >= 1");
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  // Each channel its own connection (gRPC shares subchannels of equal arguments).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  for (const TransportArg& arg : kRecordTransportArgs) args.SetInt(arg.name, arg.value);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int32_t i = 0; i < options.channels; ++i) {
    channels.push_back(grpc::CreateCustomChannel(
        options.target,
        options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials(),
        args));
  }
  return std::unique_ptr<RemoteCacheClient>(new RemoteCacheClient(options, std::move(channels)));
}

RemoteCacheClient::RemoteCacheClient(const Options& options,
                                     std::vector<std::shared_ptr<grpc::Channel>> channels)
    : options_(options), channels_(std::move(channels)) {
  for (const std::shared_ptr<grpc::Channel>& channel : channels_) {
    stubs_.push_back(v1::SessionCache::NewStub(channel));
  }
}

void RemoteCacheClient::Prepare(grpc::ClientContext* context, absl::Time deadline) const {
  context->set_deadline(absl::ToChronoTime(deadline));
  if (!options_.token.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options_.token));
  }
}

absl::StatusOr<cache::RemoteKvCache::Presence> RemoteCacheClient::Lookup(
    const cache::BlockHash& partition, std::span<const cache::BlockHash> chain,
    absl::Time deadline) {
  v1::LookupRequest request;
  SetChain(partition, chain, &request);
  v1::LookupResponse response;
  grpc::ClientContext context;
  Prepare(&context, deadline);
  if (grpc::Status s = stubs_[0]->Lookup(&context, request, &response); !s.ok()) {
    return FromGrpc(s);
  }
  if (response.present_blocks() < 0 ||
      response.present_blocks() > static_cast<int64_t>(chain.size())) {
    return absl::DataLossError("Lookup: present_blocks out of range");
  }
  return Presence{response.present_blocks(), response.present_bytes()};
}

absl::StatusOr<int32_t> RemoteCacheClient::FetchStream(v1::SessionCache::Stub* stub,
                                                       grpc::ClientContext* context,
                                                       const cache::BlockHash& partition,
                                                       std::span<const cache::BlockHash> chain,
                                                       const RecordSink& sink) const {
  v1::FetchBlocksRequest request;
  SetChain(partition, chain, &request);
  request.set_max_chunk_bytes(options_.fetch_chunk_bytes);
  std::unique_ptr<grpc::ClientReader<v1::FetchBlocksResponse>> reader =
      stub->FetchBlocks(context, request);
  RecordAssembler assembler(options_.max_record_bytes);
  // One message reused for every Read: protobuf keeps its cleared chunks and their data
  // strings' capacity, so the records of a stream are parsed into the same memory
  // instead of a fresh allocation (and fresh pages) each.
  v1::FetchBlocksResponse message;
  absl::Status protocol_error;
  bool stopped = false;
  while (!stopped && reader->Read(&message)) {
    for (const v1::BlockChunk& chunk : message.chunks()) {
      std::optional<std::string_view> record;
      protocol_error = assembler.AddView(chunk.index(), chunk.offset(), chunk.record_bytes(),
                                         chunk.data(), &record);
      if (protocol_error.ok() && assembler.next_index() > static_cast<int32_t>(chain.size())) {
        protocol_error = absl::InvalidArgumentError("more records than requested");
      }
      if (!protocol_error.ok()) {
        stopped = true;
        break;
      }
      if (record.has_value() && !sink(chunk.index(), *record)) {
        stopped = true;
        break;
      }
    }
  }
  const int32_t delivered = assembler.next_index();
  if (stopped) {
    context->TryCancel();
    while (reader->Read(&message)) {
    }
  }
  const grpc::Status status = reader->Finish();
  if (!protocol_error.ok()) {
    return absl::DataLossError(absl::StrCat("FetchBlocks: the service broke the chunk protocol: ",
                                            protocol_error.message()));
  }
  if (!stopped && !status.ok()) return FromGrpc(status);
  return delivered;
}

absl::StatusOr<int32_t> RemoteCacheClient::Fetch(const cache::BlockHash& partition,
                                                 std::span<const cache::BlockHash> chain,
                                                 absl::Time deadline, const RecordSink& on_record) {
  const int64_t n = static_cast<int64_t>(chain.size());
  const int64_t streams =
      std::clamp<int64_t>(n / options_.fetch_min_stream_blocks, 1, options_.fetch_streams);
  // Range r is chain[begin(r), begin(r + 1)).
  auto begin = [&](int64_t r) { return static_cast<size_t>(n * r / streams); };
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  for (int64_t r = 0; r < streams; ++r) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    Prepare(contexts.back().get(), deadline);
  }
  auto stub = [&](int64_t r) { return stubs_[static_cast<size_t>(r) % stubs_.size()].get(); };
  auto range = [&](int64_t r) { return chain.subspan(begin(r), begin(r + 1) - begin(r)); };

  // Every range hands its records to on_record as they arrive, on its own thread (range 0
  // on the caller's), so the ranges' checks and copies run side by side and no record
  // waits in memory for an earlier range. The first range (in chain order) that ends
  // short ends the fetch: `first_short` (guarded by mu) is the lowest such range so far;
  // the ranges after it are cancelled, and stop handing out records.
  // Per range: the records on_record accepted, or the stream's error.
  std::vector<absl::StatusOr<int32_t>> outcomes(static_cast<size_t>(streams), 0);
  std::mutex mu;
  int64_t first_short = streams;
  auto run = [&](int64_t r) {
    absl::StatusOr<int32_t>& out = outcomes[static_cast<size_t>(r)];
    const int32_t offset = static_cast<int32_t>(begin(r));
    int32_t accepted = 0;
    out = FetchStream(stub(r), contexts[static_cast<size_t>(r)].get(), partition, range(r),
                      [&](int32_t index, std::string_view record) {
                        {
                          std::lock_guard<std::mutex> lock(mu);
                          if (first_short < r) return false;  // no longer wanted
                        }
                        if (!on_record(offset + index, record)) return false;
                        ++accepted;
                        return true;
                      });
    if (out.ok()) out = accepted;  // a refused record ended the stream: not counted
    const bool whole = out.ok() && *out == static_cast<int32_t>(range(r).size());
    if (whole) return;
    std::lock_guard<std::mutex> lock(mu);
    if (r >= first_short) return;
    first_short = r;
    for (int64_t later = r + 1; later < streams; ++later) {
      contexts[static_cast<size_t>(later)]->TryCancel();
    }
  };
  std::vector<std::thread> helpers;
  for (int64_t r = 1; r < streams; ++r) helpers.emplace_back(run, r);
  run(0);
  for (std::thread& helper : helpers) helper.join();

  // The accepted prefix: whole ranges up to the first short one, and what it accepted.
  int32_t total = 0;
  for (int64_t r = 0; r < streams; ++r) {
    const absl::StatusOr<int32_t>& out = outcomes[static_cast<size_t>(r)];
    if (!out.ok()) return out.status();
    total += *out;
    if (*out < static_cast<int32_t>(range(r).size())) break;
  }
  return total;
}

absl::StatusOr<int32_t> RemoteCacheClient::Store(const cache::BlockHash& partition,
                                                 std::span<const std::string> records,
                                                 absl::Time deadline) {
  grpc::ClientContext context;
  Prepare(&context, deadline);
  v1::StoreBlocksResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::StoreBlocksRequest>> writer =
      stubs_[0]->StoreBlocks(&context, &response);
  v1::StoreBlocksRequest message;
  message.set_partition(cache::HashToBytes(partition));
  int64_t message_bytes = 0;
  const int64_t chunk_bytes = options_.store_chunk_bytes;
  bool writable = true;
  for (size_t i = 0; i < records.size() && writable; ++i) {
    const std::string& record = records[i];
    const int64_t size = static_cast<int64_t>(record.size());
    for (int64_t offset = 0; offset < size && writable;) {
      const int64_t n = std::min(size - offset, chunk_bytes - message_bytes);
      v1::BlockChunk* chunk = message.add_chunks();
      chunk->set_index(static_cast<int32_t>(i));
      chunk->set_offset(offset);
      chunk->set_record_bytes(size);
      chunk->set_data(record.data() + offset, static_cast<size_t>(n));
      offset += n;
      message_bytes += n;
      if (message_bytes == chunk_bytes) {
        writable = writer->Write(message);
        message.Clear();
        message_bytes = 0;
      }
    }
  }
  if (writable && message.chunks_size() > 0) writable = writer->Write(message);
  if (writable) writer->WritesDone();
  if (grpc::Status s = writer->Finish(); !s.ok()) return FromGrpc(s);
  return response.stored_blocks();
}

absl::StatusOr<int64_t> RemoteCacheClient::PutSession(const cache::RemoteSession& session,
                                                      int64_t expected_version,
                                                      const std::string& lease_holder,
                                                      absl::Time deadline) {
  if (expected_version < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PutSession: expected_version must be >= 0, got ", expected_version));
  }
  v1::PutSessionRequest request;
  v1::SessionRecord* r = request.mutable_record();
  r->set_session_id(session.id);
  r->set_partition(cache::HashToBytes(session.partition));
  r->mutable_tokens()->Assign(session.tokens.begin(), session.tokens.end());
  r->mutable_turn_ends()->Assign(session.turn_ends.begin(), session.turn_ends.end());
  if (session.has_head) r->set_head_block_hash(cache::HashToBytes(session.head));
  r->set_owner(session.owner);
  r->set_tenant(session.tenant);
  r->set_ttl_seconds(absl::ToInt64Seconds(session.ttl));
  request.set_expected_version(expected_version);
  request.set_lease_holder(lease_holder);
  v1::PutSessionResponse response;
  grpc::ClientContext context;
  Prepare(&context, deadline);
  if (grpc::Status s = stubs_[0]->PutSession(&context, request, &response); !s.ok()) {
    return FromGrpc(s);
  }
  if (response.version() != expected_version + 1) {
    return absl::DataLossError(absl::StrCat("PutSession: the service answered version ",
                                            response.version(), " for a write over version ",
                                            expected_version));
  }
  return response.version();
}

absl::StatusOr<cache::RemoteSession> RemoteCacheClient::GetSession(const std::string& id,
                                                                   const cache::LeaseRequest* lease,
                                                                   absl::Time deadline) {
  v1::GetSessionRecordRequest request;
  request.set_session_id(id);
  if (lease != nullptr) {
    if (lease->holder.empty() || lease->duration <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          "GetSession: a lease needs a holder and a positive duration");
    }
    request.set_lease_holder(lease->holder);
    request.set_lease_ms(std::max<int64_t>(
        1, absl::ToInt64Milliseconds(absl::Ceil(lease->duration, absl::Milliseconds(1)))));
  }
  v1::SessionRecord r;
  grpc::ClientContext context;
  Prepare(&context, deadline);
  if (grpc::Status s = stubs_[0]->GetSession(&context, request, &r); !s.ok()) return FromGrpc(s);
  // The answer must be the record asked for, whole and consistent.
  auto bad = [](const std::string& what) {
    return absl::DataLossError(absl::StrCat("GetSession: ", what));
  };
  if (r.session_id() != id) return bad("the record's id is not the one asked for");
  if (r.version() < 1) return bad(absl::StrCat("version ", r.version(), " is below 1"));
  if (r.expires_in_seconds() < 0 || r.lease_expires_in_ms() < 0) {
    return bad("a negative expiry");
  }
  if (r.lease_holder().empty() != (r.lease_expires_in_ms() == 0)) {
    return bad("a lease holder without a lease time or the reverse");
  }
  if (r.closed() && (r.tokens_size() > 0 || r.turn_ends_size() > 0 ||
                     !r.head_block_hash().empty() || !r.lease_holder().empty())) {
    return bad("a closed session with history or a lease");
  }
  if (lease != nullptr && !r.closed() && r.lease_holder() != lease->holder) {
    return bad("the lease asked for was not granted, and no error said so");
  }
  for (int i = 0; i < r.tokens_size(); ++i) {
    if (r.tokens(i) < 0) return bad("a negative token id");
  }
  for (int i = 0; i < r.turn_ends_size(); ++i) {
    const int32_t lo = i == 0 ? 0 : r.turn_ends(i - 1);
    if (r.turn_ends(i) < lo || r.turn_ends(i) > r.tokens_size()) {
      return bad("turn_ends out of order or beyond the tokens");
    }
  }
  cache::RemoteSession session;
  session.id = r.session_id();
  if (!cache::HashFromBytes(r.partition(), &session.partition)) {
    return bad("the partition is not 16 bytes");
  }
  session.tokens.assign(r.tokens().begin(), r.tokens().end());
  session.turn_ends.assign(r.turn_ends().begin(), r.turn_ends().end());
  if (!r.head_block_hash().empty()) {
    if (!cache::HashFromBytes(r.head_block_hash(), &session.head)) {
      return bad("head_block_hash is not 16 bytes");
    }
    session.has_head = true;
  }
  session.owner = r.owner();
  session.tenant = r.tenant();
  session.ttl = absl::Seconds(r.expires_in_seconds());
  session.version = r.version();
  session.closed = r.closed();
  session.lease_holder = r.lease_holder();
  session.lease_remaining = absl::Milliseconds(r.lease_expires_in_ms());
  return session;
}

absl::Status RemoteCacheClient::ReleaseLease(const std::string& id, const std::string& holder,
                                             absl::Time deadline) {
  v1::ReleaseSessionLeaseRequest request;
  request.set_session_id(id);
  request.set_lease_holder(holder);
  v1::ReleaseSessionLeaseResponse response;
  grpc::ClientContext context;
  Prepare(&context, deadline);
  return FromGrpc(stubs_[0]->ReleaseSessionLease(&context, request, &response));
}

absl::Status RemoteCacheClient::DeleteSession(const std::string& id, absl::Time deadline) {
  v1::DeleteSessionRequest request;
  request.set_session_id(id);
  v1::DeleteSessionResponse response;
  grpc::ClientContext context;
  Prepare(&context, deadline);
  return FromGrpc(stubs_[0]->DeleteSession(&context, request, &response));
}

absl::StatusOr<v1::CacheStats> RemoteCacheClient::GetStats(absl::Time deadline) {
  v1::GetStatsRequest request;
  v1::CacheStats stats;
  grpc::ClientContext context;
  Prepare(&context, deadline);
  if (grpc::Status s = stubs_[0]->GetStats(&context, request, &stats); !s.ok()) return FromGrpc(s);
  return stats;
}

}  // namespace kvserve::cache
