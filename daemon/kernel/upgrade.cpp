// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/upgrade.h"

#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

namespace dp {

namespace {

bool is_array(uint32_t t) { return t == BPF_MAP_TYPE_ARRAY || t == BPF_MAP_TYPE_PERCPU_ARRAY; }
bool is_hash(uint32_t t) {
  return t == BPF_MAP_TYPE_HASH || t == BPF_MAP_TYPE_LRU_HASH || t == BPF_MAP_TYPE_PERCPU_HASH ||
         t == BPF_MAP_TYPE_LRU_PERCPU_HASH;
}
bool is_percpu(uint32_t t) {
  return t == BPF_MAP_TYPE_PERCPU_ARRAY || t == BPF_MAP_TYPE_PERCPU_HASH ||
         t == BPF_MAP_TYPE_LRU_PERCPU_HASH;
}

// A map's value as the syscalls see it: one value, or one 8-byte-aligned
// value per possible CPU.
struct Shape {
  size_t value, stride, cpus;
  size_t bytes() const { return stride * cpus; }
};
Shape shape(const bpf_map_info& i) {
  if (!is_percpu(i.type)) return {i.value_size, i.value_size, 1};
  size_t stride = (i.value_size + 7u) & ~size_t{7};
  return {i.value_size, stride, static_cast<size_t>(std::max(1, libbpf_num_possible_cpus()))};
}

// The common prefix of each value, zero beyond it.
void convert(const uint8_t* from, const Shape& f, uint8_t* to, const Shape& t) {
  std::memset(to, 0, t.bytes());
  size_t n = std::min(f.value, t.value);
  for (size_t c = 0; c < std::min(f.cpus, t.cpus); ++c)
    std::memcpy(to + c * t.stride, from + c * f.stride, n);
}

std::vector<std::vector<uint8_t>> hash_keys(int fd, size_t key_size, size_t limit) {
  std::vector<std::vector<uint8_t>> keys;
  std::vector<uint8_t> k(key_size), next(key_size);
  const void* prev = nullptr;
  while (keys.size() < limit && bpf_map_get_next_key(fd, prev, next.data()) == 0) {
    keys.push_back(next);
    k = next;
    prev = k.data();
  }
  return keys;
}

Result<bpf_map_info> info_of(int fd, const std::string& name) {
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0)
    return DP_SYS_ERROR(errno, "reading the definition of map {} failed", name);
  return info;
}

}  // namespace

Result<LayoutUpgrade> LayoutUpgrade::begin(std::vector<StaleMap> stale) {
  LayoutUpgrade u;
  for (auto& s : stale) {
    Map m;
    m.m = std::move(s);
    auto oi = info_of(m.m.old.get(), m.m.name);
    if (!oi) return oi.error();
    auto ni = info_of(m.m.fresh, m.m.name);
    if (!ni) return ni.error();
    m.old_info = *oi;
    m.new_info = *ni;
    const auto &o = m.old_info, &n = m.new_info;
    Shape fs = shape(o), ts = shape(n);
    std::vector<uint8_t> from(fs.bytes()), to(ts.bytes());
    size_t copied = 0;
    bool same_kind =
        is_percpu(o.type) == is_percpu(n.type) && o.key_size == n.key_size &&
        ((is_array(o.type) && is_array(n.type)) || (is_hash(o.type) && is_hash(n.type)));
    if (same_kind && is_array(o.type)) {
      uint32_t count = std::min(o.max_entries, n.max_entries);
      if (is_percpu(o.type)) m.snapshot.resize(static_cast<size_t>(count) * fs.bytes());
      for (uint32_t k = 0; k < count; ++k) {
        if (bpf_map_lookup_elem(m.m.old.get(), &k, from.data()) != 0) continue;
        if (is_percpu(o.type)) std::memcpy(&m.snapshot[k * fs.bytes()], from.data(), fs.bytes());
        convert(from.data(), fs, to.data(), ts);
        if (bpf_map_update_elem(m.m.fresh, &k, to.data(), BPF_ANY) != 0)
          return DP_SYS_ERROR(errno, "copying entry {} of {} failed", k, m.m.name);
        ++copied;
      }
      m.copied = true;
    } else if (same_kind) {
      for (auto& key : hash_keys(m.m.old.get(), o.key_size, o.max_entries)) {
        if (bpf_map_lookup_elem(m.m.old.get(), key.data(), from.data()) != 0) continue;  // gone
        convert(from.data(), fs, to.data(), ts);
        // a smaller table: the LRU evicts, a plain hash refuses (E2BIG)
        if (bpf_map_update_elem(m.m.fresh, key.data(), to.data(), BPF_ANY) != 0) break;
        m.keys.push_back(std::move(key));
        ++copied;
      }
      m.copied = true;
    }
    std::string line;
    if (!m.copied)
      line = fmt::format(
          "{}: not carried over (type {} -> {}, key {} -> {} bytes): the new map starts empty",
          m.m.name, o.type, n.type, o.key_size, n.key_size);
    else
      line =
          fmt::format("{}: {} entries carried over (value {} -> {} bytes, {} -> {} entries)",
                      m.m.name, copied, o.value_size, n.value_size, o.max_entries, n.max_entries);
    spdlog::info("upgrade: {}", line);
    u.report_.push_back(std::move(line));
    u.maps_.push_back(std::move(m));
  }
  return u;
}

