#include "worker/sampling/token_mask.h"

namespace deltaserve::worker {}  // namespace deltaserve::worker
