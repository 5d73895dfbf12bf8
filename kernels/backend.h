// The compute interface of the hybrid engine. Every op of the Qwen3.5 forward pass goes through
// a Backend; the CPU backend (kernels/cpu) and the CUDA backend (kernels/cuda) implement it, and
// worker/engine is written once against it.
//
// Memory: a backend owns its memory. The engine holds DeviceBuffer handles and the typed views
// below, whose pointers it never dereferences (they are device pointers on a GPU). Weights come
// in their GGUF block type and are multiplied in that form; activations are f32.
//
// Layouts: activations are row-major f32 matrices (Mat) with one row per token, or per
// (token, head) where an op works on heads; `stride` is the distance between rows in floats, so
// a column range of a wider matrix (the q part of a fused qkv projection) is a view, not a copy.
// Batches: matrix products and element-wise ops take all tokens of all sequences at once; ops
// that carry per-sequence state (conv, delta rule, attention) take one sequence's tokens.
//
// Errors: ops return KernelStatus; kernels/ uses no exceptions and no Abseil (ARCHITECTURE.md:
// kernels may use only the C++ library and the CUDA toolkit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace deltaserve::kernels {

// Result of a backend call.
enum class KernelStatus {
  kOk = 0,
  kInvalidArgument,   // shapes or parameters inconsistent
  kUnsupportedType,   // a weight type this backend cannot compute with
  kOutOfMemory,
  kDeviceError,       // a device call failed (CUDA)
};

// Human-readable name of a status ("invalid argument").
std::string_view KernelStatusName(KernelStatus status);

// Weight block types, numbered as GGML/GGUF number them (so a GGUF type id converts by cast).
enum class WeightType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// Elements per block and bytes per block of a weight type; {0, 0} for an unknown id.
struct BlockLayout {
  int64_t block_size;
  int64_t block_bytes;
};
BlockLayout BlockLayoutOf(WeightType type);
// True when `type_id` (a GGUF type id) is one of the WeightType values.
bool IsWeightType(uint32_t type_id);

// A weight matrix W [out][in] in backend memory: `out` rows of `in` elements each, every row
// `row_bytes` long in `type` blocks (in is a multiple of the block size). y = W x. A stack of
// matrices (MoE experts, GGUF shape {in, out, n}) is `count` such matrices, matrix i starting
// i * MatrixStride() bytes after `data`: back to back as in a GGUF file (matrix_stride 0), or
// further apart (the slots of a device expert arena, worker/engine/expert_tiers.h).
struct WeightView {
  const void* data = nullptr;
  WeightType type = WeightType::kF32;
  int64_t in = 0;
  int64_t out = 0;
  size_t row_bytes = 0;
  int64_t count = 1;
  size_t matrix_stride = 0;  // bytes between matrices of a stack; 0: out * row_bytes

  // Bytes from one matrix of a stack to the next (>= out * row_bytes).
  size_t MatrixStride() const {
    return matrix_stride != 0 ? matrix_stride : static_cast<size_t>(out) * row_bytes;
  }
  // Bytes a stack spans: (count - 1) strides and one matrix.
  size_t StackBytes() const {
    return count <= 0 ? 0
                      : static_cast<size_t>(count - 1) * MatrixStride() +
                            static_cast<size_t>(out) * row_bytes;
  }
  // Matrix `index` of a stack.
  WeightView Matrix(int64_t index) const {
    WeightView v = *this;
    v.data = static_cast<const uint8_t*>(data) + static_cast<size_t>(index) * MatrixStride();
    v.count = 1;
    v.matrix_stride = 0;
    return v;
  }
  // Rows [first, first + n) of a single matrix.
  WeightView Rows(int64_t first, int64_t n) const {
    WeightView v = *this;
    v.data = static_cast<const uint8_t*>(data) + static_cast<size_t>(first) * row_bytes;
    v.out = n;
    v.count = 1;
    return v;
  }
};

// A row-major f32 matrix [rows][cols] in backend memory, rows `stride` floats apart.
struct Mat {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;

  // Columns [first, first + n) of every row.
  Mat Cols(int64_t first, int64_t n) const { return {data + first, rows, n, stride}; }
  // Rows [first, first + n).
  Mat Rows(int64_t first, int64_t n) const { return {data + first * stride, n, cols, stride}; }
  // Consistent shape: non-negative sizes, stride >= cols, and memory unless empty.
  bool Valid() const {
    return rows >= 0 && cols >= 0 && stride >= cols &&
           (data != nullptr || rows == 0 || cols == 0);
  }
  // The same memory seen as [rows * cols / new_cols][new_cols]; needs stride == cols.
  Mat Reshaped(int64_t new_cols) const {
    return {data, rows * cols / new_cols, new_cols, new_cols};
  }
};

