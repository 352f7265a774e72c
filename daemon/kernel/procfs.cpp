// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/procfs.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace dp {

namespace {

std::string slurp(const char* path, bool first_line) {
  std::ifstream in(path);
  if (first_line) {
    std::string s;
    std::getline(in, s);
    return s;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<CpuTime> parse_cpu_times(const std::string& proc_stat, bool all) {
  std::vector<CpuTime> out;
  std::istringstream lines(proc_stat);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4) continue;
    bool sum = line[3] == ' ';
    if (sum != all || (!sum && !std::isdigit(static_cast<unsigned char>(line[3])))) continue;
    std::istringstream ss(line.substr(line.find(' ')));
    uint64_t v, total = 0, idle = 0;
    for (int i = 0; ss >> v; ++i) {
      total += v;
      if (i == 3 || i == 4) idle += v;  // idle and iowait are not busy
    }
    out.push_back({total - idle, total});
  }
  return out;
}

std::vector<CpuTime> cpu_times(bool all) {
  return parse_cpu_times(slurp("/proc/stat", false), all);
}

std::vector<double> cpu_busy(const std::vector<CpuTime>& a, const std::vector<CpuTime>& b) {
  std::vector<double> out;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    double t = static_cast<double>(b[i].total - a[i].total);
    out.push_back(t > 0 ? static_cast<double>(b[i].busy - a[i].busy) / t : 0);
  }
  return out;
}

EphemeralPorts read_ephemeral_ports() {
  return parse_ephemeral_ports(slurp("/proc/sys/net/ipv4/ip_local_port_range", true),
                               slurp("/proc/sys/net/ipv4/ip_local_reserved_ports", true));
}

uint64_t parse_mptcp_fallbacks(const std::string& netstat) {
  // a header line and a value line per group
  std::istringstream lines(netstat);
  std::string names, values;
  while (std::getline(lines, names) && std::getline(lines, values)) {
    if (names.rfind("MPTcpExt:", 0) != 0) continue;
    std::istringstream n(names), v(values);
    std::string key, val;
    uint64_t sum = 0;
    while (n >> key && v >> val)
      if (key == "MPCapableFallbackACK" || key == "MPCapableFallbackSYNACK")
        sum += std::strtoull(val.c_str(), nullptr, 10);
    return sum;
  }
  return 0;
}

uint64_t mptcp_fallbacks() { return parse_mptcp_fallbacks(slurp("/proc/net/netstat", false)); }

int tcp_retries2() {
  std::string v = slurp("/proc/sys/net/ipv4/tcp_retries2", true);
  if (v.empty() || !std::isdigit(static_cast<unsigned char>(v[0]))) return 15;
  return std::stoi(v);
}

}  // namespace dp