Result<void> LayoutUpgrade::finish(const std::string& pin_dir,
                                   const std::vector<std::string>& keep) {
  for (auto& m : maps_) {
    const auto &o = m.old_info, &n = m.new_info;
    Shape fs = shape(o), ts = shape(n);
    if (m.copied && is_array(o.type) && is_percpu(o.type)) {
      // counters: add what the old programs counted since the copy
      std::vector<uint8_t> now(fs.bytes()), cur(ts.bytes());
      size_t words = std::min(o.value_size, n.value_size) / 8;
      uint32_t count = std::min(o.max_entries, n.max_entries);
      for (uint32_t k = 0; k < count; ++k) {
        if (bpf_map_lookup_elem(m.m.old.get(), &k, now.data()) != 0 ||
            bpf_map_lookup_elem(m.m.fresh, &k, cur.data()) != 0)
          continue;
        const uint8_t* snap = &m.snapshot[k * fs.bytes()];
        for (size_t c = 0; c < std::min(fs.cpus, ts.cpus); ++c)
          for (size_t w = 0; w < words; ++w) {
            uint64_t a, b, x;
            std::memcpy(&a, now.data() + c * fs.stride + w * 8, 8);
            std::memcpy(&b, snap + c * fs.stride + w * 8, 8);
            std::memcpy(&x, cur.data() + c * ts.stride + w * 8, 8);
            x += a - b;
            std::memcpy(cur.data() + c * ts.stride + w * 8, &x, 8);
          }
        (void)bpf_map_update_elem(m.m.fresh, &k, cur.data(), BPF_ANY);
      }
    } else if (m.copied && is_hash(o.type)) {
      // entries the old programs made or removed since the copy
      auto now = hash_keys(m.m.old.get(), o.key_size, o.max_entries);
      std::set<std::vector<uint8_t>> present(now.begin(), now.end());
      std::vector<uint8_t> from(fs.bytes()), to(ts.bytes());
      for (auto& key : now)
        if (bpf_map_lookup_elem(m.m.old.get(), key.data(), from.data()) == 0) {
          convert(from.data(), fs, to.data(), ts);
          (void)bpf_map_update_elem(m.m.fresh, key.data(), to.data(), BPF_NOEXIST);
        }
      for (auto& key : m.keys)
        if (!present.count(key)) (void)bpf_map_delete_elem(m.m.fresh, key.data());
    }
    // the new map takes the old one's place
    if (::unlink(m.m.pin.c_str()) != 0 && errno != ENOENT)
      return DP_SYS_ERROR(errno, "removing the old pin {} failed", m.m.pin);
    if (bpf_obj_pin(m.m.fresh, m.m.pin.c_str()) != 0)
      return DP_SYS_ERROR(errno, "pinning the new {} at {} failed", m.m.name, m.m.pin);
  }
  // maps and programs an earlier build had and this one has not (a link's
  // pin removed detaches its program)
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(pin_dir, ec)) {
    std::string name = e.path().filename().string();
    bool ours =
        name.rfind("dp_", 0) == 0 || name.rfind("prog_", 0) == 0 || name.rfind("link_", 0) == 0;
    if (ours && std::find(keep.begin(), keep.end(), name) == keep.end()) {
      spdlog::info("upgrade: {} is not part of this build's datapath; its pin is removed", name);
      ::unlink(e.path().c_str());
    }
  }
  maps_.clear();
  return {};
}

std::vector<std::string> LayoutUpgrade::maps() const {
  std::vector<std::string> out;
  for (auto& m : maps_) out.push_back(m.m.name);
  return out;
}

}  // namespace dp
