// Splits a Jinja template into tokens the way jinja2's lexer does under transformers' settings
// (trim_blocks, lstrip_blocks, keep_trailing_newline=False): text between tags becomes kData
// with the whitespace control of `{%-`/`-%}`/`{{-`/`-}}`/`{#-`/`-#}` (and `+`) already applied,
// comments disappear, `{% raw %}…{% endraw %}` becomes data, and inside tags come names,
// literals and operators.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace deltaserve::common::jinja {

struct Token {
  enum class Type : uint8_t {
    kData,        // literal text (value)
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // identifier (value)
    kString,      // string literal, escapes decoded (value)
    kInt,         // int_value
    kFloat,       // float_value
    kOperator,    // + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { } ; (value)
    kEnd,         // end of the template
  };
  Type type;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;    // 1-based
  int column = 1;  // 1-based, in bytes
};

// Tokenizes `source`. Errors (an unterminated tag, comment or string, a character no token
// starts with) are InvalidArgument naming the line and column.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

// "chat template line L, column C: " — the prefix of every parse error.
std::string LocationPrefix(int line, int column);

}  // namespace deltaserve::common::jinja
