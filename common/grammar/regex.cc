#include "common/grammar/regex.h"

namespace deltaserve::common::grammar {}  // namespace deltaserve::common::grammar
