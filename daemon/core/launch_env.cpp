// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/launch_env.h"

#include <fmt/format.h>

namespace dp {

namespace {

std::string join(const std::vector<std::string>& v, const char* sep = ",") {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

}  // namespace

Result<json> launch_env(const std::string& klass, std::optional<uint8_t> dscp,
                        const std::vector<EnvRail>& rails) {
  if (rails.empty())
    return DP_ERROR("class {} has no rail with a share now (every rail down?)", klass);
  std::vector<std::string> hcas, ifnames, ucx;
  std::optional<int> gid;
  bool gid_same = true;
  json rails_out = json::array();
  for (auto& r : rails) {
    if (r.rdma.empty())
      return DP_ERROR(
          "path {} (interface {}) of class {} has no RDMA device: RDMA traffic "
          "cannot be placed on it (its netdev is no RoCE port's)",
          r.path, r.interface, klass);
    // one port per rail: the first (devices and ports in order)
    const EnvRdmaPort& p = r.rdma.front();
    std::string hca = fmt::format("{}:{}", p.device, p.port);
    hcas.push_back(hca);
    ifnames.push_back(r.interface);
    ucx.push_back(hca);
    if (!p.gid_index || (gid && *gid != *p.gid_index)) gid_same = false;
    if (p.gid_index && !gid) gid = p.gid_index;
    rails_out.push_back({{"path", r.path},
                         {"interface", r.interface},
                         {"share", r.share},
                         {"rdma_device", p.device},
                         {"rdma_port", p.port},
                         {"gid_index", p.gid_index ? json(*p.gid_index) : json(nullptr)}});
  }
  for (auto& i : ifnames) ucx.push_back(i);
  json env = json::object();
  // "=": exact names (without it NCCL matches prefixes: mlx5_1 would take mlx5_10)
  // (fmt, not "=" + string: GCC 12 at -O3 warns -Wrestrict on that, a false positive)
  env["NCCL_IB_HCA"] = fmt::format("={}", join(hcas));
  env["NCCL_SOCKET_IFNAME"] = fmt::format("={}", join(ifnames));
  env["UCX_NET_DEVICES"] = join(ucx);
  json notes = json::array();
  if (gid && gid_same) {
    env["NCCL_IB_GID_INDEX"] = std::to_string(*gid);
    env["UCX_IB_GID_INDEX"] = std::to_string(*gid);
  } else {
    notes.push_back(
        "no RoCE v2 GID index common to the rails was found: NCCL_IB_GID_INDEX is left to the "
        "framework");
  }
  if (dscp) {
    // the traffic class byte: DSCP in its upper six bits
    std::string tc = std::to_string(static_cast<int>(*dscp) << 2);
    env["NCCL_IB_TC"] = tc;
    env["UCX_IB_TRAFFIC_CLASS"] = tc;
  } else {
    notes.push_back("the class has no dscp: RoCE traffic keeps the fabric's default traffic class");
  }
  if (rails.size() > 1)
    notes.push_back(fmt::format(
        "the class is split over {} rails now: the framework spreads its connections over the "
        "listed devices by its own rules, not by the class's shares",
        rails.size()));
  notes.push_back(
      "these settings place connections when the framework makes them; dualpath cannot move RDMA "
      "traffic afterwards, and a failover of the rail does not move it (its RDMA bytes still "
      "count in the rail's load)");
  return json{{"class", klass}, {"rails", rails_out}, {"env", env}, {"notes", notes}};
}

std::string env_as_shell(const json& env) {
  std::string out;
  for (auto& [k, v] : env.items()) {
    std::string val = v.get<std::string>(), q;
    for (char ch : val) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    out += fmt::format("export {}='{}'\n", k, q);
  }
  return out;
}

}  // namespace dp
