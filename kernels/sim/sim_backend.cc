#include "kernels/sim/sim_backend.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <utility>


namespace deltaserve::kernels {
namespace {


size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// "name[i]" for an argument of an array.
std::string Indexed(const char* name, int64_t i) {
  return std::string(name) + "[" + std::to_string(i) + "]";
}

// "argument 'arg' (0x..., N bytes)".
std::string ArgText(std::string_view arg, const void* p, size_t bytes) {
  char address[32];
  std::snprintf(address, sizeof(address), "%p", p);
  return "argument '" + std::string(arg) + "' (" + address + ", " + std::to_string(bytes) +
         " bytes)";
}

// Every live region of every SimDeviceBackend, for the SIGSEGV reporter: a signal handler may
// not lock, so a fixed table of atomics it can scan.
struct FaultSlot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};  // the data's end; the guard page follows
  std::atomic<uintptr_t> map_begin{0};
  std::atomic<uintptr_t> map_end{0};  // guard page included
};
constexpr size_t kFaultSlots = 1 << 14;
FaultSlot g_fault_slots[kFaultSlots];

void RegisterFaultSlot(uintptr_t begin, uintptr_t end, uintptr_t map_begin, uintptr_t map_end) {
  for (FaultSlot& s : g_fault_slots) {
    uintptr_t expected = 0;
    if (s.map_begin.compare_exchange_strong(expected, map_begin)) {
      s.begin = begin;
      s.end = end;
      s.map_end = map_end;
      return;
    }
  }
  // Table full: the reporter just knows less; the protection itself still works.
}

void UnregisterFaultSlot(uintptr_t map_begin) {
  for (FaultSlot& s : g_fault_slots) {
    if (s.map_begin.load() == map_begin) {
      s.begin = s.end = s.map_end = 0;
      s.map_begin = 0;
      return;
    }
  }
}

void OnFault(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  char line[256];
  int n = 0;
  for (const FaultSlot& s : g_fault_slots) {
    const uintptr_t mb = s.map_begin.load(), me = s.map_end.load();
    if (mb == 0 || addr < mb || addr >= me) continue;
    const uintptr_t b = s.begin.load(), e = s.end.load();
    if (addr >= b && addr < e) {
      n = std::snprintf(line, sizeof(line),
                        "SimDeviceBackend: the host touched backend memory outside an op: "
                        "address 0x%" PRIxPTR " is byte %" PRIuPTR " of an allocation of %" PRIuPTR
                        " bytes\n",
                        addr, addr - b, e - b);
    } else {
      n = std::snprintf(line, sizeof(line),
                        "SimDeviceBackend: access at 0x%" PRIxPTR ", %" PRIdPTR
                        " bytes past the end of an allocation of %" PRIuPTR " bytes\n",
                        addr, static_cast<intptr_t>(addr - e), e - b);
    }
    break;
  }
  if (n > 0) {
    const ssize_t ignored = write(STDERR_FILENO, line, static_cast<size_t>(n));
    (void)ignored;
  }
  // Die of the signal as without the reporter.
  signal(sig, SIG_DFL);
  raise(sig);
}

// Bytes a matrix view addresses: rows - 1 strides and one row of cols floats.
size_t MatBytes(const Mat& m) {
  if (m.rows <= 0 || m.cols <= 0 || m.stride < m.cols) return 0;
  return static_cast<size_t>((m.rows - 1) * m.stride + m.cols) * sizeof(float);
}

size_t WeightBytes(const WeightView& w) {
  if (w.in <= 0 || w.out <= 0 || w.count <= 0) return 0;
  return w.StackBytes();  // a stack's matrices may lie matrix_stride apart (expert slots)
}

size_t PoolBytes(const KvPool& pool, const PagedKvView& kv) {
  if (pool.n_pages <= 0 || kv.page_tokens <= 0) return 0;
  return static_cast<size_t>(pool.n_pages) * static_cast<size_t>(kv.page_tokens) * pool.row_bytes;
}

}  // namespace

struct SimDeviceBackend::Region {
  uint8_t* map = nullptr;  // mapping start
  size_t map_bytes = 0;    // body + guard page
  size_t body_bytes = 0;   // the part that opens for ops
  uint8_t* data = nullptr;
  size_t bytes = 0;  // what Allocate was asked for
  uint64_t id = 0;
  int open = 0;  // ops that opened it now

