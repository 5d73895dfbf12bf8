#include "common/grammar/grammar_matcher.h"

namespace deltaserve::common::grammar {}  // namespace deltaserve::common::grammar
