#include "common/snapshot_format.h"

#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/str_util.h"

namespace deltaserve::common {
namespace {

// Tokens are copied as host int32: x86-64 and aarch64 are little-endian, as the format is.
static_assert(std::endian::native == std::endian::little);

constexpr char kMagic[8] = {'D', 'S', 'S', 'N', 'A', 'P', '\0', '\0'};

// Header field offsets (the table in snapshot_format.h).
constexpr size_t kOffVersion = 8;
constexpr size_t kOffHeaderSize = 12;
constexpr size_t kOffFlags = 16;
constexpr size_t kOffReserved0 = 20;
constexpr size_t kOffFingerprint = 24;
constexpr size_t kOffKType = 56;
constexpr size_t kOffVType = 72;
constexpr size_t kOffStateType = 88;
constexpr size_t kOffPageTokens = 104;
constexpr size_t kOffKey = 112;
constexpr size_t kOffNTokens = 128;
constexpr size_t kOffNDeltanet = 136;
constexpr size_t kOffNAttention = 140;
constexpr size_t kOffNPages = 144;
constexpr size_t kOffReserved1 = 148;
constexpr size_t kOffStateBytes = 152;
constexpr size_t kOffKPageBytes = 160;
constexpr size_t kOffVPageBytes = 168;
constexpr size_t kOffSections = 176;
constexpr size_t kSectionDescBytes = 24;
constexpr size_t kOffReserved2 = 248;
constexpr size_t kOffHeaderCrc = 252;
static_assert(kOffSections + 3 * kSectionDescBytes == kOffReserved2);
static_assert(kOffHeaderCrc + 4 == kSnapshotHeaderBytes);

constexpr uint32_t kEncodingRaw = 0;
constexpr uint32_t kEncodingZstd = 1;

// A zstd block regenerates at most 128 KiB (ZSTD_BLOCKSIZE_MAX) and takes at least 4 bytes (an
// RLE block: 3-byte header, 1 byte), so no frame expands more than this; 100 MiB of zeros at
// level 19 comes to 32,372x. A blob claiming more is refused before anything is allocated.
constexpr uint64_t kZstdMaxRatio = (uint64_t{128} << 10) / 4;

enum Section { kTokens = 0, kState = 1, kKv = 2, kSectionCount = 3 };
constexpr const char* kSectionNames[kSectionCount] = {"tokens", "state", "kv"};

struct SectionDesc {
  uint64_t raw = 0;
  uint64_t stored = 0;
  uint32_t encoding = kEncodingRaw;
  uint32_t crc = 0;
};

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

absl::Span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

absl::Status CheckTypeName(std::string_view what, std::string_view name) {
  if (name.size() > kSnapshotTypeNameBytes || name.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot ", Sv(what), " type \"", Sv(name),
                                                   "\" is longer than ", kSnapshotTypeNameBytes,
                                                   " bytes or holds a NUL"));
  }
  return absl::OkStatus();
}

// Sets `*reason` and returns the status.
absl::Status Reject(SnapshotRejectReason* reason, SnapshotRejectReason r, absl::Status s) {
  if (reason != nullptr) *reason = r;
  return s;
}
absl::Status RejectFormat(SnapshotRejectReason* reason, std::string_view msg) {
  return Reject(reason, SnapshotRejectReason::kFormat,
                absl::DataLossError(absl::StrCat("snapshot blob: ", Sv(msg))));
}

