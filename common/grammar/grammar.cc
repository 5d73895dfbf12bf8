#include "common/grammar/grammar.h"

namespace deltaserve::common::grammar {}  // namespace deltaserve::common::grammar