  void Protect(int prot) const {
    if (mprotect(map, body_bytes, prot) != 0) std::perror("SimDeviceBackend: mprotect");
  }
};

// Checks the arguments of one op, then opens their regions for its duration. A failed check
// records a violation and makes the op return kInvalidArgument without running.
class SimDeviceBackend::OpGuard {
 public:
  OpGuard(SimDeviceBackend& b, std::string_view op) : b_(b), op_(op) {
    if (b_.options_.single_thread && std::this_thread::get_id() != b_.owner_) {
      std::lock_guard<std::mutex> lock(b_.mu_);
      b_.RecordLocked(op_ +
                      ": called from a thread other than the one that made the backend (a "
                      "Backend is driven by one engine thread)");
    }
    b_.call_mu_.lock();
  }
  ~OpGuard() {
    {
      std::lock_guard<std::mutex> lock(b_.mu_);
      for (Region* r : opened_) {
        if (--r->open == 0) r->Protect(PROT_NONE);
      }
    }
    b_.call_mu_.unlock();
  }

  // `p` .. p + bytes must be backend memory (nothing to check for 0 bytes; a null pointer with
  // bytes is a violation too).
  void Device(std::string_view arg, const void* p, size_t bytes) {
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lock(b_.mu_);
    Region* r = p == nullptr ? nullptr : b_.FindLocked(p, bytes);
    if (r == nullptr) {
      ok_ = false;
      b_.RecordLocked(op_ + ": " + ArgText(arg, p, bytes) + " is not backend memory" +
                      (b_.OverlapsLocked(p, bytes) ? " (it runs past the end of an allocation)"
                                                   : ""));
      return;
    }
    regions_.insert(r);
  }
  // `p` .. p + bytes must be host memory (a copy's host side).
  void Host(std::string_view arg, const void* p, size_t bytes) {
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lock(b_.mu_);
    if (b_.OverlapsLocked(p, bytes)) {
      ok_ = false;
      b_.RecordLocked(op_ + ": " + ArgText(arg, p, bytes) +
                      " is backend memory, where host memory is expected");
    }
  }
  void MatArg(std::string_view arg, const Mat& m) { Device(arg, m.data, MatBytes(m)); }
  void WeightArg(std::string_view arg, const WeightView& w) { Device(arg, w.data, WeightBytes(w)); }
  void VecArg(std::string_view arg, const Vec& v) {
    Device(arg, v.data, v.data == nullptr || v.n <= 0 ? 0 : v.n * sizeof(float));
  }
  void KvArg(const PagedKvView& kv) {
    Device("kv.k pool", kv.k.data, PoolBytes(kv.k, kv));
    Device("kv.v pool", kv.v.data, PoolBytes(kv.v, kv));
    Device("kv.page_table", kv.page_table,
           kv.n_pages > 0 ? static_cast<size_t>(kv.n_pages) * sizeof(int32_t) : 0);
  }

  // Copies `bytes` of backend memory at `p` into `dst` without opening the region for the op
  // (what a kernel reads to find further arguments: the decode step's pointer arrays); false
  // when [p, p + bytes) is not backend memory (Device reports that).
  bool Read(const void* p, size_t bytes, void* dst) {
    std::lock_guard<std::mutex> lock(b_.mu_);
    Region* r = p == nullptr ? nullptr : b_.FindLocked(p, bytes);
    if (r == nullptr) return false;
    if (r->open == 0) r->Protect(PROT_READ);
    std::memcpy(dst, p, bytes);
    if (r->open == 0) r->Protect(PROT_NONE);
    return true;
  }
  // A failed check of the op's own (recorded as "<op>: <what>").
  void Fail(std::string_view what) {
    std::lock_guard<std::mutex> lock(b_.mu_);
    ok_ = false;
    b_.RecordLocked(op_ + ": " + std::string(what));
  }

  // True when every check passed; then opens the regions for the op.
  bool Open() {
    if (!ok_) return false;
    std::lock_guard<std::mutex> lock(b_.mu_);
    for (Region* r : regions_) {
      if (r->open++ == 0) r->Protect(PROT_READ | PROT_WRITE);
      opened_.push_back(r);
    }
    ++b_.ops_run_;
    return true;
  }

 private:
  SimDeviceBackend& b_;
  std::string op_;
  bool ok_ = true;
  std::set<Region*> regions_;
  std::vector<Region*> opened_;
};