// Appends one section to `out` and returns its descriptor. With zstd the parts are compressed
// as one frame that declares its size; the section stays raw when that is not smaller.
absl::StatusOr<SectionDesc> AppendSection(std::string& out,
                                          absl::Span<const absl::Span<const uint8_t>> parts,
                                          uint64_t raw, SnapshotCompression compression,
                                          int zstd_level, ZSTD_CCtx* cctx) {
  SectionDesc d;
  d.raw = raw;
  const size_t start = out.size();
  if (compression == SnapshotCompression::kZstd && raw > 0) {
    const size_t bound = ZSTD_compressBound(raw);
    out.resize(start + bound);
    ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
    size_t rc = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, zstd_level);
    if (!ZSTD_isError(rc)) rc = ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
    if (!ZSTD_isError(rc)) rc = ZSTD_CCtx_setPledgedSrcSize(cctx, raw);
    ZSTD_outBuffer dst{out.data() + start, bound, 0};
    for (size_t i = 0; i < parts.size() && !ZSTD_isError(rc); ++i) {
      ZSTD_inBuffer src{parts[i].data(), parts[i].size(), 0};
      while (src.pos < src.size && !ZSTD_isError(rc)) {
        rc = ZSTD_compressStream2(cctx, &dst, &src, ZSTD_e_continue);
      }
    }
    if (!ZSTD_isError(rc)) {
      ZSTD_inBuffer none{nullptr, 0, 0};
      do {
        rc = ZSTD_compressStream2(cctx, &dst, &none, ZSTD_e_end);
      } while (!ZSTD_isError(rc) && rc != 0 && dst.pos < dst.size);
    }
    if (ZSTD_isError(rc) || rc != 0) {
      return absl::InternalError(absl::StrCat(
          "zstd compression of a snapshot section failed: ",
          ZSTD_isError(rc) ? ZSTD_getErrorName(rc) : "output larger than ZSTD_compressBound"));
    }
    if (dst.pos < raw) {
      out.resize(start + dst.pos);
      d.stored = dst.pos;
      d.encoding = kEncodingZstd;
      d.crc = Crc32c(AsBytes(std::string_view(out).substr(start)));
      return d;
    }
    out.resize(start);
  }
  uint32_t crc = 0;
  for (absl::Span<const uint8_t> p : parts) {
    out.append(reinterpret_cast<const char*>(p.data()), p.size());
    crc = Crc32cExtend(crc, p);
  }
  d.stored = raw;
  d.crc = crc;
  return d;
}

uint64_t SumSizes(absl::Span<const absl::Span<const uint8_t>> parts) {
  uint64_t n = 0;
  for (absl::Span<const uint8_t> p : parts) n += p.size();
  return n;
}

// Reads a NUL-padded type name; false when bytes follow the first NUL.
bool ReadTypeName(const char* p, std::string* out) {
  const char* end = std::find(p, p + kSnapshotTypeNameBytes, '\0');
  if (std::any_of(end, p + kSnapshotTypeNameBytes, [](char c) { return c != '\0'; })) {
    return false;
  }
  out->assign(p, end);
  return true;
}

struct ParsedHeader {
  SnapshotHeader header;
  SectionDesc sections[kSectionCount];
};

