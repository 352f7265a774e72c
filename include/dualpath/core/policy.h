// SPDX-License-Identifier: Apache-2.0
// A node's policy: its paths (rails), traffic classes, and the settings of the
// scheduler and health checks. Parsed from TOML with toml++ and validated
// completely before anything is applied. Pure: no I/O except reading the file.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dp {

struct IpAddr {
  int family = 0;  // AF_INET or AF_INET6
  std::array<uint8_t, 16> bytes{};
  std::string str() const;
  static std::optional<IpAddr> parse(const std::string& text);
  // The IPv4 address an IPv4-mapped IPv6 one (::ffff:a.b.c.d, what a
  // dual-stack socket shows for an IPv4 peer) stands for; else itself.
  IpAddr unmapped() const;
  bool operator==(const IpAddr&) const = default;
};

struct Prefix {
  IpAddr addr;
  int len = 0;
  std::string str() const;
  static std::optional<Prefix> parse(const std::string& text);  // "default" = 0.0.0.0/0
  bool contains(const IpAddr& a) const;
  bool operator==(const Prefix&) const = default;
};

enum class Proto : uint8_t { Tcp = 6, Udp = 17 };
enum class PortMatch { Any, Src, Dst };
enum class ClassKind { LatencySensitive, Elastic };
// How the rails reach a peer (README, "Topologies"):
//   Shared: both rails reach the peer's address and accept the node's source
//     address (a routed fabric with node service addresses, BGP to the host,
//     one L2 domain). A flow may move between rails mid-stream: redirects and
//     flowlets.
//   Separate: each rail is its own network and a peer has one address per
//     rail. A connection is placed when it is made (connect-time placement)
//     and never redirected.
enum class Topology { Shared, Separate };
const char* to_string(Topology t);

const char* to_string(Proto p);
const char* to_string(PortMatch m);
const char* to_string(ClassKind k);

struct PortRange {
  Proto proto = Proto::Tcp;
  uint16_t lo = 0;
  uint16_t hi = 0;
  int line = 0;  // where it was written, for diagnostics
  int column = 0;
  std::string str() const;                     // "tcp:50000-50999"
  bool operator==(const PortRange& o) const {  // where it was written is no difference
    return proto == o.proto && lo == o.lo && hi == o.hi;
  }
};

// A class's cgroup rule: a cgroup v2 directory (relative to the cgroup v2
// root) or a systemd unit, whose subtree's sockets belong to the class.
struct CgroupSpec {
  enum class Kind { Path, Unit };
  Kind kind = Kind::Path;
  std::string text;  // "/system.slice/vllm.service" or "vllm.service"
  int line = 0;
  int column = 0;
  std::string str() const;  // "cgroup /system.slice/vllm.service", "unit vllm.service"
  bool operator==(const CgroupSpec& o) const { return kind == o.kind && text == o.text; }
};

// Syntax checks of the policy's cgroup paths and unit names: "" when
// valid, else why not.
std::string cgroup_path_problem(const std::string& path);
std::string unit_name_problem(const std::string& unit);

struct PathSpec {
  std::string name;
  std::string interface;
  std::optional<IpAddr> gateway;   // IPv4 next hop (or peer) on this rail
  std::optional<IpAddr> gateway6;  // IPv6 next hop (or peer) on this rail
  std::optional<IpAddr> source;    // preferred IPv4 source for the table's routes
  std::optional<IpAddr> source6;
  uint64_t capacity_bps = 0;
  uint32_t table = 0;
  uint32_t fwmark = 0;
  std::vector<Prefix> routes;
  std::optional<IpAddr> bfd_peer;  // BFD peer on this rail; default: gateway, else gateway6
  // Separate topology: the rail's networks, where its peers' addresses live
  // (the first IPv4 and the first IPv6 prefix of routes).
  std::optional<Prefix> network() const;
  std::optional<Prefix> network6() const;
  const std::optional<IpAddr>& bfd_address() const {
    return bfd_peer ? bfd_peer : gateway ? gateway : gateway6;
  }
  bool operator==(const PathSpec&) const = default;
};

// The minimum RTO of latency-sensitive classes unless a policy says otherwise.
inline constexpr std::chrono::milliseconds kDefaultLatencyRtoMin{10};

