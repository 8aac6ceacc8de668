// The reference backend: the forward pass as plain scalar code, written to be read like
// llama2.c's run.c. It is the oracle every other backend is compared against.
#ifndef KVSERVE_BACKENDS_REFERENCE_REFERENCE_BACKEND_H_
#define KVSERVE_BACKENDS_REFERENCE_REFERENCE_BACKEND_H_

#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "model/kv_layout.h"
#include "model/model.h"

namespace kvserve::backends {

// Single-threaded (BackendOptions::threads is ignored). Forward is not reentrant; see
// Backend. Holds the model by reference (it must outlive the backend) and owns only its
// scratch buffers.
class ReferenceBackend : public Backend {
 public:
  // INVALID_ARGUMENT when `kv_layout` does not fit the model (see ValidateKvLayout).
  static absl::StatusOr<std::unique_ptr<ReferenceBackend>> Create(const model::Model& model,
                                                                  const model::KvLayout& kv_layout);
  ~ReferenceBackend() override;

  std::string name() const override { return "reference"; }
  const model::KvLayout& kv_layout() const override;
  absl::Status Forward(const Batch& batch, std::span<float> logits) override;

 private:
  struct State;
  explicit ReferenceBackend(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kvserve::backends

#endif  // KVSERVE_BACKENDS_REFERENCE_REFERENCE_BACKEND_H_