absl::StatusOr<ParsedHeader> ParseHeader(std::string_view blob, SnapshotRejectReason* reason) {
  if (blob.size() < sizeof(kMagic) || std::memcmp(blob.data(), kMagic, sizeof(kMagic)) != 0) {
    return RejectFormat(reason, "no DSSNAP magic");
  }
  if (blob.size() < kOffHeaderSize) return RejectFormat(reason, "truncated before the version");
  const char* h = blob.data();
  const uint32_t version = GetU32(h + kOffVersion);
  if (version != kSnapshotFormatVersion) {
    return Reject(
        reason, SnapshotRejectReason::kVersion,
        absl::FailedPreconditionError(absl::StrCat("snapshot blob: format version ", version,
                                                   ", this build reads ", kSnapshotFormatVersion)));
  }
  if (blob.size() < kSnapshotHeaderBytes) {
    return RejectFormat(reason, absl::StrCat("truncated header: ", blob.size(), " of ",
                                             kSnapshotHeaderBytes, " bytes"));
  }
  const uint32_t header_crc = Crc32c(AsBytes(blob.substr(0, kOffHeaderCrc)));
  if (header_crc != GetU32(h + kOffHeaderCrc)) {
    return Reject(reason, SnapshotRejectReason::kChecksum,
                  absl::DataLossError("snapshot blob: header CRC-32C mismatch"));
  }
  if (GetU32(h + kOffHeaderSize) != kSnapshotHeaderBytes) {
    return RejectFormat(reason, absl::StrCat("header size ", GetU32(h + kOffHeaderSize),
                                             ", version 1 has ", kSnapshotHeaderBytes));
  }
  if (GetU32(h + kOffFlags) != 0 || GetU32(h + kOffReserved0) != 0 ||
      GetU32(h + kOffReserved1) != 0 || GetU32(h + kOffReserved2) != 0) {
    return RejectFormat(reason, "flags or reserved header fields are not zero");
  }
  ParsedHeader p;
  SnapshotHeader& s = p.header;
  std::memcpy(s.domain.model_fingerprint.data(), h + kOffFingerprint,
              s.domain.model_fingerprint.size());
  if (!ReadTypeName(h + kOffKType, &s.domain.k_type) ||
      !ReadTypeName(h + kOffVType, &s.domain.v_type) ||
      !ReadTypeName(h + kOffStateType, &s.domain.state_type)) {
    return RejectFormat(reason, "a cache type name has bytes after its NUL padding");
  }
  const uint64_t page_tokens = GetU64(h + kOffPageTokens);
  const uint64_t n_tokens = GetU64(h + kOffNTokens);
  // Bounds that keep every product below 2^63; far beyond any real context.
  if (page_tokens < 1 || page_tokens > (uint64_t{1} << 40)) {
    return RejectFormat(reason, absl::StrCat("page tokens ", page_tokens));
  }
  if (n_tokens < 1 || n_tokens > (uint64_t{1} << 40)) {
    return RejectFormat(reason, absl::StrCat("token count ", n_tokens));
  }
  s.domain.page_tokens = static_cast<int64_t>(page_tokens);
  s.n_tokens = static_cast<int64_t>(n_tokens);
  std::memcpy(s.key.bytes.data(), h + kOffKey, s.key.bytes.size());
  s.layout.n_deltanet_layers = GetU32(h + kOffNDeltanet);
  s.layout.n_attention_layers = GetU32(h + kOffNAttention);
  s.layout.state_bytes = GetU64(h + kOffStateBytes);
  s.layout.k_page_bytes = GetU64(h + kOffKPageBytes);
  s.layout.v_page_bytes = GetU64(h + kOffVPageBytes);
  s.n_pages = GetU32(h + kOffNPages);
  if (s.n_pages != SnapshotPages(s.layout, s.domain.page_tokens, s.n_tokens)) {
    return RejectFormat(reason, absl::StrCat("page count ", s.n_pages, " for ", n_tokens,
                                             " tokens of ", page_tokens, " per page"));
  }
  const std::optional<uint64_t> kv_bytes = SnapshotKvBytes(s.layout, s.n_pages);
  if (!kv_bytes.has_value()) return RejectFormat(reason, "kv section size overflows");
  const uint64_t want_raw[kSectionCount] = {n_tokens * sizeof(int32_t), s.layout.state_bytes,
                                            *kv_bytes};
  uint64_t stored_total = kSnapshotHeaderBytes;
  uint64_t raw_total = 0;
  for (int i = 0; i < kSectionCount; ++i) {
    const char* d = h + kOffSections + i * kSectionDescBytes;
    SectionDesc& sec = p.sections[i];
    sec.raw = GetU64(d);
    sec.stored = GetU64(d + 8);
    sec.encoding = GetU32(d + 16);
    sec.crc = GetU32(d + 20);
    const char* name = kSectionNames[i];
    if (sec.raw != want_raw[i]) {
      return RejectFormat(reason, absl::StrCat(name, " section holds ", sec.raw,
                                               " bytes, the header's layout needs ", want_raw[i]));
    }
    if (sec.encoding == kEncodingRaw) {
      if (sec.stored != sec.raw) {
        return RejectFormat(reason, absl::StrCat(name, " section is raw but stores ", sec.stored,
                                                 " of ", sec.raw, " bytes"));
      }
    } else if (sec.encoding == kEncodingZstd) {
      if (sec.stored == 0 || sec.raw / kZstdMaxRatio > sec.stored) {
        return RejectFormat(reason, absl::StrCat(name, " section claims ", sec.raw, " bytes from ",
                                                 sec.stored, " zstd bytes, beyond zstd's ratio"));
      }
    } else {
      return RejectFormat(reason, absl::StrCat(name, " section encoding ", sec.encoding));
    }
    if (sec.stored > blob.size() - std::min<uint64_t>(stored_total, blob.size())) {
      return RejectFormat(reason, absl::StrCat("truncated: ", name, " section needs ", sec.stored,
                                               " bytes at offset ", stored_total, " of a ",
                                               blob.size(), "-byte blob"));
    }
    stored_total += sec.stored;
    // Saturates rather than wraps: the cap check refuses the sum either way.
    raw_total = sec.raw > UINT64_MAX - raw_total ? UINT64_MAX : raw_total + sec.raw;
  }
  if (stored_total != blob.size()) {
    return RejectFormat(reason,
                        absl::StrCat(blob.size() - stored_total, " bytes after the last section"));
  }
  s.stored_bytes = stored_total;
  s.raw_bytes = raw_total;
  if (reason != nullptr) *reason = SnapshotRejectReason::kNone;
  return p;
}

