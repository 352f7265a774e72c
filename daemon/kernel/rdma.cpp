// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/rdma.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace dp {
namespace {

// A sysfs counter file: one unsigned number and a newline.
std::optional<uint64_t> read_u64(const fs::path& p) {
  std::ifstream in(p);
  uint64_t v = 0;
  if (!(in >> v)) return std::nullopt;
  return v;
}

std::string read_line(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  return s;
}

}  // namespace

Result<std::vector<RdmaPort>> discover_rdma_sysfs(const std::string& root,
                                                  const std::vector<std::string>& devices) {
  std::vector<RdmaPort> out;
  std::error_code ec;
  if (!fs::exists(root, ec)) return out;  // no RDMA subsystem: no devices
  std::vector<std::string> names = devices;
  if (names.empty()) {
    for (auto& e : fs::directory_iterator(root, ec)) names.push_back(e.path().filename().string());
    if (ec) return DP_SYS_ERROR(ec.value(), "listing RDMA devices in {} failed", root);
  }
  std::sort(names.begin(), names.end());
  for (auto& dev : names) {
    fs::path ports = fs::path(root) / dev / "ports";
    std::vector<int> nums;
    for (auto& e : fs::directory_iterator(ports, ec)) {
      try {
        nums.push_back(std::stoi(e.path().filename().string()));
      } catch (const std::exception&) {
      }
    }
    std::sort(nums.begin(), nums.end());
    for (int n : nums) {
      RdmaPort p{dev, n, {}};
      fs::path ndevs = ports / std::to_string(n) / "gid_attrs" / "ndevs";
      // GID entries of a RoCE port name its netdev; the first non-empty one wins
      std::vector<fs::path> entries;
      for (auto& e : fs::directory_iterator(ndevs, ec)) entries.push_back(e.path());
      // numerically (GCC 12 at -O3 takes `"0" + name` for an overlapping copy:
      // -Wrestrict, a known false positive)
      auto index = [](const fs::path& e) { return std::strtol(e.filename().c_str(), nullptr, 10); };
      std::sort(entries.begin(), entries.end(),
                [&](const fs::path& a, const fs::path& b) { return index(a) < index(b); });
      for (auto& e : entries) {
        std::string nd = read_line(e);
        if (!nd.empty()) {
          p.netdev = nd;
          break;
        }
      }
      out.push_back(std::move(p));
    }
  }
  return out;
}

Result<RdmaCounters> read_rdma_counters(const std::string& root, const RdmaPort& port) {
  fs::path base = fs::path(root) / port.device / "ports" / std::to_string(port.port);
  fs::path c = base / "counters", hw = base / "hw_counters";
  RdmaCounters r;
  auto xmit = read_u64(c / "port_xmit_data");
  auto rcv = read_u64(c / "port_rcv_data");
  if (!xmit || !rcv)
    return DP_SYS_ERROR(ENOENT, "RDMA device {} port {} has no data counters (gone?)", port.device,
                        port.port);
  r.tx_bytes = *xmit * 4;  // port_xmit_data and port_rcv_data count 4-byte words
  r.rx_bytes = *rcv * 4;
  r.tx_packets = read_u64(c / "port_xmit_packets").value_or(0);
  r.rx_packets = read_u64(c / "port_rcv_packets").value_or(0);
  r.cnp_sent = read_u64(hw / "np_cnp_sent").value_or(0);
  r.cnp_handled = read_u64(hw / "rp_cnp_handled").value_or(0);
  r.ecn_marked = read_u64(hw / "np_ecn_marked_roce_packets").value_or(0);
  r.out_of_sequence = read_u64(hw / "out_of_sequence").value_or(0);
  r.seq_errors = read_u64(hw / "packet_seq_err").value_or(0);
  r.local_ack_timeouts = read_u64(hw / "local_ack_timeout_err").value_or(0);
  return r;
}

void add_rdma(RdmaCounters& into, const RdmaCounters& c) {
  into.tx_bytes += c.tx_bytes;
  into.rx_bytes += c.rx_bytes;
  into.tx_packets += c.tx_packets;
  into.rx_packets += c.rx_packets;
  into.cnp_sent += c.cnp_sent;
  into.cnp_handled += c.cnp_handled;
  into.ecn_marked += c.ecn_marked;
  into.out_of_sequence += c.out_of_sequence;
  into.seq_errors += c.seq_errors;
  into.local_ack_timeouts += c.local_ack_timeouts;
}

std::optional<int> roce_v2_gid_index(const std::string& root, const RdmaPort& port) {
  fs::path base = fs::path(root) / port.device / "ports" / std::to_string(port.port);
  std::error_code ec;
  std::vector<int> found;
  for (auto& e : fs::directory_iterator(base / "gid_attrs" / "types", ec)) {
    const std::string name = e.path().filename().string();  // `end` points into it
    char* end = nullptr;
    long i = std::strtol(name.c_str(), &end, 10);
    if (!end || *end || i < 0 || i > 65535) continue;
    if (read_line(e.path()) != "RoCE v2") continue;
    if (read_line(base / "gid_attrs" / "ndevs" / std::to_string(i)) != port.netdev) continue;
    found.push_back(static_cast<int>(i));
  }
  if (found.empty()) return std::nullopt;
  std::sort(found.begin(), found.end());
  for (int i : found)  // an IPv4-mapped GID: 0000:0000:0000:0000:0000:ffff:....
    if (read_line(base / "gids" / std::to_string(i)).rfind("0000:0000:0000:0000:0000:ffff:", 0) ==
        0)
      return i;
  return found.front();
}

}  // namespace dp