// One pool of a paged KV cache: the K (or V) values of one attention layer. Page p is the
// bytes [p * page_tokens * row_bytes, (p + 1) * page_tokens * row_bytes); a row (`row_bytes`)
// is one position's n_head_kv * head_dim values encoded in `type` blocks along head_dim
// (head_dim a multiple of the block size). Inside a page the layout is head-major,
// [n_head_kv][page_tokens][head_dim]: one kv head's keys of a page are one contiguous block,
// which the attention kernel streams (KvHeadOffset).
struct KvPool {
  void* data = nullptr;
  WeightType type = WeightType::kF32;
  size_t row_bytes = 0;
  int64_t n_pages = 0;  // pages in the pool (page ids are checked against it)
};

// One sequence's view of one attention layer's paged cache: position i is slot i % page_tokens
// of page page_table[i / page_tokens], in the K pool and in the V pool.
struct PagedKvView {
  KvPool k;
  KvPool v;
  int64_t page_tokens = 0;
  const int32_t* page_table = nullptr;  // backend memory, n_pages entries
  int64_t n_pages = 0;
  int64_t n_head_kv = 0;  // heads per row: the head-major split of every page
};

// Byte offset in `pool` of kv head `head` of position `pos` (head_dim values, row_bytes /
// n_head_kv bytes): page, then head, then slot in the page (KvPool).
inline size_t KvHeadOffset(const KvPool& pool, const PagedKvView& kv, int64_t pos, int64_t head) {
  const size_t head_bytes = pool.row_bytes / static_cast<size_t>(kv.n_head_kv);
  const auto page = static_cast<size_t>(kv.page_table[pos / kv.page_tokens]);
  return ((page * kv.n_head_kv + head) * kv.page_tokens + pos % kv.page_tokens) * head_bytes;
}

// True for the types a KV cache pool may hold: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0.
bool IsKvCacheType(WeightType type);

// A dense f32 vector in backend memory (norm weights, per-head parameters).
struct Vec {
  const float* data = nullptr;
  int64_t n = 0;
};

// One decode step of a Gated DeltaNet layer (MODEL_SPEC §2.4 steps 2-7, after the input
// projections) for B sequences with exactly one new token each: Backend::DeltaNetDecodeStep.
// d = head_dim, C = 2 n_k d + n_v d (the conv channels). Row b of every matrix is sequence b's
// token. Per sequence b, as RunDeltaNet composes the single ops for one token:
//   DeltaNetGates(alpha[b], beta[b]); CausalConv1dSilu(qkv[b], conv_w, conv_states[b]) in
//   place; L2Norm of each q and k head (l2_eps); GatedDeltaRule(q, k, v, g, beta,
//   delta_states[b]) -> out[b]; GatedRmsNorm(out[b] per head, norm, z[b] per head, norm_eps).
// The per-sequence states are reached through arrays of B pointers so that one call (one or two
// kernel launches on a GPU, capturable in a CUDA graph) serves the whole batch:
// `conv_states`/`delta_states` are in backend memory (what a GPU kernel reads);
// `conv_states_host`/`delta_states_host` are host arrays holding the same B pointers (what a
// composition of single ops on the host, the default implementation, uses; no backend reads
// backend memory on the host to find them). Both pairs are required and must agree.
// Aliasing: qkv, alpha and beta are clobbered (they hold intermediate values afterwards: the
// default leaves the conv output with q and k normalised, g and sigmoid(beta)); out must not
// overlap any other argument; no two sequences may share a state.
struct DeltaNetStep {
  Mat qkv;    // [B][C]: in_proj_qkv's output [q heads | k heads | v heads], the conv input
  Mat z;      // [B][n_v d]: in_proj_z's output (the output gate)
  Mat alpha;  // [B][n_v]: in_proj_a's output (DeltaNetGates turns it into g)
  Mat beta;   // [B][n_v]: in_proj_b's output (before the sigmoid)
  const float* conv_w = nullptr;  // [C][conv_kernel] (CausalConv1dSilu)
  int64_t conv_kernel = 0;
  float* const* conv_states = nullptr;   // backend memory, B pointers to [conv_kernel - 1][C]
  float* const* delta_states = nullptr;  // backend memory, B pointers to [n_v][d (v)][d (k)]
  float* const* conv_states_host = nullptr;   // host memory, the same B pointers
  float* const* delta_states_host = nullptr;  // host memory, the same B pointers
  Vec ssm_a;    // [n_v]
  Vec dt_bias;  // [n_v]
  Vec norm;     // [d]: the gated RMSNorm's weight (plain, no +1)
  float l2_eps = 0.0f;
  float norm_eps = 0.0f;
  int64_t n_k_heads = 0;
  int64_t n_v_heads = 0;
  int64_t head_dim = 0;
  Mat out;  // [B][n_v d]
};

