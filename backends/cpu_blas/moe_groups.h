// The rows of a step grouped by expert, as plain data: which (row, selected expert)
// entries each expert serves, so that a mixture-of-experts layer reads each selected
// expert's matrices once per step whatever the number of rows that chose it.
#ifndef KVSERVE_BACKENDS_CPU_BLAS_MOE_GROUPS_H_
#define KVSERVE_BACKENDS_CPU_BLAS_MOE_GROUPS_H_

#include <cstdint>
#include <span>
#include <vector>

namespace kvserve::backends::cpu_blas {

// Invariants (after Build): the groups are in expert order, one per expert chosen at
// least once; group g covers entries [g.begin, g.end), consecutive and together all
// ids.size() entries; within a group the entries are in ascending source order;
// entry_source[entry_of[i]] == i for every i.
struct MoeGroups {
  struct Group {
    int expert = 0;
    int begin = 0;  // first entry
    int end = 0;    // one past the last entry
    bool operator==(const Group&) const = default;
  };
  std::vector<Group> groups;
  // [ids.size()]: entry i holds ids[entry_source[i]] (the k-th expert of row
  // entry_source[i] / k, for k experts per row).
  std::vector<int> entry_source;
  // [ids.size()]: the entry of ids[j].
  std::vector<int> entry_of;

  // Groups `ids` (the selected experts of every row, row-major; each in [0, n_experts))
  // by expert, a counting sort. Reuses the vectors' capacity.
  void Build(std::span<const int32_t> ids, int n_experts);

 private:
  std::vector<int> next_;  // [n_experts] Build's next free entry of each expert
};

}  // namespace kvserve::backends::cpu_blas

#endif  // KVSERVE_BACKENDS_CPU_BLAS_MOE_GROUPS_H_
