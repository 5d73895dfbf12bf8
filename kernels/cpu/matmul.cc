#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quants.h"

namespace deltaserve::kernels {
namespace internal {
namespace {

// Blocking of the many-row product (T > 1, or any T without a fused kernel). A task decodes up
// to kChunkRows weight rows once into a thread-local f32 buffer, then walks the activations in
// blocks of kRowBlock rows and the reduction in slices of kSliceK values, so the weight slice
// of one tile (kTileRows x kSliceK floats, 16 KiB) stays in L1 while every activation row of
// the block passes over it, and the activation block (kRowBlock x kSliceK floats, 256 KiB)
// stays in L2.
constexpr int64_t kChunkRows = 16;
constexpr int64_t kRowBlock = 64;
constexpr int64_t kSliceK = 1024;
// Multiply-adds a parallel task should carry at least, so the pool's hand-off (~1 us) stays
// small against the work.
constexpr int64_t kMinMacsPerTask = 1 << 17;
// Guided chunks of the fused int8 products (MultiplyFusedInt8): at least TaskGrain / this many
// rows (the cost of taking a chunk stays small) and at most TaskGrain * this many (so the first
// chunks leave work for the other threads).
constexpr int64_t kGuidedMinDivisor = 4;
constexpr int64_t kGuidedMaxFactor = 8;
// Batches up to this many rows take the fused one-row kernel once per row: measured on
// 4096-wide Q4_K/Q6_K/Q8_0 rows (AVX-512), three fused passes still beat decoding each weight
// row to f32 and running the tile kernel; at four rows the tile kernel wins.
constexpr int64_t kMaxFusedBatch = 3;
// On the int8 path, batches of 2 .. this many rows take the fused batch kernel where it has the
// type (Int8FusedBatchFn: each weight block decoded once for up to 8 rows, cost linear in the
// rows), larger ones MultiplyInt8 (weight rows decoded to int8 per call, 16-row panels: cost
// flat up to 16 rows). bench/matmul_bench.cc --shape=qwen35-0.8b, Q4_K/Q6_K, 2 threads: the
// batch kernel wins or ties at 12 rows on every shape (1.0-2.4x, 2.4x on the Q6_K 1024 x 151936
// output matrix) and wins at 16 rows where in = 1024 (1.1-1.8x), but loses at 16 rows where
// in = 2048 or 3584 (0.90-0.92x: two 8-row blocks of activations no longer sit in L1 beside
// the row).
// Q8_0 (MultiplyInt8 decodes it by copying): 1.6x at 8 rows, 0.73x at 16 (in = 1024).
constexpr int64_t kMaxFusedBatchInt8 = 16;
constexpr int64_t kMaxFusedBatchInt8Wide = 12;  // in > 1024
constexpr int64_t kMaxFusedBatchInt8Q8 = 8;
// The 256-bit batch kernel (avx2, avx_vnni: matmul_int8_avx2_fused.h) costs 0.75-0.9 of a
// one-row product per row (its per-row multiply-adds are those of the one-row kernel), while the
// panel kernel, which decodes each weight row once per call, costs about the same from 1 to 8 rows
// (one half-panel): 1024 x 3584, one thread, CPU time, the batch kernel / the panel kernel at
// 4 and 8 rows: AVX2 0.50-0.65 and 1.0-1.3, AVX-VNNI 0.58-0.80 and 1.15-1.53 over Q4_0, Q5_0,
// Q8_0, Q4_K, Q5_K and Q6_K (crossing at 5-8 rows).
constexpr int64_t kMaxFusedBatchInt8Ymm = 6;

// --- scalar kernels -------------------------------------------------------------------------

bool ScalarDequantize(WeightType type, const void* blocks, float* out, int64_t n) {
  return DequantizeRow(type, blocks, out, n) == KernelStatus::kOk;
}

// Eight partial sums per product: the same association as a vector of 8 lanes, and what lets
// the compiler keep several independent additions in flight.
void ScalarDotTile(const float* const* w, const float* const* x, int nx, int64_t n, float* out) {
  for (int i = 0; i < kTileRows; ++i) {
    for (int j = 0; j < nx; ++j) {
      float acc[8] = {};
      int64_t k = 0;
      for (; k + 8 <= n; k += 8) {
        for (int u = 0; u < 8; ++u) acc[u] += w[i][k + u] * x[j][k + u];
      }
      for (int u = 0; k < n; ++k, ++u) acc[u] += w[i][k] * x[j][k];
      out[i * kMaxTileCols + j] =
          ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
  }
}

constexpr MatMulKernels kScalarTable = {&ScalarDequantize, &ScalarDotTile, kMaxTileCols, nullptr,
                                        nullptr};

// --- validation ---------------------------------------------------------------------------

// A single weight matrix whose rows hold `in` values of its type.
KernelStatus CheckWeights(const WeightView& w) {
  const BlockLayout layout = BlockLayoutOf(w.type);
  if (layout.block_size == 0) return KernelStatus::kUnsupportedType;
  if (w.in < 0 || w.out < 0 || w.count != 1) return KernelStatus::kInvalidArgument;
  if (w.in % layout.block_size != 0) return KernelStatus::kInvalidArgument;
  if (w.row_bytes < RowBytes(w.type, w.in)) return KernelStatus::kInvalidArgument;
  if (w.out > 0 && w.in > 0 && w.data == nullptr) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

bool MatOk(const Mat& m) {
  if (m.rows < 0 || m.cols < 0) return false;
  if (m.rows == 0 || m.cols == 0) return true;
  return m.data != nullptr && (m.rows == 1 || m.stride >= m.cols);
}

// --- the products -------------------------------------------------------------------------

// Rows [r0, r1) of y for every activation row (r1 - r0 <= kChunkRows).
void MultiplyChunk(const MatMulKernels& kern, const WeightView& w, const Mat& x, Mat& y, int64_t r0,
                   int64_t r1) {
  thread_local std::vector<float> decoded;
  const int64_t rows = r1 - r0;
  const int64_t k_total = w.in;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const float* row_ptr[kChunkRows];
  if (w.type == WeightType::kF32) {
    for (int64_t i = 0; i < rows; ++i) {
      row_ptr[i] = reinterpret_cast<const float*>(base + (r0 + i) * w.row_bytes);
    }
  } else {
    decoded.resize(static_cast<size_t>(rows * k_total));
    for (int64_t i = 0; i < rows; ++i) {
      float* dst = decoded.data() + i * k_total;
      const void* src = base + (r0 + i) * w.row_bytes;
      if (!kern.dequantize_row(w.type, src, dst, k_total)) {
        DequantizeRow(w.type, src, dst, k_total);
      }
      row_ptr[i] = dst;
    }
  }

  float partial[kRowBlock * kChunkRows];
  for (int64_t t0 = 0; t0 < x.rows; t0 += kRowBlock) {
    const int64_t tn = std::min(kRowBlock, x.rows - t0);
    std::fill(partial, partial + tn * kChunkRows, 0.0f);
    for (int64_t k0 = 0; k0 < k_total; k0 += kSliceK) {
      const int64_t kn = std::min(kSliceK, k_total - k0);
      for (int64_t i0 = 0; i0 < rows; i0 += kTileRows) {
        const int valid_rows = static_cast<int>(std::min<int64_t>(kTileRows, rows - i0));
        const float* wp[kTileRows];
        // A short tile repeats its last row; those results are dropped.
        for (int i = 0; i < kTileRows; ++i) wp[i] = row_ptr[i0 + std::min(i, valid_rows - 1)] + k0;
        for (int64_t j0 = 0; j0 < tn; j0 += kern.max_nx) {
          const int nx = static_cast<int>(std::min<int64_t>(kern.max_nx, tn - j0));
          const float* xp[kMaxTileCols];
          for (int j = 0; j < nx; ++j) xp[j] = x.data + (t0 + j0 + j) * x.stride + k0;
          float out[kTileRows * kMaxTileCols];
          kern.dot_tile(wp, xp, nx, kn, out);
          for (int j = 0; j < nx; ++j) {
            for (int i = 0; i < valid_rows; ++i) {
              partial[(j0 + j) * kChunkRows + i0 + i] += out[i * kMaxTileCols + j];
            }
          }
        }
      }
    }
    for (int64_t j = 0; j < tn; ++j) {
      float* dst = y.data + (t0 + j) * y.stride + r0;
      std::copy(partial + j * kChunkRows, partial + j * kChunkRows + rows, dst);
    }
  }
}

int64_t TaskGrain(int64_t macs_per_item) {
  return std::max<int64_t>(1, kMinMacsPerTask / std::max<int64_t>(1, macs_per_item));
}

// Small batches (x.rows <= kMaxFusedBatch): each activation row through the fused kernel,
// kChunkRows weight rows at a time so a chunk is still in L1/L2 when the next row reads it.
void MultiplyFused(ThreadPool& pool, const MatMulKernels& kern, const WeightView& w, const Mat& x,
                   Mat& y) {
  FusedActivation acts[kMaxFusedBatch];
  thread_local std::vector<float> sums;
  const int64_t n16 = w.in % 32 == 0 ? w.in / 16 : 0;
  const int64_t n32 = n16 / 2;
  sums.resize(static_cast<size_t>(x.rows * (n16 + n32)));
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* xt = x.data + t * x.stride;
    acts[t] = {xt, nullptr, nullptr, w.in};
    if (n16 == 0) continue;
    float* sums16 = sums.data() + t * (n16 + n32);
    float* sums32 = sums16 + n16;
    for (int64_t i = 0; i < n16; ++i) {
      float s = 0.0f;
      for (int k = 0; k < 16; ++k) s += xt[16 * i + k];
      sums16[i] = s;
    }
    for (int64_t i = 0; i < n32; ++i) sums32[i] = sums16[2 * i] + sums16[2 * i + 1];
    acts[t].sums16 = sums16;
    acts[t].sums32 = sums32;
  }
  const auto* base = static_cast<const uint8_t*>(w.data);
  pool.ParallelFor(w.out, TaskGrain(w.in * x.rows), [&](int64_t begin, int64_t end) {
    for (int64_t r0 = begin; r0 < end; r0 += kChunkRows) {
      const int64_t rows = std::min(kChunkRows, end - r0);
      for (int64_t t = 0; t < x.rows; ++t) {
        kern.fused_rows(w.type, base + r0 * w.row_bytes, w.row_bytes, rows, acts[t],
                        y.data + t * y.stride + r0);
      }
    }
  });
}

// The int8 weight decoder and product kernel of an ISA path; rows null where it has none.
struct Int8Kernel {
  CpuIsa isa = CpuIsa::kScalar;  // the level: also that of the activation quantizer
  Int8DecodeFn decode = nullptr;
  Int8RowsFn rows = nullptr;
  Int8FusedFn fused = nullptr;              // the few-row product, if any
  bool (*fused_has)(WeightType) = nullptr;  // the types `fused` handles
  Int8FusedBatchFn batch = nullptr;         // the fused batch product, if any
  bool (*batch_has)(WeightType) = nullptr;  // the types `batch` handles
  bool batch_reorders = false;              // `batch` wants OrderInt8FlatForBatch's Q4_K order
};

Int8Kernel Int8KernelFor(CpuIsa isa) {
  switch (ClampIsa(isa)) {
    case CpuIsa::kScalar:
      return {CpuIsa::kScalar, &DecodeInt8RowsBaseline, &Int8RowsScalar};
    case CpuIsa::kAvx512:
#if defined(DELTASERVE_HAVE_X86_SIMD)
      // AVX512-VNNI is part of the avx512 level where the CPU has it (cpu_features.h).
      if (DetectedCpuFeatures().avx512vnni) {
        return {
            CpuIsa::kAvx512,
            &DecodeInt8RowsAvx512,
            &Int8RowsAvx512Vnni,
            &Int8FusedAvx512Vnni,
            &Int8FusedAvx512VnniHas,
            &Int8FusedBatchAvx512Vnni,
            &Int8FusedBatchAvx512VnniHas,
            true,
        };
      }
#endif
      return {};
#if defined(DELTASERVE_HAVE_X86_SIMD)
    case CpuIsa::kAvxVnni:
      return {CpuIsa::kAvxVnni, &DecodeInt8RowsAvx2,    &Int8RowsAvxVnni, &Int8FusedAvxVnni,
              &Int8Fused256Has, &Int8FusedBatchAvxVnni, &Int8Fused256Has};
    case CpuIsa::kAvx2:
      return {CpuIsa::kAvx2,    &DecodeInt8RowsAvx2, &Int8RowsAvx2,   &Int8FusedAvx2,
              &Int8Fused256Has, &Int8FusedBatchAvx2, &Int8Fused256Has};
#else
    case CpuIsa::kAvxVnni:
    case CpuIsa::kAvx2:
      break;
#endif
  }
  return {};
}

// The int8-activation product: activations quantized and packed once (in parallel over
// panels), then each task decodes kInt8ChunkRows weight rows to int8 and runs the kernel over
// every activation panel.
void MultiplyInt8(ThreadPool& pool, Int8Kernel kernel, const WeightView& w, const Mat& x, Mat& y) {
  // Named by reference: a lambda running on a worker would otherwise see its own thread_local.
  thread_local Int8Activations storage;
  Int8Activations& acts = storage;
  PrepareInt8Activations(w.type, x, acts);
  pool.ParallelFor(acts.panels, 1, [&](int64_t begin, int64_t end) {
    QuantizeInt8Panels(w.type, x, acts, begin, end, kernel.isa);
  });
  const Int8ActivationsView view = acts.View();
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t n_chunks = (w.out + kInt8ChunkRows - 1) / kInt8ChunkRows;
  pool.ParallelFor(
      n_chunks, TaskGrain(kInt8ChunkRows * w.in * x.rows), [&](int64_t begin, int64_t end) {
        thread_local Int8WeightBuffer buf;
        for (int64_t c = begin; c < end; ++c) {
          const int64_t r0 = c * kInt8ChunkRows;
          const int64_t rows = std::min<int64_t>(kInt8ChunkRows, w.out - r0);
          const Int8WeightRows wr = DecodeInt8Rows(w.type, base + r0 * w.row_bytes, w.row_bytes,
                                                   rows, w.in, buf, kernel.decode);
          kernel.rows(wr, view, y, r0);
        }
      });
}

// Largest batch the fused batch kernel of level `isa` takes for w (kMaxFusedBatchInt8's comment).
int64_t MaxFusedBatchInt8(const WeightView& w, CpuIsa isa) {
  if (isa == CpuIsa::kAvx2 || isa == CpuIsa::kAvxVnni) return kMaxFusedBatchInt8Ymm;
  return w.type == WeightType::kQ8_0 ? kMaxFusedBatchInt8Q8
         : w.in <= 1024              ? kMaxFusedBatchInt8
                                     : kMaxFusedBatchInt8Wide;
}

// Which int8 product MatMulCpuIsa runs for w on a batch of `rows` (given UsesInt8Path).
enum class Int8Route { kBatch, kFused, kPanels };
Int8Route RouteInt8(const Int8Kernel& k, const WeightView& w, int64_t rows) {
  if (rows >= 2 && rows <= MaxFusedBatchInt8(w, k.isa) && k.batch != nullptr &&
      k.batch_has(w.type)) {
    return Int8Route::kBatch;
  }
  if (rows <= kMaxFusedBatch && k.fused != nullptr && k.fused_has(w.type)) return Int8Route::kFused;
  return Int8Route::kPanels;
}

// The fused int8 products (kFused, kBatch) of n weight matrices sharing x, as one parallel job:
// one product (MatMulCpuIsa) or a group (MatMulGroupCpuIsa). x is quantized once per weight type
// (the activation format depends only on the type: Q4_K and Q6_K differ in block sums, and the
// batch kernel wants Q4_K's sub-blocks reordered). The rows of all products form one range that
// the threads take in guided chunks: remaining / (2 threads), between kMinGuidedRows and
// kMaxGuidedRows, so a thread starts with a long contiguous stream of weights and the last
// chunks are short (less waiting at the end of the job). Each weight row is multiplied by the
// same kernel on the same bytes whatever the chunking, so every output is bit-identical to any
// other split (matmul_group_test).
void MultiplyFusedInt8(ThreadPool& pool, const Int8Kernel& k, const Int8Route* route,
                       const WeightView* w, int n, const Mat& x, Mat* y) {
  thread_local Int8FlatActivations storage[kMaxMatMulGroup];
  Int8FlatActivations* acts = storage;  // see MultiplyInt8
  int format[kMaxMatMulGroup];          // index into acts of product i's activations
  Int8FlatBatch batch[kMaxMatMulGroup];
  int64_t first_row[kMaxMatMulGroup + 1] = {0};
  int n_formats = 0;
  for (int i = 0; i < n; ++i) {
    format[i] = -1;
    for (int j = 0; j < i && format[i] < 0; ++j) {
      if (w[j].type == w[i].type && route[j] == route[i]) {
        format[i] = format[j];
        batch[i] = batch[j];
      }
    }
    if (format[i] < 0) {
      format[i] = n_formats++;
      Int8FlatActivations& a = acts[format[i]];
      PrepareInt8Flat(w[i].type, x, a);
      // In parallel only where it saves more than the pool's hand-off (~1 us; ~0.3 ns a value).
      if (x.rows * x.cols >= 32768) {
        pool.ParallelFor(x.rows, 1, [&](int64_t begin, int64_t end) {
          QuantizeInt8FlatRows(w[i].type, x, a, begin, end, k.isa);
        });
      } else {
        QuantizeInt8FlatRows(w[i].type, x, a, 0, x.rows, k.isa);
      }
      if (route[i] == Int8Route::kBatch) {
        batch[i] = OrderInt8FlatForBatch(w[i].type, a, x.rows, k.batch_reorders);
      }
    }
    first_row[i + 1] = first_row[i] + w[i].out;
  }
  // Rows [r0, r1) of the joint range.
  auto run_rows = [&](int64_t r0, int64_t r1) {
    for (int i = 0; i < n; ++i) {
      const int64_t b = std::max(r0, first_row[i]) - first_row[i];
      const int64_t e = std::min(r1, first_row[i + 1]) - first_row[i];
      if (b >= e) continue;
      const auto* base = static_cast<const uint8_t*>(w[i].data);
      const size_t row_bytes = w[i].row_bytes;
      if (route[i] == Int8Route::kBatch) {
        k.batch(w[i].type, base + b * row_bytes, row_bytes, e - b, batch[i], y[i].data + b,
                y[i].stride);
        continue;
      }
      // kChunkRows rows at a time for every activation row, so that a chunk is still in L1
      // when the next activation row reads it.
      for (int64_t c = b; c < e; c += kChunkRows) {
        for (int64_t t = 0; t < x.rows; ++t) {
          k.fused(w[i].type, base + c * row_bytes, row_bytes, std::min(kChunkRows, e - c),
                  acts[format[i]].Row(t), y[i].data + t * y[i].stride + c);
        }
      }
    }
  };
  const int64_t total = first_row[n];
  const int64_t grain = TaskGrain(w[0].in * x.rows);  // the products share w.in = x.cols
  if (total <= grain || pool.size() == 1) {
    run_rows(0, total);
    return;
  }
  const int64_t min_rows = std::max(kChunkRows, grain / kGuidedMinDivisor);
  const int64_t max_rows = grain * kGuidedMaxFactor;
  const int64_t share = 2 * pool.size();
  std::atomic<int64_t> next{0};
  pool.Run([&](int, int) {
    int64_t start = next.load(std::memory_order_relaxed);
    for (;;) {
      int64_t len;
      do {
        const int64_t left = total - start;
        if (left <= 0) return;
        len = std::clamp(left / share, min_rows, max_rows);
        len = std::min(left, (len + kChunkRows - 1) / kChunkRows * kChunkRows);
      } while (!next.compare_exchange_weak(start, start + len, std::memory_order_relaxed));
      run_rows(start, start + len);
      start = next.load(std::memory_order_relaxed);
    }
  });
}

std::optional<MatMulActivations> ParseActivations(const char* s) {
  if (s == nullptr) return std::nullopt;
  const std::string_view v(s);
  if (v == "f32") return MatMulActivations::kF32;
  if (v == "int8") return MatMulActivations::kInt8;
  return std::nullopt;
}

// -1: not forced; otherwise the forced MatMulActivations.
std::atomic<int> g_forced_activations{-1};

}  // namespace

bool UsesInt8Path(WeightType type, CpuIsa isa, int64_t rows) {
  const Int8Kernel k = Int8KernelFor(isa);
  if (Int8Group(type) == 0 || k.rows == nullptr) return false;
  const MatMulKernels& kern = KernelsFor(isa);
  const bool fused = kern.has_fused_rows != nullptr && kern.has_fused_rows(type);
  if (!fused || rows > kMaxFusedBatch) return true;
  return k.fused != nullptr && k.fused_has(type);
}

bool UsesFusedInt8Kernel(WeightType type, int64_t in, CpuIsa isa, int64_t rows) {
  if (!UsesInt8Path(type, isa, rows)) return false;
  WeightView w;
  w.type = type;
  w.in = in;
  return RouteInt8(Int8KernelFor(isa), w, rows) != Int8Route::kPanels;
}

Int8DecodeFn Int8DecoderFor(CpuIsa isa) { return Int8KernelFor(isa).decode; }

const MatMulKernels& ScalarKernels() { return kScalarTable; }

const MatMulKernels& KernelsFor(CpuIsa isa) {
#if defined(DELTASERVE_HAVE_X86_SIMD)
  switch (ClampIsa(isa)) {
    case CpuIsa::kAvx512:
      return Avx512Kernels();
    case CpuIsa::kAvxVnni:  // the f32-activation kernels are the AVX2 level's
    case CpuIsa::kAvx2:
      return Avx2Kernels();
    case CpuIsa::kScalar:
      break;
  }
#else
  (void)isa;
#endif
  return ScalarKernels();
}

KernelStatus MatMulCpuIsa(ThreadPool& pool, const WeightView& w, const Mat& x, Mat& y, CpuIsa isa) {
  return MatMulCpuIsa(pool, w, x, y, isa, ActiveMatMulActivations());
}

KernelStatus MatMulCpuIsa(ThreadPool& pool, const WeightView& w, const Mat& x, Mat& y, CpuIsa isa,
                          MatMulActivations mode) {
  if (KernelStatus s = CheckWeights(w); s != KernelStatus::kOk) return s;
  if (!MatOk(x) || !MatOk(y)) return KernelStatus::kInvalidArgument;
  if (x.cols != w.in || y.cols != w.out || x.rows != y.rows) return KernelStatus::kInvalidArgument;
  if (x.rows == 0 || w.out == 0) return KernelStatus::kOk;
  if (w.in == 0) {
    for (int64_t t = 0; t < y.rows; ++t) {
      std::fill(y.data + t * y.stride, y.data + t * y.stride + y.cols, 0.0f);
    }
    return KernelStatus::kOk;
  }
  const MatMulKernels& kern = KernelsFor(isa);

  if (mode == MatMulActivations::kInt8 && UsesInt8Path(w.type, isa, x.rows)) {
    const Int8Kernel k = Int8KernelFor(isa);
    const Int8Route route = RouteInt8(k, w, x.rows);
    if (route == Int8Route::kPanels) {
      MultiplyInt8(pool, k, w, x, y);
    } else {
      MultiplyFusedInt8(pool, k, &route, &w, 1, x, &y);
    }
    return KernelStatus::kOk;
  }

  // F32 weights need no decoding, so the tile kernel wins from two rows on.
  const int64_t max_fused = w.type == WeightType::kF32 ? 1 : kMaxFusedBatch;
  if (x.rows <= max_fused && kern.has_fused_rows != nullptr && kern.has_fused_rows(w.type)) {
    MultiplyFused(pool, kern, w, x, y);
    return KernelStatus::kOk;
  }

  const int64_t n_chunks = (w.out + kChunkRows - 1) / kChunkRows;
  pool.ParallelFor(
      n_chunks, TaskGrain(kChunkRows * w.in * x.rows), [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          MultiplyChunk(kern, w, x, y, c * kChunkRows, std::min(w.out, (c + 1) * kChunkRows));
        }
      });
  return KernelStatus::kOk;
}

KernelStatus MatMulGroupCpuIsa(ThreadPool& pool, const WeightView* w, int n, const Mat& x, Mat* y,
                               CpuIsa isa, MatMulActivations mode) {
  if (n < 0 || (n > 0 && (w == nullptr || y == nullptr))) return KernelStatus::kInvalidArgument;
  if (!MatOk(x)) return KernelStatus::kInvalidArgument;
  for (int i = 0; i < n; ++i) {
    if (KernelStatus s = CheckWeights(w[i]); s != KernelStatus::kOk) return s;
    if (!MatOk(y[i]) || x.cols != w[i].in || y[i].cols != w[i].out || x.rows != y[i].rows) {
      return KernelStatus::kInvalidArgument;
    }
  }
  // Groups beyond kMaxMatMulGroup go in pieces.
  for (int i0 = kMaxMatMulGroup; i0 < n; i0 += kMaxMatMulGroup) {
    const int m = std::min(kMaxMatMulGroup, n - i0);
    if (KernelStatus s = MatMulGroupCpuIsa(pool, w + i0, m, x, y + i0, isa, mode);
        s != KernelStatus::kOk) {
      return s;
    }
  }
  n = std::min(n, kMaxMatMulGroup);
  bool grouped = n > 1 && x.rows > 0 && mode == MatMulActivations::kInt8;
  const Int8Kernel k = Int8KernelFor(isa);
  Int8Route route[kMaxMatMulGroup];
  for (int i = 0; i < n && grouped; ++i) {
    grouped = w[i].in > 0 && UsesInt8Path(w[i].type, isa, x.rows);
    if (grouped) route[i] = RouteInt8(k, w[i], x.rows);
    grouped = grouped && route[i] != Int8Route::kPanels;
  }
  if (grouped) {
    MultiplyFusedInt8(pool, k, route, w, n, x, y);
    return KernelStatus::kOk;
  }
  // Prefill-sized batches (one job per product is long anyway) and the f32 paths.
  for (int i = 0; i < n; ++i) {
    if (KernelStatus s = MatMulCpuIsa(pool, w[i], x, y[i], isa, mode); s != KernelStatus::kOk) {
      return s;
    }
  }
  return KernelStatus::kOk;
}

KernelStatus GetRowsCpuIsa(const WeightView& table, const int32_t* ids, int64_t n, Mat& out,
                           CpuIsa isa) {
  if (KernelStatus s = CheckWeights(table); s != KernelStatus::kOk) return s;
  if (n < 0 || !MatOk(out) || out.rows != n || out.cols != table.in) {
    return KernelStatus::kInvalidArgument;
  }
  if (n > 0 && ids == nullptr) return KernelStatus::kInvalidArgument;
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= table.out) return KernelStatus::kInvalidArgument;
  }
  for (int64_t i = 0; i < n; ++i) {
    const void* src = static_cast<const uint8_t*>(table.data) + ids[i] * table.row_bytes;
    if (KernelStatus s =
            DequantizeRowIsa(table.type, src, out.data + i * out.stride, table.in, isa);
        s != KernelStatus::kOk) {
      return s;
    }
  }
  return KernelStatus::kOk;
}