struct ClassSpec {
  std::string name;
  ClassKind kind = ClassKind::Elastic;
  int priority = 0;  // 0 (lowest) .. 7 (highest)
  std::string prefer;
  std::optional<uint32_t> mark;
  std::vector<PortRange> ports;
  std::vector<CgroupSpec> cgroups;  // keys cgroups and units, in that order
  PortMatch match = PortMatch::Any;
  bool pinned = false;                   // the scheduler never moves a pinned class
  std::optional<uint8_t> dscp;           // stamped on its packets (0-63)
  std::optional<uint32_t> skb_priority;  // skb->priority: a tc class id or 0-7
  // TCP's minimum RTO for the class's connections (sockops); 0: the kernel's
  // 200 ms. Default: 10 ms for latency-sensitive classes, the kernel's else.
  std::chrono::nanoseconds rto_min{0};
  // The longest TCP's backoff waits between retransmissions (TCP_RTO_MAX_MS,
  // 1 s to 120 s); 0: the kernel's 120 s. After every rail was down, the
  // connections find the first rail back within it.
  std::chrono::nanoseconds rto_max{0};
  // MPTCP with a subflow per rail (core/multipath.h); needs cgroups or units.
  bool multipath = false;
  // Capacity kept for the class on a rail that carries it (core/police.h):
  // a rate in bits per second, or a share of the rail's capacity; 0: none.
  uint64_t reserve_bps = 0;
  double reserve_share = 0;
  // The reserve on a rail of this capacity, in bits per second.
  uint64_t reserve_on(uint64_t capacity_bps) const {
    return reserve_bps ? reserve_bps
                       : static_cast<uint64_t>(reserve_share * static_cast<double>(capacity_bps));
  }
  bool operator==(const ClassSpec&) const = default;
};

// The cell size of [scheduler] placement = "cells" without a flowcell.
constexpr uint64_t kDefaultFlowcell = 16u << 10;
// The flowlet_gap of [scheduler] placement = "bursts" (the default) without
// one: the idle time that ends a burst.
constexpr std::chrono::nanoseconds kDefaultBurstGap = std::chrono::milliseconds(4);
// The flowlet_gap of placement = "flowlets" or "cells" without one.
constexpr std::chrono::nanoseconds kDefaultFlowletGap = std::chrono::microseconds(500);

struct SchedulerSettings {
  bool adaptive = true;  // mode = "adaptive" | "static" (never moves a class)
  double load_threshold = 0.60;
  std::chrono::nanoseconds latency_tolerance = std::chrono::microseconds(500);
  std::chrono::nanoseconds dead_zone = std::chrono::microseconds(200);
  std::chrono::nanoseconds cooldown = std::chrono::milliseconds(200);
  double ewma_weight = 0.2;
  std::chrono::nanoseconds tick = std::chrono::milliseconds(50);
  std::chrono::nanoseconds flowlet_gap = kDefaultBurstGap;
  bool adaptive_flowlet_gap = true;  // raise the gap to the rails' RTT difference
  // Split elastic classes (shared topology) are placed in cells of this many
  // bytes, each where it would finish first; 0: flowlets and shares instead.
  // Off by default: see docs/ARCHITECTURE.md, "Flowcells", for what the lab
  // measured.
  uint64_t flowcell = 0;
  // How split elastic classes (shared topology) are placed: "flowlets" (by
  // the shares, a flowlet at a time), "cells" (flowcell, above; a flowcell
  // size alone also means cells) or "bursts" (a whole burst at a time, where
  // the daemon's plan finishes a round of bursts soonest: abi.h,
  // DP_CELL_F_BURSTS; the default, with peak_window and hold below, as
  // dp-lab bench measured best). Cells: flowcell != 0; bursts: this.
  bool burst_placement = true;
  // a cell may overtake the flow's own bytes on another rail ("any"), or
  // changes rail only when it cannot ("keep", the default)
  bool flowcell_any_order = false;
  // Spill decisions look at the highest per-tick utilisation and demand of
  // this window; a spilled class returns only when the peak of `hold` fits.
  // 0: the smoothed rates (ewma_weight) now.
  std::chrono::nanoseconds peak_window = std::chrono::milliseconds(100);
  std::chrono::nanoseconds hold = std::chrono::seconds(1);
  // A spilled elastic class returns to its preferred rail only when the rail
  // would stay this far below load_threshold with the class's demand back.
  double return_margin = 0.10;
  bool operator==(const SchedulerSettings&) const = default;
};

