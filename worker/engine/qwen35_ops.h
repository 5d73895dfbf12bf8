// Kernel calls of the Qwen3.5 forward pass (qwen35.cc, qwen35_ffn.cc): a failed op as a Status
// naming it. Internal to worker/engine.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"
#include "kernels/backend.h"

namespace deltaserve::worker::engine_internal {

// Turns a kernel failure into a Status naming the op.
inline absl::Status CheckKernel(kernels::KernelStatus s, const char* op) {
  if (s == kernels::KernelStatus::kOk) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("kernel ", op, " failed: ", common::Sv(kernels::KernelStatusName(s))));
}

}  // namespace deltaserve::worker::engine_internal

// backend_->op(args...), returning its failure from the calling function.
#define DS_RUN(op, ...)                                                                         \
  do {                                                                                          \
    if (absl::Status s_ =                                                                       \
            ::deltaserve::worker::engine_internal::CheckKernel(backend_->op(__VA_ARGS__), #op); \
        !s_.ok())                                                                               \
      return s_;                                                                                \
  } while (0)
