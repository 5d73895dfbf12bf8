// What a Generate call asks, from its proto (proto/deltaserve/v1/worker.proto) into the
// scheduler's and the grammar compiler's terms: sampling settings and the output constraint.
#pragma once

#include "absl/status/statusor.h"
#include "common/grammar/output_constraint.h"
#include "deltaserve/v1/worker.pb.h"
#include "worker/sampling/sampler.h"

namespace deltaserve::worker {

// The sampling settings of a request, the model's defaults where a field is unset; validation is
// the sampler's (Sampler::Create), at Submit.
SamplingParams SamplingFromProto(const deltaserve::v1::SamplingParams& p);

// GenerateRequest.output_constraint as the grammar compiler's spec; InvalidArgument for a kind
// or tool-call format this worker does not know.
absl::StatusOr<common::grammar::OutputConstraintSpec> ConstraintFromProto(
    const deltaserve::v1::OutputConstraint& constraint);

}  // namespace deltaserve::worker