SimDeviceBackend::SimDeviceBackend(const SimDeviceOptions& options)
    : options_(options), cpu_(MakeCpuBackend(options.n_threads)) {}

SimDeviceBackend::~SimDeviceBackend() {
  // Buffers must not outlive their backend; whatever is still mapped goes with it.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [addr, r] : regions_) {
    UnregisterFaultSlot(reinterpret_cast<uintptr_t>(r->map));
    munmap(r->map, r->map_bytes);
  }
  regions_.clear();
}

void SimDeviceBackend::InstallFaultReporter() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = &OnFault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
  });
}

std::vector<std::string> SimDeviceBackend::violations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return violations_;
}

uint64_t SimDeviceBackend::violation_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return violation_count_;
}

int64_t SimDeviceBackend::refused_allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

int64_t SimDeviceBackend::ops_run() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_run_;
}

int64_t SimDeviceBackend::copies_to_host() const {
  std::lock_guard<std::mutex> lock(mu_);
  return copies_to_host_;
}

size_t SimDeviceBackend::live_allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return regions_.size();
}

uint64_t SimDeviceBackend::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

uint64_t SimDeviceBackend::peak_allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

bool SimDeviceBackend::IsBackendMemory(const void* p, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  return FindLocked(p, bytes) != nullptr;
}

SimDeviceBackend::Region* SimDeviceBackend::FindLocked(const void* p, size_t bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = regions_.upper_bound(a);
  if (it == regions_.begin()) return nullptr;
  --it;
  Region* r = it->second.get();
  const auto begin = reinterpret_cast<uintptr_t>(r->data);
  if (a < begin || a - begin > r->bytes || bytes > r->bytes - (a - begin)) return nullptr;
  return r;
}

bool SimDeviceBackend::OverlapsLocked(const void* p, size_t bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t e = a + std::max<size_t>(bytes, 1);
  auto it = regions_.upper_bound(a);
  if (it != regions_.begin()) {
    const Region* r = std::prev(it)->second.get();
    if (reinterpret_cast<uintptr_t>(r->data) + std::max<size_t>(r->bytes, 1) > a) return true;
  }
  return it != regions_.end() && it->first < e;
}

void SimDeviceBackend::RecordLocked(std::string what) {
  ++violation_count_;
  if (options_.print_violations && violation_count_ <= 20) {
    std::fprintf(stderr, "sim device: %s%s\n", what.c_str(),
                 violation_count_ == 20 ? " (further violations are counted, not printed)" : "");
  }
  // An engine bug repeats once per layer and pass: the first ones say enough.
  if (violations_.size() < 10000) violations_.push_back(std::move(what));
}

void SimDeviceBackend::FreeRegion(void* owner, void* data) {
  auto* self = static_cast<SimDeviceBackend*>(owner);
  std::lock_guard<std::mutex> lock(self->mu_);
  auto it = self->regions_.find(reinterpret_cast<uintptr_t>(data));
  if (it == self->regions_.end()) return;
  UnregisterFaultSlot(reinterpret_cast<uintptr_t>(it->second->map));
  munmap(it->second->map, it->second->map_bytes);
  self->allocated_ -= it->second->bytes;
  self->regions_.erase(it);
}

DeviceBuffer SimDeviceBackend::Allocate(size_t bytes) {
  static std::atomic<uint64_t> next_id{1};
  {
    // The capacity counts what was asked for, as the plan does (a GPU allocator's rounding is
    // not modelled). Checked and then counted under one lock below, so two threads cannot both
    // take the last bytes.
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.capacity_bytes != 0 &&
        (bytes > options_.capacity_bytes || allocated_ > options_.capacity_bytes - bytes)) {
      ++refused_;
      return {};
    }
    allocated_ += bytes;  // reserved now; undone if the mapping fails
    peak_ = std::max(peak_, allocated_);
  }
  const size_t page = PageSize();
  // 64-byte aligned, at least 64 bytes (an empty handle means out of memory), ending right
  // before the guard page.
  const size_t data_bytes = std::max<size_t>(RoundUp(bytes, 64), 64);
  const size_t body = RoundUp(data_bytes, page);
  void* map =
      mmap(nullptr, body + page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) {
    std::lock_guard<std::mutex> lock(mu_);
    allocated_ -= bytes;
    ++refused_;
    return {};
  }
  auto r = std::make_unique<Region>();
  r->map = static_cast<uint8_t*>(map);
  r->map_bytes = body + page;
  r->body_bytes = body;
  r->data = r->map + body - data_bytes;
  r->bytes = bytes;
  r->id = next_id++;
  void* data = r->data;
  RegisterFaultSlot(
      reinterpret_cast<uintptr_t>(r->data), reinterpret_cast<uintptr_t>(r->data) + bytes,
      reinterpret_cast<uintptr_t>(r->map), reinterpret_cast<uintptr_t>(r->map) + r->map_bytes);
  std::lock_guard<std::mutex> lock(mu_);
  regions_[reinterpret_cast<uintptr_t>(data)] = std::move(r);
  return DeviceBuffer(data, bytes, &FreeRegion, this);
}

