// SPDX-License-Identifier: Apache-2.0
// The policy's schema: one declaration per section (policy_schema.h). A key's
// type and range are refused by the generic reader (policy_checker.cpp); its
// `check` is a rule on its value alone; rules over several keys or sections
// are the sections' functions (policy_sections.cpp, policy_paths.cpp,
// policy_classes.cpp).
#include "dualpath/core/policy_schema.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "dualpath/core/units.h"
#include "policy_checker.h"

namespace dp::schema {

namespace {

using namespace std::chrono_literals;
using policy_parts::printable;
using std::chrono::nanoseconds;

// ADDRESS:PORT with an IPv4 address, [IPv6] or localhost, and a port 1-65535.
bool valid_listen(const std::string& v) {
  size_t colon = v.rfind(':');
  if (colon == std::string::npos || colon + 1 >= v.size() || v.size() - colon - 1 > 5) return false;
  std::string host = v.substr(0, colon), port = v.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos) return false;
  long n = std::stol(port);
  if (n < 1 || n > 65535) return false;
  if (host == "localhost") return true;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    auto a = IpAddr::parse(host.substr(1, host.size() - 2));
    return a && a->family == AF_INET6;
  }
  auto a = IpAddr::parse(host);
  return a && a->family == AF_INET;
}

Section node_section() {
  return {
      .name = "node",
      .required = true,
      .about = "the node: its name, its default class and the rails' topology",
      .keys = {
          {.name = "name",
           .type = Text{},
           .doc_type = "string",
           .required = true,
           .about = "the node's name, in events, metrics and a cluster's rendering",
           .check = [](const Value& v,
                       std::string_view) { return name_problem("node", text_of(v)); },
           .set = [](Target& t, const Value& v) { t.policy.node = text_of(v); }},
          {.name = "default_class",
           .type = Text{},
           .doc_type = "string",
           .default_value = "none",
           .about = "the class of traffic no class matches (none: such traffic is not steered)",
           .set = [](Target& t, const Value& v) { t.policy.default_class = text_of(v); }},
          {.name = "topology",
           .type = Word{{"shared", "separate"}},
           .doc_type = "string",
           .default_value = "\"shared\"",
           .about = "how the rails reach the peers",
           .hint = ": shared when both rails reach the peers' addresses, separate when each rail "
                   "is its own network",
           .set =
               [](Target& t, const Value& v) {
                 t.policy.topology = integer_of(v) == 0 ? Topology::Shared : Topology::Separate;
               }},
          {.name = "cluster",
           .type = Text{},
           .doc_type = "string",
           .default_value = "none",
           .about = "the cluster description the policy was rendered from (dpctl policy render)",
           .check = [](const Value& v,
                       std::string_view) { return name_problem("cluster", text_of(v)); },
           .set = [](Target& t, const Value& v) { t.policy.cluster = text_of(v); }},
          {.name = "group",
           .type = Text{},
           .doc_type = "string",
           .default_value = "none",
           .about = "the description's group the node is in (dpctl policy render)",
           .check = [](const Value& v,
                       std::string_view) { return name_problem("group", text_of(v)); },
           .set = [](Target& t, const Value& v) { t.policy.group = text_of(v); }},
          {.name = "group_hash",
           .type = Text{},
           .doc_type = "string",
           .default_value = "none",
           .about = "the hash of the group's settings, which the fleet's drift alert compares",
           .check =
               [](const Value& v, std::string_view) {
                 const std::string& s = text_of(v);
                 if (s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos)
                   return std::string();
                 return fmt::format(
                     "group_hash \"{}\" must be 16 hex digits (dpctl policy render writes it)",
                     printable(s));
               },
           .set = [](Target& t, const Value& v) { t.policy.group_hash = text_of(v); }},
      }};
}

