#include "tests/support/deferred_capture_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace deltaserve::testing {
namespace {

using kernels::KernelStatus;
using kernels::Mat;
using kernels::Vec;
using kernels::WeightView;

// A matrix's shape for an op's signature (a graph update needs the same ops, not the same
// pointers or positions).
std::string Shape(const Mat& m) { return absl::StrCat(m.rows, "x", m.cols); }
std::string Shape(const WeightView& w) { return absl::StrCat(w.out, "x", w.in, "x", w.count); }

}  // namespace

DeferredCaptureBackend::DeferredCaptureBackend(std::unique_ptr<kernels::Backend> inner)
    : inner_(std::move(inner)) {}

DeferredCaptureBackend::~DeferredCaptureBackend() {
  // Recorded closures hold no buffers; whatever the engine still holds must have gone already.
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.clear();
}

std::vector<std::string> DeferredCaptureBackend::violations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return violations_;
}

// --- capture ---------------------------------------------------------------------------------

KernelStatus DeferredCaptureBackend::BeginStepCapture() {
  if (capturing_) return KernelStatus::kInvalidArgument;
  capturing_ = true;
  spoilt_ = false;
  recording_ = {};
  return KernelStatus::kOk;
}

KernelStatus DeferredCaptureBackend::EndStepCapture(uint64_t key) {
  if (!capturing_) return KernelStatus::kInvalidArgument;
  capturing_ = false;
  Recording recording = std::move(recording_);
  recording_ = {};
  if (spoilt_ || fail_end_) {
    // As cudaStreamEndCapture of an invalidated capture: nothing of it will run.
    fail_end_ = false;
    return KernelStatus::kDeviceError;
  }
  auto it = graphs_.find(key);
  if (it != graphs_.end() && it->second.signature == recording.signature) {
    ++stats_.updated;
  } else {
    ++stats_.instantiated;
  }
  graphs_[key] = std::move(recording);
  return KernelStatus::kOk;
}

KernelStatus DeferredCaptureBackend::LaunchStepGraph(uint64_t key) {
  const auto it = graphs_.find(key);
  if (capturing_ || it == graphs_.end()) return KernelStatus::kInvalidArgument;
  ++stats_.launched;
  for (const Op& op : it->second.ops) {
    if (KernelStatus s = op(); s != KernelStatus::kOk) return s;
  }
  return KernelStatus::kOk;
}

void DeferredCaptureBackend::AbortStepCapture() {
  capturing_ = false;
  recording_ = {};
}

KernelStatus DeferredCaptureBackend::Run(std::string signature, Op op) {
  if (!capturing_) return op();
  if (fail_op_ == static_cast<int64_t>(recording_.ops.size())) {
    fail_op_ = -1;
    spoilt_ = true;
    return KernelStatus::kDeviceError;
  }
  recording_.signature.push_back(std::move(signature));
  recording_.ops.push_back(std::move(op));
  ++ops_recorded_;
  return KernelStatus::kOk;
}

bool DeferredCaptureBackend::Refused(const char* what) {
  if (!capturing_) return false;
  refused_.emplace_back(what);
  return true;
}

// --- memory ----------------------------------------------------------------------------------

kernels::DeviceBuffer DeferredCaptureBackend::Wrap(kernels::DeviceBuffer inner) {
  void* data = inner.data();
  const size_t bytes = inner.bytes();
  if (data == nullptr) return {};
  std::lock_guard<std::mutex> lock(mu_);
  buffers_[data] = std::move(inner);
  return kernels::DeviceBuffer(data, bytes, &FreeWrapped, this);
}

void DeferredCaptureBackend::FreeWrapped(void* owner, void* data) {
  auto* self = static_cast<DeferredCaptureBackend*>(owner);
  kernels::DeviceBuffer inner;  // freed after the lock is released
  std::lock_guard<std::mutex> lock(self->mu_);
  if (self->capturing_) {
    // cudaFree during a capture invalidates it (and the memory stays allocated).
    self->spoilt_ = true;
    self->violations_.push_back("a DeviceBuffer was freed while capturing");
  }
  auto it = self->buffers_.find(data);
  if (it == self->buffers_.end()) return;
  inner = std::move(it->second);
  self->buffers_.erase(it);
}

kernels::DeviceBuffer DeferredCaptureBackend::Allocate(size_t bytes) {
  if (Refused("Allocate")) return {};
  return Wrap(inner_->Allocate(bytes));
}

KernelStatus DeferredCaptureBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  if (Refused("CopyToDevice")) return KernelStatus::kInvalidArgument;
  return inner_->CopyToDevice(dst, src, bytes);
}