KernelStatus SimDeviceBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  OpGuard g(*this, "CopyToDevice");
  g.Device("dst", dst, bytes);
  g.Host("src", src, bytes);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  if (bytes != 0) std::memcpy(dst, src, bytes);
  return KernelStatus::kOk;
}

KernelStatus SimDeviceBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  OpGuard g(*this, "CopyToHost");
  g.Host("dst", dst, bytes);
  g.Device("src", src, bytes);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++copies_to_host_;
  }
  if (bytes != 0) std::memcpy(dst, src, bytes);
  return KernelStatus::kOk;
}

KernelStatus SimDeviceBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  OpGuard g(*this, "CopyOnDevice");
  g.Device("dst", dst, bytes);
  g.Device("src", src, bytes);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->CopyOnDevice(dst, src, bytes);
}

const void* SimDeviceBackend::ImportWeights(const void* host, size_t bytes,
                                               DeviceBuffer& storage) {
  storage = Allocate(bytes);
  if (storage.data() == nullptr) return nullptr;
  if (CopyToDevice(storage.data(), host, bytes) != KernelStatus::kOk) {
    storage = {};
    return nullptr;
  }
  return storage.data();
}

KernelStatus SimDeviceBackend::Synchronize() {
  OpGuard g(*this, "Synchronize");
  g.Open();
  return KernelStatus::kOk;
}

KernelStatus SimDeviceBackend::MatMul(const WeightView& w, const Mat& x, Mat& y) {
  OpGuard g(*this, "MatMul");
  g.WeightArg("w", w);
  g.MatArg("x", x);
  g.MatArg("y", y);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->MatMul(w, x, y);
}

KernelStatus SimDeviceBackend::MatMulGroup(const WeightView* w, int n, const Mat& x,
                                                       Mat* y) {
  OpGuard g(*this, "MatMulGroup");
  g.MatArg("x", x);
  for (int i = 0; i < n && w != nullptr && y != nullptr; ++i) {
    g.WeightArg(Indexed("w", i), w[i]);
    g.MatArg(Indexed("y", i), y[i]);
  }
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->MatMulGroup(w, n, x, y);
}

KernelStatus SimDeviceBackend::GetRows(const WeightView& table, const int32_t* ids,
                                                   int64_t n, Mat& out) {
  OpGuard g(*this, "GetRows");
  g.WeightArg("table", table);
  g.Device("ids", ids, n > 0 ? static_cast<size_t>(n) * sizeof(int32_t) : 0);
  g.MatArg("out", out);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->GetRows(table, ids, n, out);
}

KernelStatus SimDeviceBackend::RmsNorm(const Mat& x, Vec w, float eps, Mat& y) {
  OpGuard g(*this, "RmsNorm");
  g.MatArg("x", x);
  g.VecArg("w", w);
  g.MatArg("y", y);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->RmsNorm(x, w, eps, y);
}

KernelStatus SimDeviceBackend::L2Norm(Mat& x, int64_t group, float eps) {
  OpGuard g(*this, "L2Norm");
  g.MatArg("x", x);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->L2Norm(x, group, eps);
}

KernelStatus SimDeviceBackend::Copy(const Mat& src, Mat& dst) {
  OpGuard g(*this, "Copy");
  g.MatArg("src", src);
  g.MatArg("dst", dst);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->Copy(src, dst);
}

KernelStatus SimDeviceBackend::Add(Mat& x, const Mat& y) {
  OpGuard g(*this, "Add");
  g.MatArg("x", x);
  g.MatArg("y", y);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->Add(x, y);
}

