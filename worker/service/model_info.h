// A served model as GetWorkerInfo describes it (proto ModelInfo): architecture and context,
// tokenizer and chat template for the router, the memory plan, and the live load (running and
// waiting sequences, free pages and slots, the snapshot keys held) the router balances on.
#pragma once

#include <string>

#include "deltaserve/v1/worker.pb.h"
#include "worker/sched/served_model.h"

namespace deltaserve::worker {

// Fills `info` for one served model; the tokenizer only when `with_tokenizer`.
void DescribeModel(const std::string& name, ServedModel& model, bool with_tokenizer,
                   deltaserve::v1::ModelInfo& info);

}  // namespace deltaserve::worker