KernelStatus DeferredCaptureBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  if (Refused("CopyToHost")) return KernelStatus::kInvalidArgument;
  return inner_->CopyToHost(dst, src, bytes);
}

const void* DeferredCaptureBackend::ImportWeights(const void* host, size_t bytes,
                                                  kernels::DeviceBuffer& storage) {
  if (Refused("ImportWeights")) return nullptr;
  kernels::DeviceBuffer inner_storage;
  const void* p = inner_->ImportWeights(host, bytes, inner_storage);
  storage = Wrap(std::move(inner_storage));  // empty where the inner backend copied nothing
  return p;
}

KernelStatus DeferredCaptureBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  return Run(absl::StrCat("CopyOnDevice ", bytes),
             [this, dst, src, bytes] { return inner_->CopyOnDevice(dst, src, bytes); });
}

KernelStatus DeferredCaptureBackend::Synchronize() {
  if (Refused("Synchronize")) return KernelStatus::kInvalidArgument;
  return inner_->Synchronize();
}

// --- ops: each closure copies its arguments ----------------------------------------------------

KernelStatus DeferredCaptureBackend::MatMul(const WeightView& w, const Mat& x, Mat& y) {
  return Run(absl::StrCat("MatMul ", Shape(w), " ", Shape(x)),
             [this, w, x, y]() mutable { return inner_->MatMul(w, x, y); });
}

KernelStatus DeferredCaptureBackend::MatMulGroup(const WeightView* w, int n, const Mat& x, Mat* y) {
  if (n < 0 || (n > 0 && (w == nullptr || y == nullptr))) return KernelStatus::kInvalidArgument;
  // The host arrays' contents, as a kernel's parameters hold them.
  std::vector<WeightView> ws(w, w + n);
  std::vector<Mat> ys(y, y + n);
  std::string sig = absl::StrCat("MatMulGroup ", Shape(x));
  for (const WeightView& v : ws) absl::StrAppend(&sig, " ", Shape(v));
  return Run(std::move(sig), [this, ws = std::move(ws), x, ys = std::move(ys)]() mutable {
    return inner_->MatMulGroup(ws.data(), static_cast<int>(ws.size()), x, ys.data());
  });
}

KernelStatus DeferredCaptureBackend::GetRows(const WeightView& table, const int32_t* ids, int64_t n,
                                             Mat& out) {
  return Run(absl::StrCat("GetRows ", n),
             [this, table, ids, n, out]() mutable { return inner_->GetRows(table, ids, n, out); });
}

KernelStatus DeferredCaptureBackend::RmsNorm(const Mat& x, Vec w, float eps, Mat& y) {
  return Run(absl::StrCat("RmsNorm ", Shape(x)),
             [this, x, w, eps, y]() mutable { return inner_->RmsNorm(x, w, eps, y); });
}

KernelStatus DeferredCaptureBackend::L2Norm(Mat& x, int64_t group, float eps) {
  return Run(absl::StrCat("L2Norm ", Shape(x)),
             [this, x, group, eps]() mutable { return inner_->L2Norm(x, group, eps); });
}

KernelStatus DeferredCaptureBackend::Copy(const Mat& src, Mat& dst) {
  return Run(absl::StrCat("Copy ", Shape(src)),
             [this, src, dst]() mutable { return inner_->Copy(src, dst); });
}

KernelStatus DeferredCaptureBackend::Add(Mat& x, const Mat& y) {
  return Run(absl::StrCat("Add ", Shape(x)), [this, x, y]() mutable { return inner_->Add(x, y); });
}

KernelStatus DeferredCaptureBackend::SwiGlu(const Mat& gate, const Mat& up, Mat& out) {
  return Run(absl::StrCat("SwiGlu ", Shape(gate)),
             [this, gate, up, out]() mutable { return inner_->SwiGlu(gate, up, out); });
}

KernelStatus DeferredCaptureBackend::MulSigmoid(Mat& x, const Mat& gate) {
  return Run(absl::StrCat("MulSigmoid ", Shape(x)),
             [this, x, gate]() mutable { return inner_->MulSigmoid(x, gate); });
}

KernelStatus DeferredCaptureBackend::RopeNeox(Mat& x, const int32_t* positions, int64_t n_heads,
                                              int64_t n_rot, float freq_base) {
  return Run(absl::StrCat("RopeNeox ", Shape(x)),
             [this, x, positions, n_heads, n_rot, freq_base]() mutable {
               return inner_->RopeNeox(x, positions, n_heads, n_rot, freq_base);
             });
}

