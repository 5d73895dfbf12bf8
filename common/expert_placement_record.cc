#include "common/expert_placement_record.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json_reader.h"
#include "common/str_util.h"
#include "nlohmann/json.hpp"

namespace deltaserve::common {
namespace {

using json = nlohmann::ordered_json;

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("expert placement record: ", Sv(what)));
}

absl::Status CheckFingerprint(std::string_view fp) {
  if (fp.empty() || fp.size() > kMaxModelFingerprintChars) {
    return Bad(absl::StrCat("model_fingerprint must be 1 to ", kMaxModelFingerprintChars,
                            " hex digits, got ", fp.size(), " characters"));
  }
  for (char c : fp) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return Bad("model_fingerprint must be lowercase hex digits");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckHeatValue(double h, size_t layer, size_t expert) {
  if (!std::isfinite(h)) return Bad(absl::StrCat("heat[", layer, "][", expert, "] is not finite"));
  if (h < 0) return Bad(absl::StrCat("heat[", layer, "][", expert, "] is negative (", h, ")"));
  return absl::OkStatus();
}

// JSON's name for what `v` is, for messages.
std::string_view KindOf(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a fraction";
    default:
      return "a number";
  }
}

absl::StatusOr<const json*> Field(const json& doc, std::string_view key) {
  auto it = doc.find(key);
  if (it == doc.end()) return Bad(absl::StrCat("\"", Sv(key), "\" is missing"));
  return &*it;
}

// An integer JSON value in [lo, hi], or an error naming `what`.
absl::StatusOr<int64_t> IntegerIn(const json& v, std::string_view what, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) {
    return Bad(absl::StrCat(Sv(what), " must be a whole number, got ", Sv(KindOf(v))));
  }
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Bad(absl::StrCat(Sv(what), " is out of range [", lo, ", ", hi, "]"));
  }
  const auto n = v.get<int64_t>();
  if (n < lo || n > hi) {
    return Bad(absl::StrCat(Sv(what), " is ", n, ", not in [", lo, ", ", hi, "]"));
  }
  return n;
}

absl::StatusOr<int64_t> IntegerField(const json& doc, std::string_view key, int64_t lo,
                                     int64_t hi) {
  absl::StatusOr<const json*> v = Field(doc, key);
  if (!v.ok()) return v.status();
  return IntegerIn(**v, key, lo, hi);
}

// A JSON array of exactly `n` elements, or an error naming `what`.
absl::Status ArrayOf(const json& v, std::string_view what, int64_t n) {
  if (!v.is_array()) return Bad(absl::StrCat(Sv(what), " must be an array, got ", Sv(KindOf(v))));
  if (n >= 0 && static_cast<int64_t>(v.size()) != n) {
    return Bad(absl::StrCat(Sv(what), " has ", v.size(), " entries, expected ", n));
  }
  return absl::OkStatus();
}

