// A consistent-hash ring over replica names, for session-affine routing: a session id
// maps to the same replica from every client (the hash is stable across processes and
// machines), and when a replica is gone its sessions spread over the others while every
// other session stays where it is.
//
// Each replica is placed at `virtual_nodes` points of a 64-bit ring (hash of
// "NAME#i"); a key belongs to the first point at or after its hash, wrapping around.
//
// Invariants: points_ is sorted by hash; every replica has exactly virtual_nodes points.
// Threading: immutable after construction; thread-safe.
#ifndef KVSERVE_CLIENT_HASH_RING_H_
#define KVSERVE_CLIENT_HASH_RING_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvserve::client {

class HashRing {
 public:
  // Default points per replica: enough that three replicas own shares within a few
  // percent of a third.
  static constexpr int kDefaultVirtualNodes = 160;

  // `replicas`: distinct names (the order does not matter: the same set gives the same
  // ring). virtual_nodes >= 1.
  explicit HashRing(std::vector<std::string> replicas, int virtual_nodes = kDefaultVirtualNodes);

  // Indices into replicas() in order of preference for `key`: the owner first, then,
  // walking the ring, each other replica at its first appearance (where the key goes when
  // those before it are gone). Every replica appears once. Empty for an empty ring.
  std::vector<int> Preference(std::string_view key) const;

  const std::vector<std::string>& replicas() const { return replicas_; }

  // The stable 64-bit hash the ring uses: XXH3-64 with seed 0 (libxxhash), the same on
  // every machine and in every process.
  static uint64_t Hash(std::string_view bytes);

 private:
  std::vector<std::string> replicas_;
  std::vector<std::pair<uint64_t, int>> points_;  // (hash, replica index), sorted
};

}  // namespace kvserve::client

#endif  // KVSERVE_CLIENT_HASH_RING_H_
