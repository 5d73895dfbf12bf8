#include "common/grammar/json_schema_compiler.h"

namespace deltaserve::common::grammar {}  // namespace deltaserve::common::grammar
