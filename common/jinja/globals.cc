// The globals transformers' environment and jinja2 give a template: raise_exception (a
// TemplateError whose message the caller sees verbatim), strftime_now, namespace, range, dict.
#include <algorithm>
#include <cmath>
#include <ctime>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/jinja/builtins.h"
#include "common/jinja/interpreter.h"

namespace deltaserve::common::jinja {

std::vector<std::pair<std::string, Value>> Globals() {
  std::vector<std::pair<std::string, Value>> globals;
  globals.emplace_back(
      "raise_exception",
      Value::Function("raise_exception", [](Interpreter&, CallArgs& args) -> absl::StatusOr<Value> {
        const std::string message =
            args.positional.empty() ? std::string() : args.positional[0].Str();
        absl::Status status = absl::InvalidArgumentError(message);
        status.SetPayload(kRaiseExceptionPayload, absl::Cord(message));
        return status;
      }));
  globals.emplace_back(
      "strftime_now",
      Value::Function("strftime_now", [](Interpreter&, CallArgs& args) -> absl::StatusOr<Value> {
        const std::string format = args.positional.empty() ? "" : args.positional[0].Str();
        const std::time_t now = std::time(nullptr);
        std::tm local{};
        localtime_r(&now, &local);
        char buf[512];
        const size_t n =
            format.empty() ? 0 : std::strftime(buf, sizeof(buf), format.c_str(), &local);
        return Value(std::string(buf, n));
      }));
  globals.emplace_back(
      "namespace",
      Value::Function(
          "namespace", [](Interpreter& interp, CallArgs& args) -> absl::StatusOr<Value> {
            NamespaceData* ns = interp.NewNamespace();
            auto set = [ns](const std::string& key, const Value& v) {
              for (auto& [k, old] : ns->attrs) {
                if (k == key) {
                  old = v;
                  return;
                }
              }
              ns->attrs.emplace_back(key, v);
            };
            for (const Value& p : args.positional) {
              if (!p.is_dict())
                return absl::InvalidArgumentError("TypeError: namespace() takes a dict");
              for (const auto& [k, v] : p.as_dict().items) set(k.Str(), v);
            }
            for (const auto& [k, v] : args.keyword) set(k, v);
            return Value::Namespace(ns);
          }));
  globals.emplace_back(
      "dict", Value::Function("dict", [](Interpreter&, CallArgs& args) -> absl::StatusOr<Value> {
        std::vector<std::pair<Value, Value>> items;
        for (const auto& [k, v] : args.keyword) items.emplace_back(Value(k), v);
        return Value::Dict(std::move(items));
      }));
  globals.emplace_back(
      "range",
      Value::Function("range", [](Interpreter& interp, CallArgs& args) -> absl::StatusOr<Value> {
        int64_t bounds[3] = {0, 0, 1};
        const size_t n = args.positional.size();
        if (n < 1 || n > 3)
          return absl::InvalidArgumentError("TypeError: range expects 1 to 3 arguments");
        for (size_t i = 0; i < n; ++i) {
          const Value& v = args.positional[i];
          if (!v.is_int() && !v.is_bool()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "TypeError: '", v.TypeName(), "' object cannot be interpreted as an integer"));
          }
        }
        if (n == 1) {
          bounds[1] = args.positional[0].as_int();
        } else {
          bounds[0] = args.positional[0].as_int();
          bounds[1] = args.positional[1].as_int();
          if (n == 3) bounds[2] = args.positional[2].as_int();
        }
        if (bounds[2] == 0)
          return absl::InvalidArgumentError("ValueError: range() arg 3 must not be zero");
        const double count = std::max(
            0.0, std::ceil((static_cast<double>(bounds[1]) - static_cast<double>(bounds[0])) /
                           static_cast<double>(bounds[2])));
        if (count > static_cast<double>(kMaxLoopIterations)) {
          return absl::ResourceExhaustedError(
              absl::StrCat("range() longer than ", kMaxLoopIterations, " items"));
        }
        DS_JINJA_RETURN_IF_ERROR(interp.Charge(static_cast<int64_t>(count)));
        std::vector<Value> items;
        for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
          items.emplace_back(bounds[0] + i * bounds[2]);
        }
        return Value::List(std::move(items));
      }));
  return globals;
}

}  // namespace deltaserve::common::jinja