// Decodes one verified section into `dst` (exactly d.raw bytes).
absl::Status DecodeSection(std::string_view stored, const SectionDesc& d, const char* name,
                           uint8_t* dst, ZSTD_DCtx* dctx, SnapshotRejectReason* reason) {
  if (d.encoding == kEncodingRaw) {
    if (d.raw > 0) std::memcpy(dst, stored.data(), d.raw);
    return absl::OkStatus();
  }
  const size_t n = ZSTD_decompressDCtx(dctx, dst, d.raw, stored.data(), stored.size());
  if (ZSTD_isError(n) || n != d.raw) {
    return RejectFormat(
        reason, absl::StrCat(name, " section: zstd gave ",
                             ZSTD_isError(n) ? ZSTD_getErrorName(n) : absl::StrCat(n, " bytes"),
                             ", the header says ", d.raw, " bytes"));
  }
  return absl::OkStatus();
}

struct ZstdDCtxDeleter {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};
struct ZstdCCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};

}  // namespace

uint64_t SnapshotPages(const SnapshotLayout& layout, int64_t page_tokens, int64_t n_tokens) {
  if (layout.n_attention_layers == 0 || page_tokens <= 0 || n_tokens <= 0) return 0;
  return static_cast<uint64_t>((n_tokens - 1) / page_tokens + 1);
}

std::optional<uint64_t> SnapshotKvBytes(const SnapshotLayout& layout, uint64_t n_pages) {
  uint64_t page = 0;
  uint64_t out = 0;
  if (__builtin_add_overflow(layout.k_page_bytes, layout.v_page_bytes, &page) ||
      __builtin_mul_overflow(page, n_pages, &out) ||
      __builtin_mul_overflow(out, uint64_t{layout.n_attention_layers}, &out)) {
    return std::nullopt;
  }
  return out;
}

std::string_view SnapshotRejectReasonName(SnapshotRejectReason reason) {
  switch (reason) {
    case SnapshotRejectReason::kNone:
      return "none";
    case SnapshotRejectReason::kFormat:
      return "format";
    case SnapshotRejectReason::kVersion:
      return "version";
    case SnapshotRejectReason::kChecksum:
      return "checksum";
    case SnapshotRejectReason::kModel:
      return "model";
    case SnapshotRejectReason::kCacheTypes:
      return "cache_types";
    case SnapshotRejectReason::kKey:
      return "key";
    case SnapshotRejectReason::kLayout:
      return "layout";
    case SnapshotRejectReason::kTooLarge:
      return "too_large";
  }
  return "unknown";
}

