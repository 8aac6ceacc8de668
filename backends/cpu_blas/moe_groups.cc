#include "backends/cpu_blas/moe_groups.h"

#include <cstddef>

namespace kvserve::backends::cpu_blas {

void MoeGroups::Build(std::span<const int32_t> ids, int n_experts) {
  next_.assign(static_cast<size_t>(n_experts), 0);
  for (int32_t e : ids) ++next_[static_cast<size_t>(e)];
  // Counts to first entries (exclusive prefix sums), one group per chosen expert.
  groups.clear();
  int begin = 0;
  for (int e = 0; e < n_experts; ++e) {
    const int count = next_[static_cast<size_t>(e)];
    next_[static_cast<size_t>(e)] = begin;
    if (count > 0) groups.push_back(Group{e, begin, begin + count});
    begin += count;
  }
  entry_source.resize(ids.size());
  entry_of.resize(ids.size());
  for (size_t j = 0; j < ids.size(); ++j) {
    const int entry = next_[static_cast<size_t>(ids[j])]++;
    entry_source[static_cast<size_t>(entry)] = static_cast<int>(j);
    entry_of[j] = entry;
  }
}

}  // namespace kvserve::backends::cpu_blas