Section routing_section() {
  return {.name = "routing",
          .node_settings = true,
          .about = "the policy routing rules and marks dualpath owns",
          .keys = {
              {.name = "rule_priority",
               .type = Integer{1, 32000},
               .doc_type = "integer",
               .default_value = "10000",
               .about = "the first of the 100 rule priorities dualpath owns",
               .set =
                   [](Target& t, const Value& v) {
                     t.policy.routing.rule_priority = static_cast<uint32_t>(integer_of(v));
                   }},
              {.name = "route_protocol",
               .type = Integer{5, 254},
               .doc_type = "integer",
               .default_value = "200",
               .about = "the rtnetlink protocol that tags dualpath's rules and routes",
               .set =
                   [](Target& t, const Value& v) {
                     t.policy.routing.route_protocol = static_cast<uint8_t>(integer_of(v));
                   }},
              {.name = "mark_mask",
               .type = Integer{1, kMaxU32},
               .doc_type = "integer",
               .default_value = "0xffffffff",
               .about = "the socket mark bits dualpath may use",
               .set =
                   [](Target& t, const Value& v) {
                     t.policy.routing.mark_mask = static_cast<uint32_t>(integer_of(v));
                   }},
              {.name = "redirect_mark",
               .type = Integer{1, kMaxU32},
               .doc_type = "integer",
               .default_value = "0x40000000",
               .about = "the bit that marks a packet the datapath redirected to another rail",
               .check =
                   [](const Value& v, std::string_view) {
                     auto bit = static_cast<uint32_t>(integer_of(v));
                     if (__builtin_popcount(bit) == 1) return std::string();
                     return fmt::format("redirect_mark {:#x} in [routing] must be a single bit",
                                        bit);
                   },
               .set =
                   [](Target& t, const Value& v) {
                     t.policy.routing.redirect_mark = static_cast<uint32_t>(integer_of(v));
                   }},
          }};
}

Section scheduler_section() {
  return {
      .name = "scheduler",
      .node_settings = true,
      .about = "how the adaptive scheduler decides and places",
      .keys = {
          {.name = "mode",
           .type = Word{{"adaptive", "static"}},
           .doc_type = "string",
           .default_value = "\"adaptive\"",
           .about = "adaptive moves and spills classes; static never moves one",
           .set = [](Target& t,
                     const Value& v) { t.policy.scheduler.adaptive = integer_of(v) == 0; }},
          {.name = "load_threshold",
           .type = Number{0, 1},
           .doc_type = "number",
           .default_value = "0.60",
           .about = "a rail's utilisation above which elastic classes spill",
           .set = [](Target& t,
                     const Value& v) { t.policy.scheduler.load_threshold = number_of(v); }},
          {.name = "latency_tolerance",
           .type = Duration{},
           .doc_type = "duration",
           .default_value = "\"500us\"",
           .about = "the gain a latency-sensitive class must see to move",
           .set = [](Target& t,
                     const Value& v) { t.policy.scheduler.latency_tolerance = duration_of(v); }},
          {.name = "dead_zone",
           .type = Duration{},
           .doc_type = "duration",
           .default_value = "\"200us\"",
           .about = "a latency difference inside which no class moves",
           .set = [](Target& t, const Value& v) { t.policy.scheduler.dead_zone = duration_of(v); }},
          {.name = "cooldown",
           .type = Duration{},
           .doc_type = "duration",
           .default_value = "\"200ms\"",
           .about = "at most one move per class per cooldown",
           .set = [](Target& t, const Value& v) { t.policy.scheduler.cooldown = duration_of(v); }},
          {.name = "ewma_weight",
           .type = Number{0, 1},
           .doc_type = "number",
           .default_value = "0.2",
           .about = "the weight of a new sample in the load and latency averages",
           .set = [](Target& t, const Value& v) { t.policy.scheduler.ewma_weight = number_of(v); }},
          {.name = "tick",
           .type = Duration{1ms, 1s},
           .doc_type = "duration",
           .default_value = "\"50ms\"",
           .about = "how often the daemon reads counters and decides",
           .hint = ": the daemon tells the systemd watchdog it is alive once per tick (the unit's "
                   "WatchdogSec is 10s), and health and decisions wait for it",
           .set = [](Target& t, const Value& v) { t.policy.scheduler.tick = duration_of(v); }},
          {.name = "flowlet_gap",
           .type = Duration{},
           .doc_type = "duration",
           .about = "an idle gap after which a flow may be placed anew",
           .set = [](Target& t,
                     const Value& v) { t.policy.scheduler.flowlet_gap = duration_of(v); }},
          {.name = "adaptive_flowlet_gap",
           .type = Boolean{},
           .doc_type = "boolean",
           .default_value = "true",
           .about = "raise the gap to the rails' RTT difference when it is larger",
           .set = [](Target& t,
                     const Value& v) { t.policy.scheduler.adaptive_flowlet_gap = flag_of(v); }},
          {.name = "flowcell",
           .type = Custom{},
           .doc_type = "size",
           .default_value = "0",
           .about = "the cell size of placement \"cells\"",
           .reads = "scheduler_flowcell"},
          {.name = "flowcell_order",
           .type = Word{{"keep", "any"}},
           .doc_type = "string",
           .default_value = "\"keep\"",
           .about = "whether a flow's cells may arrive out of order",
           .set =
               [](Target& t, const Value& v) {
                 t.policy.scheduler.flowcell_any_order = integer_of(v) == 1;
               }},
          {.name = "peak_window",
           .type = Duration{0ns, 10s},
           .doc_type = "duration",
           .default_value = "\"100ms\"",
           .about = "the window of the rails' peak utilisation that spills follow",
           .set = [](Target& t,
                     const Value& v) { t.policy.scheduler.peak_window = duration_of(v); }},
          {.name = "hold",
           .type = Duration{0ns, 10min},
           .doc_type = "duration",
           .default_value = "\"1s\"",
           .about = "how long a spill holds after the load that made it",
           .set = [](Target& t, const Value& v) { t.policy.scheduler.hold = duration_of(v); }},
          {.name = "return_margin",
           .type = Number{0, 1},
           .doc_type = "number",
           .default_value = "0.10",
           .about = "how far below load_threshold a spilled class's preferred rail must stay "
                    "with the class back before it returns",
           .set = [](Target& t,
                     const Value& v) { t.policy.scheduler.return_margin = number_of(v); }},
          {.name = "placement",
           .type = Word{{"flowlets", "cells", "bursts"}},
           .doc_type = "string",
           .default_value = "\"bursts\"",
           .about = "what the datapath places on a rail: flowlets, cells or whole bursts",
           .set = [](Target& t,
                     const Value& v) { t.policy.scheduler.burst_placement = integer_of(v) == 2; }},
      }};
}