absl::StatusOr<std::string> EncodeSnapshot(const SnapshotContents& c,
                                           SnapshotCompression compression, int zstd_level) {
  const SnapshotDomain& dom = c.domain;
  for (auto [what, name] : {std::pair<const char*, const std::string*>{"K", &dom.k_type},
                            {"V", &dom.v_type},
                            {"state", &dom.state_type}}) {
    if (absl::Status s = CheckTypeName(what, *name); !s.ok()) return s;
  }
  const int64_t n = static_cast<int64_t>(c.tokens.size());
  if (n < 1 || n > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat("a snapshot holds 1 to 2^40 tokens, got ", n));
  }
  if (dom.page_tokens < 1 || dom.page_tokens > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot page tokens must be in [1, 2^40], got ", dom.page_tokens));
  }
  absl::StatusOr<std::vector<SnapshotKey>> key =
      SnapshotKeysAt(SnapshotRootKey(dom), c.tokens, {n});
  if (!key.ok()) return key.status();
  if ((*key)[0] != c.key) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot key ", c.key.Hex(),
                                                   " is not the key of its ", n, " tokens (",
                                                   (*key)[0].Hex(), ")"));
  }
  const uint64_t n_pages = SnapshotPages(c.layout, dom.page_tokens, n);
  if (n_pages > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot of ", n_pages, " pages"));
  }
  const std::optional<uint64_t> kv_bytes = SnapshotKvBytes(c.layout, n_pages);
  if (!kv_bytes.has_value()) return absl::InvalidArgumentError("snapshot kv size overflows");
  if (SumSizes(c.state_parts) != c.layout.state_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot state parts hold ", SumSizes(c.state_parts),
                     " bytes, the layout says ", c.layout.state_bytes));
  }
  if (SumSizes(c.kv_parts) != *kv_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot kv parts hold ", SumSizes(c.kv_parts), " bytes; ",
                     c.layout.n_attention_layers, " layers x ", n_pages, " pages x (",
                     c.layout.k_page_bytes, " + ", c.layout.v_page_bytes, ") = ", *kv_bytes));
  }

  std::unique_ptr<ZSTD_CCtx, ZstdCCtxDeleter> cctx;
  if (compression == SnapshotCompression::kZstd) {
    cctx.reset(ZSTD_createCCtx());
    if (cctx == nullptr) return absl::ResourceExhaustedError("ZSTD_createCCtx failed");
  }
  std::string out;
  const uint64_t token_bytes = static_cast<uint64_t>(n) * sizeof(int32_t);
  if (compression == SnapshotCompression::kNone) {
    out.reserve(kSnapshotHeaderBytes + token_bytes + c.layout.state_bytes + *kv_bytes);
  }
  out.resize(kSnapshotHeaderBytes);
  const absl::Span<const uint8_t> token_part(reinterpret_cast<const uint8_t*>(c.tokens.data()),
                                             token_bytes);
  SectionDesc sections[kSectionCount];
  const struct {
    absl::Span<const absl::Span<const uint8_t>> parts;
    uint64_t raw;
  } inputs[kSectionCount] = {{absl::MakeConstSpan(&token_part, 1), token_bytes},
                             {c.state_parts, c.layout.state_bytes},
                             {c.kv_parts, *kv_bytes}};
  for (int i = 0; i < kSectionCount; ++i) {
    absl::StatusOr<SectionDesc> d =
        AppendSection(out, inputs[i].parts, inputs[i].raw, compression, zstd_level, cctx.get());
    if (!d.ok()) return d.status();
    sections[i] = *d;
  }

  char* h = out.data();
  std::memcpy(h, kMagic, sizeof(kMagic));
  PutU32(h + kOffVersion, kSnapshotFormatVersion);
  PutU32(h + kOffHeaderSize, kSnapshotHeaderBytes);
  std::memcpy(h + kOffFingerprint, dom.model_fingerprint.data(), dom.model_fingerprint.size());
  std::memcpy(h + kOffKType, dom.k_type.data(), dom.k_type.size());
  std::memcpy(h + kOffVType, dom.v_type.data(), dom.v_type.size());
  std::memcpy(h + kOffStateType, dom.state_type.data(), dom.state_type.size());
  PutU64(h + kOffPageTokens, static_cast<uint64_t>(dom.page_tokens));
  std::memcpy(h + kOffKey, c.key.bytes.data(), c.key.bytes.size());
  PutU64(h + kOffNTokens, static_cast<uint64_t>(n));
  PutU32(h + kOffNDeltanet, c.layout.n_deltanet_layers);
  PutU32(h + kOffNAttention, c.layout.n_attention_layers);
  PutU32(h + kOffNPages, static_cast<uint32_t>(n_pages));
  PutU64(h + kOffStateBytes, c.layout.state_bytes);
  PutU64(h + kOffKPageBytes, c.layout.k_page_bytes);
  PutU64(h + kOffVPageBytes, c.layout.v_page_bytes);
  for (int i = 0; i < kSectionCount; ++i) {
    char* d = h + kOffSections + i * kSectionDescBytes;
    PutU64(d, sections[i].raw);
    PutU64(d + 8, sections[i].stored);
    PutU32(d + 16, sections[i].encoding);
    PutU32(d + 20, sections[i].crc);
  }
  PutU32(h + kOffHeaderCrc, Crc32c(AsBytes(std::string_view(out).substr(0, kOffHeaderCrc))));
  return out;
}