struct HealthSettings {
  bool bfd = true;  // one BFD session per rail toward its bfd_peer (or gateway)
  std::chrono::nanoseconds interval = std::chrono::milliseconds(500);
  int multiplier = 3;
  std::chrono::nanoseconds holddown = std::chrono::minutes(5);
  std::vector<int> ramp{10, 25, 50, 100};  // percent of the former share, a step per interval
  std::chrono::nanoseconds ramp_interval = std::chrono::seconds(30);
  // Which classes leave a rail that data-path evidence made suspect, before
  // BFD confirms: every class (their flows there are in RTO backoff too), or
  // only the latency-sensitive ones.
  bool suspect_moves_elastic = true;
  // BFD authentication (RFC 5880 6.7.4): 0 none, 4 keyed SHA1, 5 meticulous
  // keyed SHA1 (the RFC's Auth Type); the key, shared with every rail's BFD
  // peer, is read from key_file when the policy is applied.
  uint8_t bfd_auth = 0;
  uint8_t bfd_auth_key_id = 1;
  std::string bfd_auth_key_file;
  bool operator==(const HealthSettings&) const = default;
};

struct MeasurementSettings {
  std::string cgroup;  // cgroup v2 directory for sockops; "" = the cgroup v2 mount
  std::chrono::nanoseconds window = std::chrono::seconds(10);  // percentiles and loss
  std::string rdma_sysfs = "/sys/class/infiniband";
  bool operator==(const MeasurementSettings&) const = default;
};

// What dpctl events keeps: the newest `keep` events (decisions, health
// transitions, reloads). Each costs a few hundred bytes of the daemon's memory.
struct EventSettings {
  int keep = 1024;
  bool operator==(const EventSettings&) const = default;
};

struct MetricsSettings {
  std::string listen = "127.0.0.1:9464";  // Prometheus endpoint; "" disables it
  bool operator==(const MetricsSettings&) const = default;
};

// The probe responder (dpctl validate and probe from a peer node): TCP
// listeners on each rail's source addresses, one port per rail (port + the
// rail's index), that answer only addresses the policy routes to.
inline constexpr uint16_t kResponderPort = 7862;  // [responder] port's default
struct ResponderSettings {
  bool enable = true;
  uint16_t port = kResponderPort;
  int max_sessions = 4;                                              // concurrent; more are refused
  std::chrono::nanoseconds max_duration = std::chrono::seconds(10);  // per session
  // Who may connect; empty: the paths' routes, networks, gateways and BFD peers.
  std::vector<Prefix> allow;
  bool operator==(const ResponderSettings&) const = default;
};

// [qos]: what the pure ACKs of every class are stamped with (TCP segments
// that only acknowledge), in place of their class's dscp and skb_priority.
// Unset: a class's ACKs are stamped as its data is.
struct QosSettings {
  std::optional<uint8_t> ack_dscp;
  std::optional<uint32_t> ack_skb_priority;
  bool operator==(const QosSettings&) const = default;
};

// [nccl]: the class of NCCL's traffic through dualpath's net plugin
// (dualpath-nccl(7)), by the communicator's traffic class (NCCL's
// ncclConfig_t.trafficClass) and by the operation NCCL announces.
struct NcclSettings {
  std::map<int, std::string> traffic_class;      // traffic_class.N = "CLASS"
  std::map<std::string, std::string> operation;  // operation.OP = "CLASS"
  bool operator==(const NcclSettings&) const = default;
};
// The operations [nccl] may name (NCCL's collectives, and send/recv).
inline constexpr std::string_view kNcclOperations[] = {
    "alltoall", "allreduce", "allgather", "reducescatter", "broadcast", "reduce", "sendrecv"};

struct RoutingSettings {
  uint32_t rule_priority = 10000;  // the service owns [rule_priority, rule_priority + 99]
  uint8_t route_protocol = 200;    // rtnetlink protocol tag of our rules and routes
  // The skb->mark bits dualpath uses (path fwmarks, class marks) and its
  // redirect bit (DP_MARK_REDIRECTED by default), inside them; other bits
  // are others' (Calico, Cilium, kube-proxy) and never read or changed.
  uint32_t mark_mask = 0xffffffffu;
  uint32_t redirect_mark = 0x40000000u;
  bool operator==(const RoutingSettings&) const = default;
};

// A peer's addresses written out (the separate topology, for fabrics whose
// hosts are not numbered alike on every rail): a connection to any of them
// placed on a path goes to the peer's address of the same family there.
struct PeerSpec {
  std::string name;                                 // a label for diagnostics; "" if none
  std::vector<std::optional<IpAddr>> addr4, addr6;  // by path index
  int line = 0;
  bool operator==(const PeerSpec& o) const {  // where it was written is no difference
    return name == o.name && addr4 == o.addr4 && addr6 == o.addr6;
  }
};

