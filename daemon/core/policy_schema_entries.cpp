// SPDX-License-Identifier: Apache-2.0
// The schema of the sections written once per entry: [[path]], [[class]]
// and [[peer]] (policy_schema.h). A setter writes to the entry being read.
#include <arpa/inet.h>
#include <fmt/format.h>

#include "dualpath/core/policy_schema.h"
#include "dualpath/core/units.h"
#include "policy_checker.h"

namespace dp::schema {

namespace {

using namespace std::chrono_literals;
using std::chrono::nanoseconds;

// The kernel's rule for a network interface name (dev_valid_name): 1-15
// bytes, not "." or "..", no '/', ':', whitespace or NUL.
std::string interface_name_problem(const std::string& n) {
  if (n.empty()) return "it is empty";
  if (n.size() > 15) return fmt::format("{} bytes; the kernel allows 15", n.size());
  if (n == "." || n == "..") return "the kernel refuses \".\" and \"..\"";
  for (unsigned char ch : n) {
    if (ch == 0) return "it contains a NUL byte";
    if (ch == '/' || ch == ':') return fmt::format("it contains '{}'", static_cast<char>(ch));
    if (std::isspace(ch) || ch < 0x20 || ch == 0x7f)
      return "it contains whitespace or a control character";
  }
  return "";
}

}  // namespace

Section path_section() {
  return {
      .name = "path",
      .array = true,
      .required = true,
      .about = "one per rail, in the order of their index",
      .keys = {
          {.name = "name",
           .type = Text{},
           .doc_type = "string",
           .required = true,
           .about = "the rail's name, in events, metrics and classes' prefer",
           .set = [](Target& t, const Value& v) { t.path->name = text_of(v); }},
          {.name = "interface",
           .type = Text{},
           .doc_type = "string",
           .required = true,
           .about = "the rail's network interface",
           .check =
               [](const Value& v, std::string_view section) {
                 std::string why = interface_name_problem(text_of(v));
                 if (why.empty()) return why;
                 return fmt::format("interface \"{}\" of {} is not a valid interface name: {}",
                                    policy_parts::printable(text_of(v)), section, why);
               },
           .set = [](Target& t, const Value& v) { t.path->interface = text_of(v); }},
          {.name = "gateway",
           .type = Address{AF_INET},
           .doc_type = "IPv4 address",
           .about = "the rail's IPv4 next hop",
           .set = [](Target& t, const Value& v) { t.path->gateway = address_of(v); }},
          {.name = "gateway6",
           .type = Address{AF_INET6},
           .doc_type = "IPv6 address",
           .about = "the rail's IPv6 next hop",
           .set = [](Target& t, const Value& v) { t.path->gateway6 = address_of(v); }},
          {.name = "source",
           .type = Address{AF_INET},
           .doc_type = "IPv4 address",
           .about = "the node's IPv4 address on the rail",
           .set = [](Target& t, const Value& v) { t.path->source = address_of(v); }},
          {.name = "source6",
           .type = Address{AF_INET6},
           .doc_type = "IPv6 address",
           .about = "the node's IPv6 address on the rail",
           .set = [](Target& t, const Value& v) { t.path->source6 = address_of(v); }},
          {.name = "capacity",
           .type = Text{},
           .doc_type = "rate",
           .required = true,
           .unit = "bit/s",
           .about = "the rail's rate, the base of its utilisation",
           .check =
               [](const Value& v, std::string_view section) {
                 auto bw = parse_bandwidth(text_of(v));
                 return bw ? std::string()
                           : fmt::format("capacity of {}: {}", section, bw.error().message);
               },
           .set = [](Target& t,
                     const Value& v) { t.path->capacity_bps = *parse_bandwidth(text_of(v)); }},
          {.name = "table",
           .type = Integer{1, kMaxU32},
           .doc_type = "integer",
           .required = true,
           .about = "the routing table of the rail's routes",
           .check =
               [](const Value& v, std::string_view section) {
                 if (integer_of(v) < 253 || integer_of(v) > 255) return std::string();
                 return fmt::format(
                     "table {} of {} is one of the kernel's own (default 253, main "
                     "254, local 255): pick another",
                     integer_of(v), section);
               },
           .set = [](Target& t,
                     const Value& v) { t.path->table = static_cast<uint32_t>(integer_of(v)); }},
          {.name = "fwmark",
           .type = Integer{1, kMaxU32},
           .doc_type = "integer",
           .required = true,
           .about = "the mark that routes a packet by the rail's table",
           .set = [](Target& t,
                     const Value& v) { t.path->fwmark = static_cast<uint32_t>(integer_of(v)); }},
          {.name = "routes",
           .type = Custom{},
           .doc_type = "array of prefixes",
           .default_value = "none",
           .about = "the networks the rail's table routes",
           .reads = "path_routes"},
          {.name = "bfd_peer",
           .type = Address{0},
           .doc_type = "IP address",
           .about = "the BFD session's peer (default: the gateway)",
           .set = [](Target& t, const Value& v) { t.path->bfd_peer = address_of(v); }},
      }};
}

Section class_section() {
  return {.name = "class",
          .array = true,
          .required = true,
          .about = "a traffic class: what it matches and how it is steered",
          .keys = {
              {.name = "name",
               .type = Text{},
               .doc_type = "string",
               .required = true,
               .about = "the class's name",
               .set = [](Target& t, const Value& v) { t.klass->name = text_of(v); }},
              {.name = "kind",
               .type = Word{{"latency_sensitive", "elastic"}},
               .doc_type = "string",
               .required = true,
               .about = "latency_sensitive classes move for latency, elastic ones spill for load",
               .set =
                   [](Target& t, const Value& v) {
                     t.klass->kind =
                         integer_of(v) == 0 ? ClassKind::LatencySensitive : ClassKind::Elastic;
                   }},
              {.name = "priority",
               .type = Integer{0, 7},
               .doc_type = "integer",
               .default_value = "0",
               .about = "which class the scheduler serves first (7 highest)",
               .set = [](Target& t,
                         const Value& v) { t.klass->priority = static_cast<int>(integer_of(v)); }},
              {.name = "prefer",
               .type = Text{},
               .doc_type = "string",
               .required = true,
               .about = "the path the class takes when it has the choice",
               .set = [](Target& t, const Value& v) { t.klass->prefer = text_of(v); }},
              {.name = "mark",
               .type = Integer{1, kMaxU32},
               .doc_type = "integer",
               .default_value = "none",
               .about = "the socket mark that matches the class",
               .set = [](Target& t,
                         const Value& v) { t.klass->mark = static_cast<uint32_t>(integer_of(v)); }},
              {.name = "ports",
               .type = Custom{},
               .doc_type = "array of strings",
               .default_value = "none",
               .about = "the port ranges that match the class: \"tcp:LO-HI\", \"udp:PORT\"",
               .reads = "class_ports"},
              {.name = "cgroups",
               .type = Custom{},
               .doc_type = "array of strings",
               .default_value = "none",
               .about = "the cgroup v2 directories whose sockets are the class's",
               .reads = "parse_cgroups"},
              {.name = "units",
               .type = Custom{},
               .doc_type = "array of strings",
               .default_value = "none",
               .about = "the systemd units whose sockets are the class's",
               .reads = "parse_cgroups"},
              {.name = "match",
               .type = Word{{"any", "src", "dst"}},
               .doc_type = "string",
               .default_value = "\"any\"",
               .about = "which port of a flow the ports match",
               .set =
                   [](Target& t, const Value& v) {
                     t.klass->match = integer_of(v) == 0   ? PortMatch::Any
                                      : integer_of(v) == 1 ? PortMatch::Src
                                                           : PortMatch::Dst;
                   }},
              {.name = "pinned",
               .type = Boolean{},
               .doc_type = "boolean",
               .default_value = "false",
               .about = "the scheduler never moves a pinned class",
               .set = [](Target& t, const Value& v) { t.klass->pinned = flag_of(v); }},
              {.name = "dscp",
               .type = Custom{},
               .doc_type = "integer",
               .default_value = "none",
               .about = "the DSCP the class's packets are stamped with: 0-63 or a name",
               .reads = "parse_dscp_key"},
              {.name = "skb_priority",
               .type = Custom{},
               .doc_type = "integer",
               .default_value = "none",
               .about = "the class's skb->priority: a band 0-7 or a tc class id",
               .reads = "parse_skb_priority_key"},
              {.name = "rto_min",
               .type = Duration{0ns, 200ms},
               .doc_type = "duration",
               .about = "the minimum retransmission timeout of the class's TCP sockets",
               .hint = ": the kernel's own minimum is 200ms, which a class can only lower",
               .range = "0 or 1ms to 200ms",
               .check =
                   [](const Value& v, std::string_view section) {
                     if (duration_of(v).count() == 0 || duration_of(v) >= 1ms) return std::string();
                     return fmt::format("rto_min of {} must be 0 (the kernel's) or at least 1ms",
                                        section);
                   },
               .set = [](Target& t, const Value& v) { t.klass->rto_min = duration_of(v); }},
              {.name = "rto_max",
               .type = Duration{0ns, 120s},
               .doc_type = "duration",
               .about = "the maximum retransmission timeout of the class's TCP sockets",
               .hint = ": the kernel's own maximum is 120s, which a class can only lower",
               .range = "0 or 1s to 120s",
               .check =
                   [](const Value& v, std::string_view section) {
                     if (duration_of(v).count() == 0 || duration_of(v) >= 1s) return std::string();
                     return fmt::format(
                         "rto_max of {} must be 0 (the kernel's) or at least 1s (the "
                         "kernel's floor for TCP_RTO_MAX_MS)",
                         section);
                   },
               .set = [](Target& t, const Value& v) { t.klass->rto_max = duration_of(v); }},
              {.name = "multipath",
               .type = Boolean{},
               .doc_type = "boolean",
               .default_value = "false",
               .about = "the class's TCP connections are MPTCP, with a subflow on every rail",
               .set = [](Target& t, const Value& v) { t.klass->multipath = flag_of(v); }},
              {.name = "reserve",
               .type = Custom{},
               .doc_type = "rate",
               .default_value = "none",
               .about = "a rate or a share of a rail kept for the class",
               .reads = "parse_class_reserve"},
          }};
}

Section peer_section() {
  return {.name = "peer",
          .array = true,
          .about = "the separate topology's peer table: each peer's address on each path",
          .keys = {
              {.name = "name",
               .type = Text{},
               .doc_type = "string",
               .default_value = "none",
               .about = "a label, named in errors"},
              {.name = "addresses",
               .type = Custom{},
               .doc_type = "table",
               .required = true,
               .about = "the peer's address on each path, by path name",
               .reads = "parse_peers"},
          }};
}

}  // namespace dp::schema