absl::Status ParseHeat(const json& v, ExpertPlacementRecord& r) {
  if (absl::Status s = ArrayOf(v, "heat", r.n_layer); !s.ok()) return s;
  r.heat.assign(static_cast<size_t>(r.n_layer), {});
  for (size_t l = 0; l < v.size(); ++l) {
    const json& row = v[l];
    if (absl::Status s = ArrayOf(row, absl::StrCat("heat[", l, "]"), r.n_expert); !s.ok()) {
      return s;
    }
    auto& out = r.heat[l];
    out.reserve(row.size());
    for (size_t e = 0; e < row.size(); ++e) {
      if (!row[e].is_number()) {
        return Bad(
            absl::StrCat("heat[", l, "][", e, "] must be a number, got ", Sv(KindOf(row[e]))));
      }
      const auto h = row[e].get<double>();
      if (absl::Status s = CheckHeatValue(h, l, e); !s.ok()) return s;
      out.push_back(h);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseDevice(const json& v, ExpertPlacementRecord& r) {
  if (absl::Status s = ArrayOf(v, "device", r.n_layer); !s.ok()) return s;
  r.device = ExpertPlacement::Empty(r.n_layer, r.n_expert);
  for (size_t l = 0; l < v.size(); ++l) {
    const json& row = v[l];
    const std::string what = absl::StrCat("device[", l, "]");
    if (absl::Status s = ArrayOf(row, what, -1); !s.ok()) return s;
    if (static_cast<int64_t>(row.size()) > r.n_expert) {
      return Bad(absl::StrCat(what, " lists ", row.size(), " experts, the model has ", r.n_expert));
    }
    auto& out = r.device.device[l];
    out.reserve(row.size());
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StatusOr<int64_t> e =
          IntegerIn(row[i], absl::StrCat(what, "[", i, "]"), 0, r.n_expert - 1);
      if (!e.ok()) return e.status();
      out.push_back(static_cast<int32_t>(*e));
    }
  }
  if (absl::Status s = ValidateExpertPlacement(r.device, r.n_layer * r.n_expert); !s.ok()) {
    return Bad(absl::StrCat("device: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateExpertPlacementRecord(const ExpertPlacementRecord& r) {
  if (absl::Status s = CheckFingerprint(r.model_fingerprint); !s.ok()) return s;
  if (r.n_layer < 1 || r.n_layer > kMaxPlacementRecordLayers) {
    return Bad(
        absl::StrCat("n_layer is ", r.n_layer, ", not in [1, ", kMaxPlacementRecordLayers, "]"));
  }
  if (r.n_expert < 1 || r.n_expert > kMaxPlacementRecordExperts) {
    return Bad(
        absl::StrCat("n_expert is ", r.n_expert, ", not in [1, ", kMaxPlacementRecordExperts, "]"));
  }
  if (r.n_layer * r.n_expert > kMaxPlacementRecordCells) {
    return Bad(absl::StrCat(r.n_layer, " layers x ", r.n_expert, " experts exceeds ",
                            kMaxPlacementRecordCells, " (layer, expert) pairs"));
  }
  if (!std::isfinite(r.half_life_seconds) || r.half_life_seconds <= 0) {
    return Bad(
        absl::StrCat("half_life_seconds must be a positive number, got ", r.half_life_seconds));
  }
  if (r.updated_unix_ms < 0) return Bad("updated_unix_ms is negative");
  if (static_cast<int64_t>(r.heat.size()) != r.n_layer) {
    return Bad(absl::StrCat("heat has ", r.heat.size(), " entries, expected ", r.n_layer));
  }
  for (size_t l = 0; l < r.heat.size(); ++l) {
    if (static_cast<int64_t>(r.heat[l].size()) != r.n_expert) {
      return Bad(
          absl::StrCat("heat[", l, "] has ", r.heat[l].size(), " entries, expected ", r.n_expert));
    }
    for (size_t e = 0; e < r.heat[l].size(); ++e) {
      if (absl::Status s = CheckHeatValue(r.heat[l][e], l, e); !s.ok()) return s;
    }
  }
  if (r.device.n_layer != r.n_layer || r.device.n_expert != r.n_expert) {
    return Bad(absl::StrCat("device is shaped ", r.device.n_layer, " x ", r.device.n_expert,
                            ", the record ", r.n_layer, " x ", r.n_expert));
  }
  if (absl::Status s = ValidateExpertPlacement(r.device, r.n_layer * r.n_expert); !s.ok()) {
    return Bad(absl::StrCat("device: ", s.message()));
  }
  return absl::OkStatus();
}

std::string SerializeExpertPlacementRecord(const ExpertPlacementRecord& r) {
  json heat = json::array();
  for (const auto& row : r.heat) heat.push_back(json(row));
  json device = json::array();
  for (const auto& row : r.device.device) device.push_back(json(row));
  json doc = json::object();
  doc["format"] = std::string(kExpertPlacementRecordFormat);
  doc["version"] = kExpertPlacementRecordVersion;
  doc["model_fingerprint"] = r.model_fingerprint;
  doc["n_layer"] = r.n_layer;
  doc["n_expert"] = r.n_expert;
  doc["half_life_seconds"] = r.half_life_seconds;
  doc["updated_unix_ms"] = r.updated_unix_ms;
  doc["heat"] = std::move(heat);
  doc["device"] = std::move(device);
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<ExpertPlacementRecord> ParseExpertPlacementRecord(std::string_view bytes) {
  if (bytes.size() > kMaxPlacementRecordBytes) {
    return Bad(absl::StrCat(bytes.size(), " bytes, more than the ", kMaxPlacementRecordBytes,
                            " a record may have"));
  }
  // Limits while reading, before any large DOM exists: three levels (object, heat, row), rows
  // no longer than the bounds, and containers for heat and device rows only.
  JsonReadLimits limits;
  limits.max_depth = 3;
  limits.max_object_keys = 64;
  limits.max_array_elements =
      static_cast<size_t>(std::max(kMaxPlacementRecordLayers, kMaxPlacementRecordExperts));
  limits.max_containers = static_cast<size_t>(2 * kMaxPlacementRecordLayers + 8);
  absl::StatusOr<json> parsed = ReadOrderedJson(bytes, limits);
  if (!parsed.ok())
    return Bad(
        std::string_view(parsed.status().message().data(), parsed.status().message().size()));
  const json& doc = *parsed;
  if (!doc.is_object()) return Bad(absl::StrCat("expected a JSON object, got ", Sv(KindOf(doc))));

  absl::StatusOr<const json*> format = Field(doc, "format");
  if (!format.ok()) return format.status();
  if (!(*format)->is_string() ||
      (*format)->get_ref<const std::string&>() != kExpertPlacementRecordFormat) {
    return Bad(absl::StrCat("\"format\" must be \"", Sv(kExpertPlacementRecordFormat), "\""));
  }
  absl::StatusOr<const json*> version = Field(doc, "version");
  if (!version.ok()) return version.status();
  if (!(*version)->is_number_integer() ||
      (*version)->get<int64_t>() != kExpertPlacementRecordVersion) {
    return Bad(absl::StrCat("version ", (*version)->dump(), " is not supported (this build reads ",
                            kExpertPlacementRecordVersion, ")"));
  }

  ExpertPlacementRecord r;
  absl::StatusOr<const json*> fp = Field(doc, "model_fingerprint");
  if (!fp.ok()) return fp.status();
  if (!(*fp)->is_string()) {
    return Bad(absl::StrCat("model_fingerprint must be a string, got ", Sv(KindOf(**fp))));
  }
  r.model_fingerprint = (*fp)->get<std::string>();
  if (absl::Status s = CheckFingerprint(r.model_fingerprint); !s.ok()) return s;

  absl::StatusOr<int64_t> n_layer = IntegerField(doc, "n_layer", 1, kMaxPlacementRecordLayers);
  if (!n_layer.ok()) return n_layer.status();
  absl::StatusOr<int64_t> n_expert = IntegerField(doc, "n_expert", 1, kMaxPlacementRecordExperts);
  if (!n_expert.ok()) return n_expert.status();
  r.n_layer = *n_layer;
  r.n_expert = *n_expert;
  if (r.n_layer * r.n_expert > kMaxPlacementRecordCells) {
    return Bad(absl::StrCat(r.n_layer, " layers x ", r.n_expert, " experts exceeds ",
                            kMaxPlacementRecordCells, " (layer, expert) pairs"));
  }

  absl::StatusOr<const json*> half_life = Field(doc, "half_life_seconds");
  if (!half_life.ok()) return half_life.status();
  if (!(*half_life)->is_number() || !((*half_life)->get<double>() > 0) ||
      !std::isfinite((*half_life)->get<double>())) {
    return Bad("half_life_seconds must be a positive number");
  }
  r.half_life_seconds = (*half_life)->get<double>();
  absl::StatusOr<int64_t> updated =
      IntegerField(doc, "updated_unix_ms", 0, std::numeric_limits<int64_t>::max());
  if (!updated.ok()) return updated.status();
  r.updated_unix_ms = *updated;

  absl::StatusOr<const json*> heat = Field(doc, "heat");
  if (!heat.ok()) return heat.status();
  if (absl::Status s = ParseHeat(**heat, r); !s.ok()) return s;
  absl::StatusOr<const json*> device = Field(doc, "device");
  if (!device.ok()) return device.status();
  if (absl::Status s = ParseDevice(**device, r); !s.ok()) return s;
  return r;
}

std::string ExpertPlacementRecordKey(std::string_view model_fingerprint) {
  return absl::StrCat("deltaserve:placement:v1:", Sv(model_fingerprint));
}

}  // namespace deltaserve::common