struct Policy {
  std::string file;
  std::string hash;  // content hash, 16 hex digits (FNV-1a 64 of the file's bytes)
  std::string text;  // the file's bytes, as loaded (dpctl policy show/diff/apply)
  std::string node;  // instance name: pins live under <bpffs>/dualpath/<node>
  // Set when dpctl policy render wrote the policy from a cluster description
  // (dualpath-cluster(5)); empty otherwise.
  std::string cluster, group, group_hash;
  std::optional<std::string> default_class;
  RoutingSettings routing;
  SchedulerSettings scheduler;
  Topology topology = Topology::Shared;
  HealthSettings health;
  MeasurementSettings measurement;
  MetricsSettings metrics;
  EventSettings events;
  ResponderSettings responder;
  QosSettings qos;
  NcclSettings nccl;
  std::vector<PathSpec> paths;
  std::vector<ClassSpec> classes;
  std::vector<PeerSpec> peers;  // [[peer]]

  const PathSpec* path(const std::string& name) const;
  // The peer table's entry holding `a`, and the path index `a` is on.
  const PeerSpec* peer_of(const IpAddr& a, size_t* path = nullptr) const;
  const ClassSpec* klass(const std::string& name) const;
  // A class asks for multipath (its TCP sockets are made MPTCP).
  bool has_multipath() const;
  int path_index(const std::string& name) const;   // -1 if none
  int class_index(const std::string& name) const;  // -1 if none
  // The class of a socket, in the datapath's order: its mark (a path's
  // fwmark pins the socket to that path: no class), then its
  // destination port, then its source port, then default_class; -1 if none.
  // (The datapath tries the socket's cgroup after the ports; this does not.)
  int classify(Proto proto, uint16_t sport, uint16_t dport, uint32_t mark) const;
  // Who the responder answers: responder.allow, or what the paths reach.
  std::vector<Prefix> responder_allowed() const;
  // The same node with the same settings: everything but file, hash and
  // text (how it was written: spelling, defaults written out, comments).
  bool same_settings(const Policy& o) const;
};

// The responder's ports from [responder] port on: one per path, and while a
// class is multipath one more per path after those, whose listeners answer
// MPTCP (dpctl validate's check of multipath classes).
size_t responder_ports(const Policy& p);

struct Diagnostic {
  std::string file;
  int line = 0;
  int column = 0;
  std::string message;
  std::string str() const;  // "file:line:column: error: message"
};

struct PolicyLoad {
  std::optional<Policy> policy;  // set only when there are no diagnostics
  std::vector<Diagnostic> errors;
  bool ok() const { return policy.has_value(); }
};

PolicyLoad load_policy_file(const std::string& path);
PolicyLoad parse_policy(const std::string& text, const std::string& name);

std::string content_hash(const std::string& bytes);

// A node, path, class, cluster or group name: 1-31 characters of a-z, 0-9,
// '-' or '_', starting with a letter or digit.
bool valid_name(const std::string& s);
// "" for a valid name, else the refusal: `what` name "s" must be ...
std::string name_problem(std::string_view what, const std::string& s);

// Levenshtein distance, and the name in `names` nearest to `word` (case
// ignored) when it is near enough to be what was meant (at most 2 edits, 1
// for words of 4 letters or fewer): the "did you mean" of policy errors.
size_t edit_distance(std::string_view a, std::string_view b);
std::optional<std::string> nearest_name(std::string_view word,
                                        const std::vector<std::string>& names);

// The host's ephemeral port range and reserved ports
// (net.ipv4.ip_local_port_range, ip_local_reserved_ports).
struct EphemeralPorts {
  unsigned lo = 0, hi = 0;  // 0, 0: unknown
  std::vector<bool> reserved = std::vector<bool>(65536, false);
};
// Parses the two sysctls' text ("32768\t60999", "50000-50999,53000").
EphemeralPorts parse_ephemeral_ports(const std::string& range, const std::string& reserved);
// (kernel/procfs.h read_ephemeral_ports reads them from /proc/sys.)
// Warnings, not errors: class port ranges that source ports can match
// inside the ephemeral range and not reserved (any connection that draws
// such a source port is classified by accident), each with the sysctl that
// reserves them.
std::vector<std::string> ephemeral_port_warnings(const Policy& p, const EphemeralPorts& e);

}  // namespace dp
