// SPDX-License-Identifier: Apache-2.0
// BPF maps from C++: a map fd with its name, typed by its key and value so
// that a write of the wrong struct does not compile, and every error names
// the map and the operation ("update of map dp_rails failed: ...").
#pragma once

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "dualpath/core/result.h"

namespace dp {

// A map's fd and name, untyped: for code that handles every map alike (the
// layout upgrade). Everything else takes a Map<K, V>.
class BpfMap {
 public:
  BpfMap() = default;
  BpfMap(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  int fd() const { return fd_; }
  const std::string& name() const { return name_; }

 protected:
  Result<void> update_raw(const void* key, const void* value, uint64_t flags) const;
  Result<void> lookup_raw(const void* key, void* value) const;
  Result<void> remove_raw(const void* key) const;  // ENOENT is not an error

 private:
  int fd_ = -1;
  std::string name_;
};

template <class K, class V>
class Map : public BpfMap {
 public:
  using Key = K;
  using Value = V;
  using BpfMap::BpfMap;

  Result<void> update(const K& key, const V& value, uint64_t flags = BPF_ANY) const {
    return update_raw(&key, &value, flags);
  }
  Result<void> lookup(const K& key, V* value) const { return lookup_raw(&key, value); }
  Result<V> get(const K& key) const {
    V v{};
    DP_TRY(lookup_raw(&key, &v));
    return v;
  }
  Result<void> remove(const K& key) const { return remove_raw(&key); }

  // Every key (a hash map's, in the kernel's order).
  std::vector<K> keys() const {
    std::vector<K> out;
    K k{}, next{};
    const void* prev = nullptr;
    while (bpf_map_get_next_key(fd(), prev, &next) == 0) {
      out.push_back(next);
      k = next;
      prev = &k;
    }
    return out;
  }

  // Where a sweep over a hash map stands between reads: the kernel's batch
  // token (a bucket), so a sweep goes on correctly while entries come and go.
  struct Cursor {
    uint32_t token = 0;
    bool started = false;
  };

  // Calls each(key, value) for about `budget` entries (whole batches) from
  // where `c` stands; returns true when the map's end was reached (c starts
  // over). A large flow table is read a slice per tick this way, not whole.
  template <class F>
  bool sweep(Cursor& c, size_t budget, F&& each) const {
    constexpr uint32_t kBatch = 1024;
    std::vector<K> ks(kBatch);
    std::vector<V> vs(kBatch);
    size_t read = 0;
    while (read < budget) {
      uint32_t n = kBatch;
      int rc = bpf_map_lookup_batch(fd(), c.started ? &c.token : nullptr, &c.token, ks.data(),
                                    vs.data(), &n, nullptr);
      int err = rc ? errno : 0;
      if (rc && err != ENOENT) {
        // no batch operations (an older kernel): one key at a time, whole
        if (!c.started && (err == EINVAL || err == 524 /* ENOTSUPP */ || err == EOPNOTSUPP)) {
          for (const K& k : keys()) {
            V v{};
            if (lookup_raw(&k, &v)) each(k, v);
          }
        }
        c = {};
        return true;
      }
      for (uint32_t i = 0; i < n; ++i) each(ks[i], vs[i]);
      read += n;
      if (err == ENOENT) {
        c = {};
        return true;
      }
      c.started = true;
    }
    return false;
  }

  // Every entry, read in batches (one system call per batch, not two per
  // entry).
  std::vector<std::pair<K, V>> entries() const {
    std::vector<std::pair<K, V>> out;
    Cursor c;
    sweep(c, std::numeric_limits<size_t>::max(),
          [&](const K& k, const V& v) { out.emplace_back(k, v); });
    return out;
  }
};

// A per-CPU map: a lookup gives one value per possible CPU.
template <class K, class V>
class PerCpuMap : public BpfMap {
 public:
  using Key = K;
  using Value = V;
  using BpfMap::BpfMap;

  Result<std::vector<V>> lookup(const K& key) const {
    std::vector<V> out(static_cast<size_t>(libbpf_num_possible_cpus()));
    DP_TRY(lookup_raw(&key, out.data()));
    return out;
  }
  // Sets every CPU's value to `value`.
  Result<void> update(const K& key, const V& value) const {
    std::vector<V> all(static_cast<size_t>(libbpf_num_possible_cpus()), value);
    return update_raw(&key, all.data(), BPF_ANY);
  }
};

// The C++ type of a map of bpf type T with key K and value V.
template <int T, class K, class V>
struct MapOf {
  using type = Map<K, V>;
};
template <class K, class V>
struct MapOf<BPF_MAP_TYPE_PERCPU_ARRAY, K, V> {
  using type = PerCpuMap<K, V>;
};
template <class K, class V>
struct MapOf<BPF_MAP_TYPE_PERCPU_HASH, K, V> {
  using type = PerCpuMap<K, V>;
};

}  // namespace dp