KernelStatus SimDeviceBackend::SwiGlu(const Mat& gate, const Mat& up, Mat& out) {
  OpGuard g(*this, "SwiGlu");
  g.MatArg("gate", gate);
  g.MatArg("up", up);
  g.MatArg("out", out);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->SwiGlu(gate, up, out);
}

KernelStatus SimDeviceBackend::MulSigmoid(Mat& x, const Mat& gate) {
  OpGuard g(*this, "MulSigmoid");
  g.MatArg("x", x);
  g.MatArg("gate", gate);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->MulSigmoid(x, gate);
}

KernelStatus SimDeviceBackend::RopeNeox(Mat& x, const int32_t* positions,
                                                    int64_t n_heads, int64_t n_rot,
                                                    float freq_base) {
  OpGuard g(*this, "RopeNeox");
  g.MatArg("x", x);
  const int64_t tokens = n_heads > 0 ? x.rows / n_heads : 0;
  g.Device("positions", positions, tokens > 0 ? static_cast<size_t>(tokens) * sizeof(int32_t) : 0);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->RopeNeox(x, positions, n_heads, n_rot, freq_base);
}

KernelStatus SimDeviceBackend::StoreKv(const Mat& k, const Mat& v,
                                                   const PagedKvView& kv,
                                                   int64_t first_pos) {
  OpGuard g(*this, "StoreKv");
  g.MatArg("k", k);
  g.MatArg("v", v);
  g.KvArg(kv);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->StoreKv(k, v, kv, first_pos);
}

KernelStatus SimDeviceBackend::PagedAttention(const Mat& q,
                                                          const PagedKvView& kv,
                                                          int64_t n_past, int64_t n_head,
                                                          int64_t n_head_kv, float scale,
                                                          Mat& out) {
  OpGuard g(*this, "PagedAttention");
  g.MatArg("q", q);
  g.KvArg(kv);
  g.MatArg("out", out);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->PagedAttention(q, kv, n_past, n_head, n_head_kv, scale, out);
}

KernelStatus SimDeviceBackend::CausalConv1dSilu(const Mat& x, const float* w,
                                                            int64_t kernel, float* state, Mat& y) {
  OpGuard g(*this, "CausalConv1dSilu");
  g.MatArg("x", x);
  const size_t channels = x.cols > 0 ? static_cast<size_t>(x.cols) : 0;
  g.Device("w", w, kernel > 0 ? channels * static_cast<size_t>(kernel) * sizeof(float) : 0);
  g.Device("state", state,
           kernel > 1 ? channels * static_cast<size_t>(kernel - 1) * sizeof(float) : 0);
  g.MatArg("y", y);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->CausalConv1dSilu(x, w, kernel, state, y);
}

KernelStatus SimDeviceBackend::GatedDeltaRule(const Mat& q, const Mat& k, const Mat& v,
                                                          const Mat& gate, const Mat& beta,
                                                          int64_t n_k_heads, int64_t n_v_heads,
                                                          int64_t head_dim, float* state,
                                                          Mat& out) {
  OpGuard g(*this, "GatedDeltaRule");
  g.MatArg("q", q);
  g.MatArg("k", k);
  g.MatArg("v", v);
  g.MatArg("g", gate);
  g.MatArg("beta", beta);
  g.Device("state", state,
           n_v_heads > 0 && head_dim > 0
               ? static_cast<size_t>(n_v_heads * head_dim * head_dim) * sizeof(float)
               : 0);
  g.MatArg("out", out);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->GatedDeltaRule(q, k, v, gate, beta, n_k_heads, n_v_heads, head_dim, state, out);
}

KernelStatus SimDeviceBackend::GatedRmsNorm(const Mat& x, Vec w, const Mat& z,
                                                        float eps, Mat& y) {
  OpGuard g(*this, "GatedRmsNorm");
  g.MatArg("x", x);
  g.VecArg("w", w);
  g.MatArg("z", z);
  g.MatArg("y", y);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->GatedRmsNorm(x, w, z, eps, y);
}

KernelStatus SimDeviceBackend::DeltaNetGates(Mat& alpha_to_g, Mat& beta, Vec ssm_a,
                                                         Vec dt_bias) {
  OpGuard g(*this, "DeltaNetGates");
  g.MatArg("alpha_to_g", alpha_to_g);
  g.MatArg("beta", beta);
  g.VecArg("ssm_a", ssm_a);
  g.VecArg("dt_bias", dt_bias);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->DeltaNetGates(alpha_to_g, beta, ssm_a, dt_bias);
}