Section health_section() {
  return {.name = "health",
          .node_settings = true,
          .about = "path health: BFD, hold-down and the ramp back",
          .keys = {
              {.name = "bfd",
               .type = Boolean{},
               .doc_type = "boolean",
               .default_value = "true",
               .about = "one BFD session per rail toward its bfd_peer or gateway",
               .set = [](Target& t, const Value& v) { t.policy.health.bfd = flag_of(v); }},
              {.name = "bfd_auth",
               .type = Word{{"none", "keyed-sha1", "meticulous-keyed-sha1"}},
               .doc_type = "string",
               .default_value = "\"none\"",
               .about = "how BFD packets are authenticated (RFC 5880 6.7.4)",
               .set =
                   [](Target& t, const Value& v) {
                     constexpr uint8_t kType[] = {0, 4, 5};
                     t.policy.health.bfd_auth = kType[integer_of(v)];
                   }},
              {.name = "bfd_auth_key_id",
               .type = Integer{0, 255},
               .doc_type = "integer",
               .default_value = "1",
               .about = "the authentication key's ID, the same at both ends",
               .set =
                   [](Target& t, const Value& v) {
                     t.policy.health.bfd_auth_key_id = static_cast<uint8_t>(integer_of(v));
                   }},
              {.name = "bfd_auth_key_file",
               .type = Text{},
               .doc_type = "string",
               .default_value = "none",
               .about = "the file that holds the authentication key (1 to 20 bytes)",
               .set = [](Target& t,
                         const Value& v) { t.policy.health.bfd_auth_key_file = text_of(v); }},
              {.name = "interval",
               .type = Duration{10ms, 60s},
               .doc_type = "duration",
               .default_value = "\"500ms\"",
               .about = "the BFD transmit interval",
               .set = [](Target& t, const Value& v) { t.policy.health.interval = duration_of(v); }},
              {.name = "multiplier",
               .type = Integer{1, 255},
               .doc_type = "integer",
               .default_value = "3",
               .about = "intervals without a BFD packet before a rail is down",
               .set =
                   [](Target& t, const Value& v) {
                     t.policy.health.multiplier = static_cast<int>(integer_of(v));
                   }},
              {.name = "holddown",
               .type = Duration{},
               .doc_type = "duration",
               .default_value = "\"5m\"",
               .about = "how long a rail that came back stays unused",
               .set = [](Target& t, const Value& v) { t.policy.health.holddown = duration_of(v); }},
              {.name = "ramp",
               .type = Custom{},
               .doc_type = "array of integers",
               .default_value = "[10, 25, 50, 100]",
               .about = "the shares a rail that came back carries, step by step",
               .reads = "health_ramp"},
              {.name = "ramp_interval",
               .type = Duration{},
               .doc_type = "duration",
               .default_value = "\"30s\"",
               .about = "the time between the ramp's steps",
               .set = [](Target& t,
                         const Value& v) { t.policy.health.ramp_interval = duration_of(v); }},
              {.name = "suspect_moves",
               .type = Word{{"all", "latency_sensitive"}},
               .doc_type = "string",
               .default_value = "\"all\"",
               .about = "which classes leave a suspect rail",
               .set =
                   [](Target& t, const Value& v) {
                     t.policy.health.suspect_moves_elastic = integer_of(v) == 0;
                   }},
          }};
}