KernelStatus DeferredCaptureBackend::StoreKv(const Mat& k, const Mat& v,
                                             const kernels::PagedKvView& kv, int64_t first_pos) {
  return Run(absl::StrCat("StoreKv ", Shape(k)),
             [this, k, v, kv, first_pos] { return inner_->StoreKv(k, v, kv, first_pos); });
}

KernelStatus DeferredCaptureBackend::PagedAttention(const Mat& q, const kernels::PagedKvView& kv,
                                                    int64_t n_past, int64_t n_head,
                                                    int64_t n_head_kv, float scale, Mat& out) {
  return Run(absl::StrCat("PagedAttention ", Shape(q)),
             [this, q, kv, n_past, n_head, n_head_kv, scale, out]() mutable {
               return inner_->PagedAttention(q, kv, n_past, n_head, n_head_kv, scale, out);
             });
}

KernelStatus DeferredCaptureBackend::CausalConv1dSilu(const Mat& x, const float* w, int64_t kernel,
                                                      float* state, Mat& y) {
  return Run(absl::StrCat("CausalConv1dSilu ", Shape(x)), [this, x, w, kernel, state, y]() mutable {
    return inner_->CausalConv1dSilu(x, w, kernel, state, y);
  });
}

KernelStatus DeferredCaptureBackend::GatedDeltaRule(const Mat& q, const Mat& k, const Mat& v,
                                                    const Mat& g, const Mat& beta,
                                                    int64_t n_k_heads, int64_t n_v_heads,
                                                    int64_t head_dim, float* state, Mat& out) {
  return Run(absl::StrCat("GatedDeltaRule ", Shape(q)),
             [this, q, k, v, g, beta, n_k_heads, n_v_heads, head_dim, state, out]() mutable {
               return inner_->GatedDeltaRule(q, k, v, g, beta, n_k_heads, n_v_heads, head_dim,
                                             state, out);
             });
}

KernelStatus DeferredCaptureBackend::GatedRmsNorm(const Mat& x, Vec w, const Mat& z, float eps,
                                                  Mat& y) {
  return Run(absl::StrCat("GatedRmsNorm ", Shape(x)),
             [this, x, w, z, eps, y]() mutable { return inner_->GatedRmsNorm(x, w, z, eps, y); });
}

KernelStatus DeferredCaptureBackend::DeltaNetGates(Mat& alpha_to_g, Mat& beta, Vec ssm_a,
                                                   Vec dt_bias) {
  return Run(absl::StrCat("DeltaNetGates ", Shape(beta)),
             [this, alpha_to_g, beta, ssm_a, dt_bias]() mutable {
               return inner_->DeltaNetGates(alpha_to_g, beta, ssm_a, dt_bias);
             });
}

KernelStatus DeferredCaptureBackend::DeltaNetDecodeStep(const kernels::DeltaNetStep& step) {
  const int64_t b = step.qkv.rows;
  std::vector<float*> conv, delta;  // the host arrays' contents, as the call saw them
  if (b > 0 && step.conv_states_host != nullptr) {
    conv.assign(step.conv_states_host, step.conv_states_host + b);
  }
  if (b > 0 && step.delta_states_host != nullptr) {
    delta.assign(step.delta_states_host, step.delta_states_host + b);
  }
  return Run(absl::StrCat("DeltaNetDecodeStep ", Shape(step.qkv)),
             [this, step, conv = std::move(conv), delta = std::move(delta)]() mutable {
               kernels::DeltaNetStep s = step;
               if (s.conv_states_host != nullptr) s.conv_states_host = conv.data();
               if (s.delta_states_host != nullptr) s.delta_states_host = delta.data();
               return inner_->DeltaNetDecodeStep(s);
             });
}

KernelStatus DeferredCaptureBackend::MoeRoute(const Mat& logits, int64_t k, int32_t* ids,
                                              float* weights) {
  return Run(absl::StrCat("MoeRoute ", Shape(logits)),
             [this, logits, k, ids, weights] { return inner_->MoeRoute(logits, k, ids, weights); });
}

KernelStatus DeferredCaptureBackend::MoeFfn(const Mat& x, const int32_t* ids, const float* weights,
                                            int64_t k, const WeightView& gate_exps,
                                            const WeightView& up_exps, const WeightView& down_exps,
                                            Mat& y) {
  return Run(absl::StrCat("MoeFfn ", Shape(x)),
             [this, x, ids, weights, k, gate_exps, up_exps, down_exps, y]() mutable {
               return inner_->MoeFfn(x, ids, weights, k, gate_exps, up_exps, down_exps, y);
             });
}

}  // namespace deltaserve::testing