KernelStatus SimDeviceBackend::DeltaNetDecodeStep(const DeltaNetStep& s) {
  OpGuard g(*this, "DeltaNetDecodeStep");
  g.MatArg("qkv", s.qkv);
  g.MatArg("z", s.z);
  g.MatArg("alpha", s.alpha);
  g.MatArg("beta", s.beta);
  g.MatArg("out", s.out);
  const size_t channels = s.qkv.cols > 0 ? static_cast<size_t>(s.qkv.cols) : 0;
  g.Device("conv_w", s.conv_w,
           s.conv_kernel > 0 ? channels * static_cast<size_t>(s.conv_kernel) * sizeof(float) : 0);
  g.VecArg("ssm_a", s.ssm_a);
  g.VecArg("dt_bias", s.dt_bias);
  g.VecArg("norm", s.norm);
  const int64_t b_n = std::max<int64_t>(s.qkv.rows, 0);
  const size_t array_bytes = static_cast<size_t>(b_n) * sizeof(float*);
  g.Device("conv_states", s.conv_states, array_bytes);
  g.Device("delta_states", s.delta_states, array_bytes);
  g.Host("conv_states_host", s.conv_states_host, array_bytes);
  g.Host("delta_states_host", s.delta_states_host, array_bytes);
  // The pointers inside the arrays, as the GPU kernels will dereference them.
  const size_t conv_bytes =
      s.conv_kernel > 1 ? channels * static_cast<size_t>(s.conv_kernel - 1) * sizeof(float) : 0;
  const size_t delta_bytes = s.n_v_heads > 0 && s.head_dim > 0
                                 ? static_cast<size_t>(s.n_v_heads * s.head_dim * s.head_dim) *
                                       sizeof(float)
                                 : 0;
  std::vector<float*> conv(static_cast<size_t>(b_n)), delta(static_cast<size_t>(b_n));
  if (b_n > 0 && g.Read(s.conv_states, array_bytes, conv.data()) &&
      g.Read(s.delta_states, array_bytes, delta.data())) {
    for (int64_t b = 0; b < b_n; ++b) {
      g.Device(Indexed("conv_states", b), conv[b], conv_bytes);
      g.Device(Indexed("delta_states", b), delta[b], delta_bytes);
      if (s.conv_states_host != nullptr && s.delta_states_host != nullptr &&
          (s.conv_states_host[b] != conv[b] || s.delta_states_host[b] != delta[b])) {
        g.Fail("state pointer " + std::to_string(b) +
               " in backend memory differs from its host copy (stale arrays)");
      }
    }
  }
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->DeltaNetDecodeStep(s);
}

KernelStatus SimDeviceBackend::MoeRoute(const Mat& logits, int64_t k, int32_t* ids,
                                                    float* weights) {
  OpGuard g(*this, "MoeRoute");
  g.MatArg("logits", logits);
  const size_t n = logits.rows > 0 && k > 0 ? static_cast<size_t>(logits.rows * k) : 0;
  g.Device("ids", ids, n * sizeof(int32_t));
  g.Device("weights", weights, n * sizeof(float));
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->MoeRoute(logits, k, ids, weights);
}

KernelStatus SimDeviceBackend::MoeFfn(const Mat& x, const int32_t* ids,
                                                  const float* weights, int64_t k,
                                                  const WeightView& gate_exps,
                                                  const WeightView& up_exps,
                                                  const WeightView& down_exps, Mat& y) {
  OpGuard g(*this, "MoeFfn");
  g.MatArg("x", x);
  const size_t n = x.rows > 0 && k > 0 ? static_cast<size_t>(x.rows * k) : 0;
  g.Device("ids", ids, n * sizeof(int32_t));
  g.Device("weights", weights, n * sizeof(float));
  g.WeightArg("gate_exps", gate_exps);
  g.WeightArg("up_exps", up_exps);
  g.WeightArg("down_exps", down_exps);
  g.MatArg("y", y);
  if (!g.Open()) return KernelStatus::kInvalidArgument;
  return cpu_->MoeFfn(x, ids, weights, k, gate_exps, up_exps, down_exps, y);
}

}  // namespace deltaserve::kernels
