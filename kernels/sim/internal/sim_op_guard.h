// Internal to the sim device (sim_backend.h): a region of backend memory and the per-op
// argument check (OpGuard) that sim_backend.cc (memory, copies) and sim_backend_ops.cc (the
// kernels, run by the CPU backend) share, with the byte counts of the views they check.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kernels/sim/sim_backend.h"

namespace deltaserve::kernels {
namespace sim_internal {

// "name[i]" for an argument of an array.
inline std::string Indexed(const char* name, int64_t i) {
  return std::string(name) + "[" + std::to_string(i) + "]";
}

// "argument 'arg' (0x..., N bytes)".
inline std::string ArgText(std::string_view arg, const void* p, size_t bytes) {
  char address[32];
  std::snprintf(address, sizeof(address), "%p", p);
  return "argument '" + std::string(arg) + "' (" + address + ", " + std::to_string(bytes) +
         " bytes)";
}

// Bytes a matrix view addresses: rows - 1 strides and one row of cols floats.
inline size_t MatBytes(const Mat& m) {
  if (m.rows <= 0 || m.cols <= 0 || m.stride < m.cols) return 0;
  return static_cast<size_t>((m.rows - 1) * m.stride + m.cols) * sizeof(float);
}

inline size_t WeightBytes(const WeightView& w) {
  if (w.in <= 0 || w.out <= 0 || w.count <= 0) return 0;
  return w.StackBytes();  // a stack's matrices may lie matrix_stride apart (expert slots)
}

inline size_t PoolBytes(const KvPool& pool, const PagedKvView& kv) {
  if (pool.n_pages <= 0 || kv.page_tokens <= 0) return 0;
  return static_cast<size_t>(pool.n_pages) * static_cast<size_t>(kv.page_tokens) * pool.row_bytes;
}

}  // namespace sim_internal

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
      b_.RecordLocked(op_ + ": " + sim_internal::ArgText(arg, p, bytes) + " is not backend memory" +
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
      b_.RecordLocked(op_ + ": " + sim_internal::ArgText(arg, p, bytes) +
                      " is backend memory, where host memory is expected");
    }
  }
  void MatArg(std::string_view arg, const Mat& m) { Device(arg, m.data, sim_internal::MatBytes(m)); }
  void WeightArg(std::string_view arg, const WeightView& w) { Device(arg, w.data, sim_internal::WeightBytes(w)); }
  void VecArg(std::string_view arg, const Vec& v) {
    Device(arg, v.data, v.data == nullptr || v.n <= 0 ? 0 : v.n * sizeof(float));
  }
  void KvArg(const PagedKvView& kv) {
    Device("kv.k pool", kv.k.data, sim_internal::PoolBytes(kv.k, kv));
    Device("kv.v pool", kv.v.data, sim_internal::PoolBytes(kv.v, kv));
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

}  // namespace deltaserve::kernels