Section measurement_section() {
  return {
      .name = "measurement",
      .node_settings = true,
      .about = "where the daemon measures",
      .keys = {
          {.name = "cgroup",
           .type = Text{},
           .doc_type = "string",
           .default_value = "\"\"",
           .about = "the cgroup v2 directory whose sockets are measured",
           .check =
               [](const Value& v, std::string_view) {
                 return text_of(v).empty() || text_of(v).front() == '/'
                            ? std::string()
                            : std::string("cgroup in [measurement] must be an absolute path");
               },
           .set = [](Target& t, const Value& v) { t.policy.measurement.cgroup = text_of(v); }},
          {.name = "window",
           .type = Duration{100ms},
           .doc_type = "duration",
           .default_value = "\"10s\"",
           .about = "the window of the latency percentiles and the loss",
           .set = [](Target& t, const Value& v) { t.policy.measurement.window = duration_of(v); }},
          {.name = "rdma_sysfs",
           .type = Text{},
           .doc_type = "string",
           .default_value = "\"/sys/class/infiniband\"",
           .about = "where the RDMA ports' counters are",
           .check =
               [](const Value& v, std::string_view) {
                 return !text_of(v).empty() && text_of(v).front() == '/'
                            ? std::string()
                            : std::string("rdma_sysfs in [measurement] must be an absolute path");
               },
           .set = [](Target& t, const Value& v) { t.policy.measurement.rdma_sysfs = text_of(v); }},
      }};
}

Section metrics_section() {
  return {.name = "metrics",
          .node_settings = true,
          .about = "the Prometheus endpoint",
          .keys = {
              {.name = "listen",
               .type = Text{},
               .doc_type = "string",
               .default_value = "\"127.0.0.1:9464\"",
               .about = "ADDRESS:PORT of the Prometheus endpoint; \"\" disables it",
               .check =
                   [](const Value& v, std::string_view) {
                     if (text_of(v).empty() || valid_listen(text_of(v))) return std::string();
                     return fmt::format(
                         "listen \"{}\" in [metrics] must be ADDRESS:PORT, e.g. "
                         "\"127.0.0.1:9464\" or \"[::1]:9464\", or \"\" to disable",
                         text_of(v));
                   },
               .set = [](Target& t, const Value& v) { t.policy.metrics.listen = text_of(v); }},
          }};
}

Section events_section() {
  return {
      .name = "events",
      .node_settings = true,
      .about = "what dpctl events keeps",
      .keys = {
          {.name = "keep",
           .type = Integer{16, 65536},
           .doc_type = "integer",
           .default_value = "1024",
           .about = "the newest events dpctl events shows; older ones are dropped",
           .hint = "a few hundred bytes each: 1024 covers minutes of a busy node's moves",
           .set = [](Target& t,
                     const Value& v) { t.policy.events.keep = static_cast<int>(integer_of(v)); }},
      }};
}

