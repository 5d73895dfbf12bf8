#include "kernels/sim/sim_backend.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "kernels/sim/internal/sim_op_guard.h"

namespace deltaserve::kernels {
namespace {

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

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

}  // namespace

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

}  // namespace deltaserve::kernels