absl::StatusOr<SnapshotHeader> ParseSnapshotHeader(std::string_view blob,
                                                   SnapshotRejectReason* reason) {
  absl::StatusOr<ParsedHeader> p = ParseHeader(blob, reason);
  if (!p.ok()) return p.status();
  return p->header;
}

absl::StatusOr<DecodedSnapshot> DecodeSnapshot(std::string_view blob,
                                               const SnapshotExpectation& expect,
                                               SnapshotRejectReason* reason) {
  absl::StatusOr<ParsedHeader> parsed = ParseHeader(blob, reason);
  if (!parsed.ok()) return parsed.status();
  const SnapshotHeader& h = parsed->header;
  const SectionDesc* sections = parsed->sections;

  if (h.domain.model_fingerprint != expect.domain.model_fingerprint) {
    return Reject(reason, SnapshotRejectReason::kModel,
                  absl::FailedPreconditionError("snapshot blob: another model's fingerprint"));
  }
  if (h.domain != expect.domain) {
    return Reject(
        reason, SnapshotRejectReason::kCacheTypes,
        absl::FailedPreconditionError(absl::StrCat(
            "snapshot blob: cache K/V/state types ", h.domain.k_type, "/", h.domain.v_type, "/",
            h.domain.state_type, " with ", h.domain.page_tokens, " tokens a page; this worker has ",
            expect.domain.k_type, "/", expect.domain.v_type, "/", expect.domain.state_type,
            " with ", expect.domain.page_tokens)));
  }
  if (h.layout != expect.layout) {
    const SnapshotLayout& a = h.layout;
    const SnapshotLayout& b = expect.layout;
    return Reject(
        reason, SnapshotRejectReason::kLayout,
        absl::FailedPreconditionError(absl::StrCat(
            "snapshot blob: layout (deltanet layers, attention layers, state bytes, K page "
            "bytes, V page bytes) = (",
            a.n_deltanet_layers, ", ", a.n_attention_layers, ", ", a.state_bytes, ", ",
            a.k_page_bytes, ", ", a.v_page_bytes, "); this worker has (", b.n_deltanet_layers, ", ",
            b.n_attention_layers, ", ", b.state_bytes, ", ", b.k_page_bytes, ", ", b.v_page_bytes,
            ")")));
  }
  if (expect.key.has_value() && *expect.key != h.key) {
    return Reject(reason, SnapshotRejectReason::kKey,
                  absl::FailedPreconditionError(absl::StrCat("snapshot blob: key ", h.key.Hex(),
                                                             ", asked for ", expect.key->Hex())));
  }
  if (h.raw_bytes > expect.max_decoded_bytes) {
    return Reject(reason, SnapshotRejectReason::kTooLarge,
                  absl::ResourceExhaustedError(absl::StrCat("snapshot blob: decodes to ",
                                                            h.raw_bytes, " bytes, the cap is ",
                                                            expect.max_decoded_bytes)));
  }

  std::string_view stored[kSectionCount];
  size_t offset = kSnapshotHeaderBytes;
  for (int i = 0; i < kSectionCount; ++i) {
    stored[i] = blob.substr(offset, sections[i].stored);
    offset += sections[i].stored;
    if (Crc32c(AsBytes(stored[i])) != sections[i].crc) {
      return Reject(reason, SnapshotRejectReason::kChecksum,
                    absl::DataLossError(absl::StrCat("snapshot blob: ", kSectionNames[i],
                                                     " section CRC-32C mismatch")));
    }
    if (sections[i].encoding == kEncodingZstd) {
      // The frame must declare the size the header promises before a byte is allocated for it.
      const unsigned long long declared =
          ZSTD_getFrameContentSize(stored[i].data(), stored[i].size());
      if (declared != sections[i].raw) {
        return RejectFormat(
            reason, absl::StrCat(kSectionNames[i], " section: the zstd frame does not declare ",
                                 sections[i].raw, " bytes"));
      }
    }
  }

  std::unique_ptr<ZSTD_DCtx, ZstdDCtxDeleter> dctx;
  if (std::any_of(sections, sections + kSectionCount,
                  [](const SectionDesc& d) { return d.encoding == kEncodingZstd; })) {
    dctx.reset(ZSTD_createDCtx());
    if (dctx == nullptr) return absl::ResourceExhaustedError("ZSTD_createDCtx failed");
  }

  // Tokens first: the key check is cheap and refuses a foreign prefix before the big buffer.
  DecodedSnapshot out;
  out.header = h;
  out.tokens.resize(static_cast<size_t>(h.n_tokens));
  if (absl::Status s =
          DecodeSection(stored[kTokens], sections[kTokens], "tokens",
                        reinterpret_cast<uint8_t*>(out.tokens.data()), dctx.get(), reason);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::vector<SnapshotKey>> key =
      SnapshotKeysAt(SnapshotRootKey(h.domain), out.tokens, {h.n_tokens});
  if (!key.ok() || (*key)[0] != h.key) {
    return Reject(reason, SnapshotRejectReason::kKey,
                  absl::DataLossError(absl::StrCat("snapshot blob: key ", h.key.Hex(),
                                                   " is not the key of the ", h.n_tokens,
                                                   " tokens it holds")));
  }

  const uint64_t state_bytes = sections[kState].raw;
  const uint64_t kv_bytes = sections[kKv].raw;
  // Not value-initialized: every byte is written below, and zeroing ~100 MiB costs milliseconds.
  out.buffer = std::make_unique_for_overwrite<uint8_t[]>(state_bytes + kv_bytes);
  uint8_t* base = out.buffer.get();
  if (absl::Status s =
          DecodeSection(stored[kState], sections[kState], "state", base, dctx.get(), reason);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          DecodeSection(stored[kKv], sections[kKv], "kv", base + state_bytes, dctx.get(), reason);
      !s.ok()) {
    return s;
  }
  out.state = absl::MakeConstSpan(base, state_bytes);
  out.kv = absl::MakeConstSpan(base + state_bytes, kv_bytes);
  if (reason != nullptr) *reason = SnapshotRejectReason::kNone;
  return out;
}

}  // namespace deltaserve::common
