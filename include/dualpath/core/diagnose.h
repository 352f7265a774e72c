// SPDX-License-Identifier: Apache-2.0
// dpctl diagnose's rules: from what dpctl gathered (the daemon's view of each
// path, probes toward peers, the node's TCP sockets by class, its CPUs),
// which place is at fault: one path, something every rail shares (upstream),
// or the node itself (CPU, host queueing, the application), or none. Pure:
// the gathering is dpctl's (tools/dpctl/diagnose.cpp); each conclusion is
// unit-tested (tests/unit/test_diagnose.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dp {

using json = nlohmann::json;

// Thresholds of the rules.
struct DiagnoseLimits {
  double loss = 0.01;           // a rail retransmitting this share of its segments is bad
  double cpu_busy = 0.9;        // a CPU this busy is a bottleneck
  double waited = 0.5;          // a class waiting on a window or buffer this share of its time
  uint64_t unread = 64 * 1024;  // bytes received and not read, on one socket
};

// One probe of a peer over a rail (a few connects and round trips).
struct DiagnoseProbe {
  std::string peer;
  bool skipped = false;  // the rail is failed over: its fwmark is routed elsewhere
  std::string error;
  int lost = 0, sent = 0;  // connects
  std::optional<double> rtt_p50_us;
};

struct DiagnoseRail {
  std::string name;
  json health;   // path.list's "health"
  json measure;  // path.list's "measure" (null before the first sample)
  std::vector<DiagnoseProbe> probes;
};

// A class's established TCP connections of this node over the window.
struct DiagnoseClass {
  std::string name;
  int sockets = 0;
  uint64_t busy_us = 0, rwnd_limited_us = 0, sndbuf_limited_us = 0;
  uint64_t bytes_acked = 0, retrans = 0;
  uint64_t unread = 0;                  // now
  int unread_sockets = 0;               // sockets with at least DiagnoseLimits::unread unread
  std::vector<std::string> rwnd_peers;  // the peers whose window held a socket back
};

struct DiagnoseInput {
  std::vector<DiagnoseRail> rails;
  std::vector<DiagnoseClass> classes;  // those asked about (all, or --class)
  std::vector<double> cpu_busy;        // per CPU, over the window
  double seconds = 0;                  // the window
  json events = json::array();         // the daemon's events, oldest first
  std::string peer_hint = "PEER";      // the first --peer, for the next commands
  DiagnoseLimits limits;
  // Multipath classes: whether the policy has one, and the namespace's
  // connections that asked for MPTCP and fell back to TCP (ever, and over
  // the window).
  bool multipath = false;
  uint64_t mptcp_fallbacks = 0, mptcp_fallbacks_window = 0;
};

struct RailVerdict {
  std::string name;
  bool bad = false;
  std::vector<std::string> evidence;
};

struct Diagnosis {
  std::string kind;  // upstream, path, node, none
  std::string summary;
  std::string path;  // kind path: the bad rails' names
  std::vector<std::string> evidence, next;
  std::vector<std::string> scheduler;  // kind path: what dualpath did about it
  std::vector<RailVerdict> rails;
};

// Whether a rail carries traffic by its health ("up" or "ramping"): a rail
// that does not is not probed (its fwmark is routed over another rail).
bool rail_usable(const json& health);
Diagnosis diagnose(const DiagnoseInput& in);
// {"kind", "summary", ["path", "scheduler"], "evidence", "next"}
json conclusion_json(const Diagnosis& d);

}  // namespace dp