// The shape rules of DeltaNetDecodeStep, shared by every backend so all refuse the same calls:
// kInvalidArgument unless the shapes above hold, every array and Vec is present, the host
// arrays' entries are non-null (a conv state may be null when conv_kernel == 1: no window; the
// backend-memory arrays are not read here) and n_v % n_k == 0. B == 0 is valid.
KernelStatus ValidateDeltaNetStep(const DeltaNetStep& step);

// A backend allocation; freed by its backend when the handle dies. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(void* data, size_t bytes, void (*free_fn)(void*, void*), void* owner)
      : data_(data), bytes_(bytes), free_fn_(free_fn), owner_(owner) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      data_ = o.data_;
      bytes_ = o.bytes_;
      free_fn_ = o.free_fn_;
      owner_ = o.owner_;
      o.data_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  float* floats() const { return static_cast<float*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void Reset() {
    if (data_ != nullptr && free_fn_ != nullptr) free_fn_(owner_, data_);
    data_ = nullptr;
  }
  void* data_ = nullptr;
  size_t bytes_ = 0;
  void (*free_fn_)(void*, void*) = nullptr;
  void* owner_ = nullptr;
};

// The compute interface; see the file comment. Implementations are not thread-safe: one engine
// thread drives a backend (which may use many threads inside an op).
class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or "cuda:0".
  virtual std::string_view name() const = 0;
  // True when backend memory is ordinary host memory that any thread may read (the CPU
  // backend): a session snapshot's pages are then serialized in place, off the engine thread.
  virtual bool host_memory() const { return false; }

  // --- memory ---------------------------------------------------------------------------
  // Allocates `bytes` (64-byte aligned, zero-filled). An empty handle means out of memory.
  virtual DeviceBuffer Allocate(size_t bytes) = 0;
  // Copies host bytes into backend memory and back.
  virtual KernelStatus CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual KernelStatus CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  // Makes `bytes` of host memory that outlives the backend (a memory-mapped GGUF) usable as
  // weights: the CPU backend returns `host` itself (zero copy); a GPU backend copies it into
  // `storage` and returns the device pointer. Null on failure.
  virtual const void* ImportWeights(const void* host, size_t bytes, DeviceBuffer& storage) = 0;
  // Copies `bytes` within backend memory (copy-on-write pages, state snapshots); the ranges
  // must not overlap.
  virtual KernelStatus CopyOnDevice(void* dst, const void* src, size_t bytes) = 0;
  // Waits until every queued op has finished (no-op on the CPU).
  virtual KernelStatus Synchronize() = 0;

  // --- dense algebra -------------------------------------------------------------------
  // y[r][o] = sum_i W[o][i] * x[r][i] for every row r. x.cols == w.in, y.cols == w.out.
  virtual KernelStatus MatMul(const WeightView& w, const Mat& x, Mat& y) = 0;
  // y[i] = MatMul(w[i], x) for i < n: products that share their input (attention q/k/v, FFN
  // gate/up, the DeltaNet projections) in one call, so that a backend prepares x once (the CPU
  // quantizes it to int8 once) and runs them as one job (one parallel region; one launch on a
  // GPU). Each product has MatMul's contract and result; the y[i] must not overlap x or each
  // other. w and y are host arrays of n entries. The default calls MatMul n times.
  virtual KernelStatus MatMulGroup(const WeightView* w, int n, const Mat& x, Mat* y);
  // out[i] = row ids[i] of `table` (an embedding stored in any weight type), as f32.
  virtual KernelStatus GetRows(const WeightView& table, const int32_t* ids, int64_t n,
                               Mat& out) = 0;
  // y = x / sqrt(mean(x^2) + eps) * w per row (w.n == x.cols; w.data may be null: no weight).
  // In place when y aliases x.
  virtual KernelStatus RmsNorm(const Mat& x, Vec w, float eps, Mat& y) = 0;
  // x = x / max(||x||_2, eps) over each run of `group` consecutive columns of every row (one
  // head; x.cols is a multiple of group), in place. x may be a column view (q inside qkv).
  virtual KernelStatus L2Norm(Mat& x, int64_t group, float eps) = 0;
  // dst = src (same rows and cols; strides may differ): deinterleaving heads, writing new K/V
  // rows into a cache.
  virtual KernelStatus Copy(const Mat& src, Mat& dst) = 0;
  // x += y.
  virtual KernelStatus Add(Mat& x, const Mat& y) = 0;
  // out = silu(gate) * up.
  virtual KernelStatus SwiGlu(const Mat& gate, const Mat& up, Mat& out) = 0;
  // x *= sigmoid(gate) element-wise (gate.cols == x.cols), or per row when gate.cols == 1.
  virtual KernelStatus MulSigmoid(Mat& x, const Mat& gate) = 0;

  // --- attention layers ----------------------------------------------------------------
  // NeoX rotary embedding, in place, on the first n_rot dims of each head: x is
  // [n_tokens * n_heads][head_dim], positions[t] the position of token t (row t * n_heads + h).
  // Pairs (i, i + n_rot/2), angle positions[t] * base^(-2i/n_rot).
  virtual KernelStatus RopeNeox(Mat& x, const int32_t* positions, int64_t n_heads, int64_t n_rot,
                                float freq_base) = 0;
  // Encodes rows [0, T) of k and v ([T][n_head_kv * head_dim] f32) into positions first_pos ..
  // first_pos + T - 1 of `kv` (their pages must be in the page table), in the pools' types.
  virtual KernelStatus StoreKv(const Mat& k, const Mat& v, const PagedKvView& kv,
                               int64_t first_pos) = 0;
  // Causal softmax attention of one sequence. q is [T][n_head * head_dim] for the sequence's T
  // newest tokens at positions n_past .. n_past+T-1, whose K/V are already in `kv` (StoreKv).
  // Query head h reads kv head h / (n_head / n_head_kv); token t attends to positions 0 ..
  // n_past + t. K and V are read in their cache types. out is [T][n_head * head_dim] and may
  // alias q. Softmax in f32 with `scale`.
  virtual KernelStatus PagedAttention(const Mat& q, const PagedKvView& kv, int64_t n_past,
                                      int64_t n_head, int64_t n_head_kv, float scale,
                                      Mat& out) = 0;

  // --- Gated DeltaNet layers -----------------------------------------------------------
  // Causal depthwise conv1d over one sequence's T tokens, then SiLU. x and y are [T][C]; w is
  // [C][kernel] (GGUF ssm_conv1d {kernel, C}); state is [kernel-1][C], the previous inputs
  // (oldest first), read and then replaced by the last kernel-1 inputs. y may alias x.
  virtual KernelStatus CausalConv1dSilu(const Mat& x, const float* w, int64_t kernel,
                                        float* state, Mat& y) = 0;
  // Gated delta rule (MODEL_SPEC §2.4 step 6) over one sequence's T tokens, from and into
  // `state` [n_v_heads][head_dim (v)][head_dim (k)] (rows indexed by v, contiguous over k, as
  // llama.cpp keeps it). q, k: [T][n_k_heads * head_dim], already L2-normalised; q not yet
  // scaled (the op applies 1/sqrt(head_dim)); v: [T][n_v_heads * head_dim]; g (log decay, < 0)
  // and beta: [T][n_v_heads]. Value head h reads q/k head h % n_k_heads (GGUF tiled order).
  // out: [T][n_v_heads * head_dim]. T > 1 may use the chunked form of MODEL_SPEC §3.
  virtual KernelStatus GatedDeltaRule(const Mat& q, const Mat& k, const Mat& v, const Mat& g,
                                      const Mat& beta, int64_t n_k_heads, int64_t n_v_heads,
                                      int64_t head_dim, float* state, Mat& out) = 0;
  // y = rmsnorm(x) * w * silu(z) per row (rows are (token, head) pairs; w.n == x.cols).
  virtual KernelStatus GatedRmsNorm(const Mat& x, Vec w, const Mat& z, float eps, Mat& y) = 0;
  // g = ssm_a[h] * softplus(alpha + dt_bias[h]); beta = sigmoid(beta), in place, [T][n_v_heads].
  virtual KernelStatus DeltaNetGates(Mat& alpha_to_g, Mat& beta, Vec ssm_a, Vec dt_bias) = 0;
  // A decode step of one DeltaNet layer for B sequences of one token each (DeltaNetStep says
  // what it computes, the layouts and the aliasing rules). The default composes the ops above
  // through the host pointer arrays, exactly as the engine does for longer runs; a GPU backend
  // fuses it into a launch or two over the whole batch.
  virtual KernelStatus DeltaNetDecodeStep(const DeltaNetStep& step);

  // --- mixture of experts ---------------------------------------------------------------
  // Softmax over each row of `logits` [T][n_expert], top-k, weights renormalised to sum 1
  // (the sum clamped at >= 6.1e-5). ids and weights are [T][k] in backend memory.
  virtual KernelStatus MoeRoute(const Mat& logits, int64_t k, int32_t* ids, float* weights) = 0;
  // y[t] = sum_j weights[t][j] * down_e(silu(gate_e(x[t])) * up_e(x[t])), e = ids[t][j], over
  // the expert stacks gate/up {in, ff, n_expert} and down {ff, in, n_expert} (each with its own
  // matrix_stride). Tokens are grouped by expert so each expert's weights are read once per
  // batch. An id < 0 is skipped (the expert is computed elsewhere: the other tier of
  // worker/engine/expert_tiers.h); a row whose ids are all < 0 gets zeros. Ids >= the stacks'
  // count are kInvalidArgument where a backend can see them (the CPU backend). y is overwritten.
  virtual KernelStatus MoeFfn(const Mat& x, const int32_t* ids, const float* weights, int64_t k,
                              const WeightView& gate_exps, const WeightView& up_exps,
                              const WeightView& down_exps, Mat& y) = 0;

  // --- step capture (a CUDA graph per decode step) -----------------------------------------
  // A backend that can record a forward pass's ops and run them later as one unit (the CUDA
  // backend: a CUDA graph, kernels/cuda/README.md "CUDA graphs") says so here. The engine
  // (Qwen35Model::Forward) captures decode steps with it:
  //
  //   CopyToDevice(inputs); BeginStepCapture(); ops...; EndStepCapture(key);
  //   LaunchStepGraph(key); CopyToHost(results)
  //
  // While capturing (from BeginStepCapture to EndStepCapture or AbortStepCapture):
  // - every op (CopyOnDevice included) is recorded with its arguments as they are at the call:
  //   pointers, shapes and host scalars by value, host arrays (MatMulGroup's w and y,
  //   DeltaNetStep's host pointer arrays) by their contents; it returns kOk without running,
  //   or an error it detects at once (the capture is then spoilt: AbortStepCapture). Nothing
  //   is read or written in backend memory until the launch, so the caller may not use an
  //   op's result on the host before it.
  // - Allocate (an empty handle), ImportWeights (null), CopyToDevice, CopyToHost and
  //   Synchronize (kInvalidArgument) are refused, the capture staying valid: none can be part
  //   of a graph. No DeviceBuffer of the backend may be freed either (cudaFree breaks a CUDA
  //   capture). Inputs go into backend memory before BeginStepCapture.
  // One capture at a time, on the thread that drives the backend. The defaults: no support.
  virtual bool SupportsStepCapture() const { return false; }
  // kUnsupportedType without support; kInvalidArgument while a capture runs.
  virtual KernelStatus BeginStepCapture() { return KernelStatus::kUnsupportedType; }
  // Ends the capture and makes the recording the executable graph kept under `key`: in place
  // when the graph already kept there has the same sequence of ops (updated: cheap), else a
  // new one (instantiated). On failure (a spoilt capture, a graph the backend cannot build)
  // nothing recorded has run or will run, and the caller may run the same ops uncaptured.
  virtual KernelStatus EndStepCapture(uint64_t key) {
    (void)key;
    return KernelStatus::kUnsupportedType;
  }
  // Queues the graph kept under `key`: its ops run as if called now, in their order.
  virtual KernelStatus LaunchStepGraph(uint64_t key) {
    (void)key;
    return KernelStatus::kUnsupportedType;
  }
  // Ends a capture and drops its recording; nothing recorded runs. No-op when not capturing.
  virtual void AbortStepCapture() {}
  // Graphs built from scratch, recordings applied to a kept graph in place, launches.
  struct StepGraphStats {
    int64_t instantiated = 0;
    int64_t updated = 0;
    int64_t launched = 0;
  };
  virtual StepGraphStats step_graph_stats() const { return {}; }
};

// The CPU backend with `n_threads` worker threads (0: one per core).
std::unique_ptr<Backend> MakeCpuBackend(int n_threads);

}  // namespace deltaserve::kernels