Section responder_section() {
  return {.name = "responder",
          .node_settings = true,
          .about = "the probe responder, which answers the peers' dpctl probe per rail",
          .keys = {
              {.name = "enable",
               .type = Boolean{},
               .doc_type = "boolean",
               .default_value = "true",
               .about = "whether the responder runs",
               .set = [](Target& t, const Value& v) { t.policy.responder.enable = flag_of(v); }},
              {.name = "port",
               .type = Integer{1, 65535},
               .doc_type = "integer",
               .default_value = "7862",
               .about = "the first of its ports (one per rail, and one more per rail for MPTCP)",
               .set =
                   [](Target& t, const Value& v) {
                     t.policy.responder.port = static_cast<uint16_t>(integer_of(v));
                   }},
              {.name = "max_sessions",
               .type = Integer{1, 64},
               .doc_type = "integer",
               .default_value = "4",
               .about = "concurrent sessions; more are refused",
               .set =
                   [](Target& t, const Value& v) {
                     t.policy.responder.max_sessions = static_cast<int>(integer_of(v));
                   }},
              {.name = "max_duration",
               .type = Duration{100ms, 60s},
               .doc_type = "duration",
               .default_value = "\"10s\"",
               .about = "the longest session",
               .set = [](Target& t,
                         const Value& v) { t.policy.responder.max_duration = duration_of(v); }},
              {.name = "allow",
               .type = Custom{},
               .doc_type = "array of prefixes",
               .about = "the sources it answers",
               .reads = "responder_allow"},
          }};
}

Section qos_section() {
  return {.name = "qos",
          .node_settings = true,
          .about = "what every class's pure ACKs are stamped with",
          .keys = {
              {.name = "ack_skb_priority",
               .type = Custom{},
               .doc_type = "integer",
               .default_value = "none",
               .about = "skb->priority of the pure ACKs: a band 0-7 or a tc class id",
               .reads = "parse_skb_priority_key"},
              {.name = "ack_dscp",
               .type = Custom{},
               .doc_type = "integer",
               .default_value = "none",
               .about = "the DSCP of the pure ACKs: 0-63 or a name",
               .reads = "parse_dscp_key"},
          }};
}

Section nccl_section() {
  return {.name = "nccl",
          .about = "the classes of NCCL's traffic, which dualpath's net plugin carries",
          .keys = {
              {.name = "traffic_class",
               .type = Custom{},
               .doc_type = "string",
               .about = "traffic_class.N: the class of communicators of NCCL traffic class N",
               .reads = "parse_nccl"},
              {.name = "operation",
               .type = Custom{},
               .doc_type = "string",
               .about = "operation.OP: the class of what NCCL announces as operation OP",
               .reads = "parse_nccl"},
          }};
}

}  // namespace

// [[path]], [[class]] and [[peer]]: policy_schema_entries.cpp.
Section path_section();
Section class_section();
Section peer_section();

const std::vector<Section>& sections() {
  static const std::vector<Section> all = {
      node_section(),        routing_section(), scheduler_section(), health_section(),
      measurement_section(), metrics_section(), events_section(),    responder_section(),
      qos_section(),         nccl_section(),    path_section(),      class_section(),
      peer_section()};
  return all;
}

const Section& section(std::string_view name) {
  for (const auto& s : sections())
    if (s.name == name) return s;
  throw std::logic_error(fmt::format("no policy section \"{}\" is declared", name));
}

std::string Section::title() const {
  return array ? fmt::format("[[{}]]", name) : fmt::format("[{}]", name);
}

const Key* Section::key(std::string_view k) const {
  for (const auto& x : keys)
    if (x.name == k) return &x;
  return nullptr;
}

std::vector<std::string_view> Section::key_names() const {
  std::vector<std::string_view> out;
  for (const auto& k : keys) out.push_back(k.name);
  return out;
}

std::string range_text(const Key& k) {
  if (!k.range.empty()) return std::string(k.range);
  if (auto* i = std::get_if<Integer>(&k.type)) return fmt::format("{}-{}", i->lo, i->hi);
  if (auto* n = std::get_if<Number>(&k.type))
    return fmt::format("above {} and at most {}", n->above, n->at_most);
  if (auto* d = std::get_if<Duration>(&k.type)) {
    // as the reference writes them: "0", "60s" (not "0ns", "1m")
    auto shown = [](nanoseconds x) {
      if (x.count() == 0) return std::string("0");
      if (x % 1s == nanoseconds(0) && x < 100s)
        return fmt::format("{}s", std::chrono::duration_cast<std::chrono::seconds>(x).count());
      return format_duration(x);
    };
    bool max = d->max != Duration{}.max;
    if (!max) return fmt::format("at least {}", shown(d->min));
    if (d->min == nanoseconds(0)) return fmt::format("at most {}", shown(d->max));
    return fmt::format("{} to {}", shown(d->min), shown(d->max));
  }
  return "";
}

}  // namespace dp::schema