KernelStatus DequantizeRowIsa(WeightType type, const void* blocks, float* out, int64_t n,
                              CpuIsa isa) {
  const BlockLayout layout = BlockLayoutOf(type);
  if (layout.block_size == 0) return KernelStatus::kUnsupportedType;
  if (n < 0 || n % layout.block_size != 0) return KernelStatus::kInvalidArgument;
  if (KernelsFor(isa).dequantize_row(type, blocks, out, n)) return KernelStatus::kOk;
  return DequantizeRow(type, blocks, out, n);
}

}  // namespace internal

MatMulActivations ActiveMatMulActivations() {
  const int forced = internal::g_forced_activations.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<MatMulActivations>(forced);
  static const MatMulActivations from_env =
      internal::ParseActivations(std::getenv("DELTASERVE_MATMUL_ACT"))
          .value_or(MatMulActivations::kInt8);
  return from_env;
}

void SetMatMulActivations(std::optional<MatMulActivations> mode) {
  internal::g_forced_activations.store(mode ? static_cast<int>(*mode) : -1,
                                       std::memory_order_relaxed);
}

KernelStatus MatMulCpu(ThreadPool& pool, const WeightView& w, const Mat& x, Mat& y) {
  return internal::MatMulCpuIsa(pool, w, x, y, ActiveIsa());
}

KernelStatus MatMulGroupCpu(ThreadPool& pool, const WeightView* w, int n, const Mat& x, Mat* y) {
  return internal::MatMulGroupCpuIsa(pool, w, n, x, y, ActiveIsa(), ActiveMatMulActivations());
}

KernelStatus GetRowsCpu(const WeightView& table, const int32_t* ids, int64_t n, Mat& out) {
  return internal::GetRowsCpuIsa(table, ids, n, out, ActiveIsa());
}

}  // namespace deltaserve::kernels
