// The real kvserve-cache binary as a child process: it prints its port, serves a round
// trip with a bearer token, refuses a malformed token file, exits 0 on SIGTERM, and
// restarted on the same --disk-dir keeps session versions, leases and tombstones.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "cache/remote_cache_client.h"
#include "cachesvc/testing/block_chain.h"
#include "gtest/gtest.h"

namespace kvserve::cachesvc {
namespace {

using cache::RemoteCacheClient;

struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;  // the child's stdout and stderr
};

Child Spawn(std::vector<std::string> args) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  Child child;
  child.pid = fork();
  if (child.pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    std::vector<char*> argv;
    args.insert(args.begin(), KVSERVE_CACHE_BINARY);
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  child.out = fdopen(fds[0], "r");
  return child;
}

std::string ReadLine(FILE* f) {
  char buffer[1024];
  return std::fgets(buffer, sizeof buffer, f) != nullptr ? std::string(buffer) : std::string();
}

int WaitExit(const Child& child) {
  int status = 0;
  waitpid(child.pid, &status, 0);
  std::fclose(child.out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(CacheServerProcessTest, ServesWithATokenAndExitsZeroOnSigterm) {
  const std::string tokens = TempFile("tokens", "# test tokens\nprocess-token tester\n");
  Child child =
      Spawn({"--listen", "127.0.0.1:0", "--auth-tokens", tokens, "--memory-bytes", "1000000"});
  const std::string line = ReadLine(child.out);
  constexpr char kPrefix[] = "kvserve-cache listening on 127.0.0.1:";
  ASSERT_TRUE(absl::StartsWith(line, kPrefix)) << line;
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      line.substr(sizeof kPrefix - 1, line.find(' ', sizeof kPrefix - 1) - (sizeof kPrefix - 1)),
      &port))
      << line;

  auto client = RemoteCacheClient::Create(
      {.target = "127.0.0.1:" + std::to_string(port), .token = "process-token"});
  ASSERT_TRUE(client.ok());
  const testing::BlockChain c = testing::MakeChain(3, "");
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  EXPECT_EQ(*(*client)->Store(c.partition, c.records, deadline), 3);
  EXPECT_EQ((*client)->Lookup(c.partition, c.hashes, deadline)->blocks, 3);
  std::vector<std::string> got;
  EXPECT_EQ(*(*client)->Fetch(c.partition, c.hashes, deadline,
                              [&](int32_t, std::string_view r) {
                                got.emplace_back(r);
                                return true;
                              }),
            3);
  EXPECT_EQ(got, c.records);
  auto anonymous = RemoteCacheClient::Create({.target = "127.0.0.1:" + std::to_string(port)});
  EXPECT_EQ((*anonymous)->Lookup(c.partition, c.hashes, deadline).status().code(),
            absl::StatusCode::kUnauthenticated);

  ASSERT_EQ(kill(child.pid, SIGTERM), 0);
  EXPECT_EQ(WaitExit(child), 0);
}

// The port of the "listening on" line (lines before it, e.g. the disk tier's, skipped);
// 0 when the child printed none.
int ReadPort(FILE* out) {
  constexpr char kPrefix[] = "kvserve-cache listening on 127.0.0.1:";
  for (int lines = 0; lines < 20; ++lines) {
    const std::string line = ReadLine(out);
    if (line.empty()) return 0;
    if (!absl::StartsWith(line, kPrefix)) continue;
    int port = 0;
    const size_t at = sizeof kPrefix - 1;
    if (!absl::SimpleAtoi(line.substr(at, line.find(' ', at) - at), &port)) return 0;
    return port;
  }
  return 0;
}

TEST(CacheServerProcessTest, ARestartOnTheDiskDirKeepsVersionsLeasesAndTombstones) {
  const std::string dir = ::testing::TempDir() + "/kvserve_cache_restart";
  std::filesystem::remove_all(dir);
  const std::vector<std::string> args = {
      "--listen",     "127.0.0.1:0", "--disk-dir",     dir,
      "--disk-bytes", "10000000",    "--memory-bytes", "1000000"};
  cache::RemoteSession s;
  s.id = "conv";
  s.partition = cache::BlockHash{1, 2};
  s.tokens = {1, 2, 3};
  s.turn_ends = {3};
  const cache::LeaseRequest lease{.holder = "turn-7", .duration = absl::Minutes(5)};
  {
    Child child = Spawn(args);
    const int port = ReadPort(child.out);
    ASSERT_NE(port, 0);
    auto client = *RemoteCacheClient::Create({.target = "127.0.0.1:" + std::to_string(port)});
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    ASSERT_EQ(*client->PutSession(s, 0, "", deadline), 1);
    s.tokens = {1, 2, 3, 4};
    s.turn_ends = {4};
    ASSERT_EQ(*client->PutSession(s, 1, "", deadline), 2);
    ASSERT_TRUE(client->GetSession("conv", &lease, deadline).ok());
    // The lease excludes a write by no holder.
    ASSERT_EQ(client->PutSession(s, 2, "", deadline).status().code(), absl::StatusCode::kAborted);
    cache::RemoteSession closed = s;
    closed.id = "closed";
    ASSERT_EQ(*client->PutSession(closed, 0, "", deadline), 1);
    ASSERT_TRUE(client->DeleteSession("closed", deadline).ok());
    ASSERT_EQ(kill(child.pid, SIGTERM), 0);
    ASSERT_EQ(WaitExit(child), 0);
  }
  Child child = Spawn(args);
  const int port = ReadPort(child.out);
  ASSERT_NE(port, 0);
  auto client = *RemoteCacheClient::Create({.target = "127.0.0.1:" + std::to_string(port)});
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  absl::StatusOr<cache::RemoteSession> got = client->GetSession("conv", nullptr, deadline);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version, 2);
  EXPECT_EQ(got->tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(got->lease_holder, "turn-7");  // the lease's deadline is wall-clock time
  const cache::LeaseRequest other{.holder = "turn-8"};
  EXPECT_EQ(client->GetSession("conv", &other, deadline).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(*client->PutSession(s, 2, "turn-7", deadline), 3);
  got = client->GetSession("closed", nullptr, deadline);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->closed);
  EXPECT_EQ(got->version, 2);
  EXPECT_EQ(client->PutSession(s, 0, "", deadline).status().code(), absl::StatusCode::kAborted);
  cache::RemoteSession reopen = s;
  reopen.id = "closed";
  EXPECT_EQ(client->PutSession(reopen, 2, "", deadline).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->GetStats(deadline)->sessions(), 1);  // the tombstone is not counted
  ASSERT_EQ(kill(child.pid, SIGTERM), 0);
  EXPECT_EQ(WaitExit(child), 0);
  std::filesystem::remove_all(dir);
}

TEST(CacheServerProcessTest, MalformedTokenFileIsAStartUpErrorNamingTheLine) {
  const std::string tokens = TempFile("bad_tokens", "good one\n\nbad\n");
  Child child = Spawn({"--listen", "127.0.0.1:0", "--auth-tokens", tokens});
  const std::string line = ReadLine(child.out);
  EXPECT_NE(line.find("line 3"), std::string::npos) << line;
  EXPECT_EQ(WaitExit(child), 2);
}

}  // namespace
}  // namespace kvserve::cachesvc
