// SPDX-License-Identifier: Apache-2.0
// The plugin's settings (NCCL_DUALPATH_* in the environment), each declared
// once with its default and checked: a value that does not parse is an error
// that init reports, so that NCCL falls back to its own transports rather
// than run with a setting the user did not mean.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dpnccl {

struct Settings {
  std::string socket = "/run/dualpath/dualpathd.sock";  // NCCL_DUALPATH_SOCKET
  std::string klass;                 // NCCL_DUALPATH_CLASS ("" = the policy decides)
  std::string rails_env;             // NCCL_DUALPATH_RAILS as given
  int stall_ms = 100;                // NCCL_DUALPATH_STALL_MS
  int timeout_ms = 10000;            // NCCL_DUALPATH_TIMEOUT_MS
  int reopen_ms = 1000;              // NCCL_DUALPATH_REOPEN_MS
  int rto_min_ms = 50;               // NCCL_DUALPATH_RTO_MIN_MS (0: the kernel's)
  int loss_pct = 20;                 // NCCL_DUALPATH_LOSS_PCT (0: off)
  int streams_per_rail = 0;          // NCCL_DUALPATH_STREAMS (0: from the capacity)
  uint32_t chunk_bytes = 256 << 10;  // NCCL_DUALPATH_CHUNK_BYTES
  uint64_t window_bytes = 4 << 20;   // NCCL_DUALPATH_WINDOW_BYTES per stream
  bool spread = true;                // NCCL_DUALPATH_SPREAD: every device uses every rail
  bool use_daemon = true;            // NCCL_DUALPATH_DAEMON=0: never ask dualpathd
  // NCCL_DUALPATH_FAULT=RAIL:BYTES (testing): after BYTES sent by a send
  // comm, its first stream on RAIL is shut down, as if the peer reset it.
  int fault_rail = -1;
  uint64_t fault_after = 0;
};

// Reads the environment; an error names the variable, the value and a hint.
bool load_settings(Settings* s, std::string* error);

// A rail as the plugin uses it: its name (the policy's path name, or the
// interface), interface, this node's address on it, capacity.
struct Rail {
  std::string name;
  std::string ifname;
  sockaddr_storage addr{};
  socklen_t addrlen = 0;
  uint64_t capacity_bps = 0;  // 0: unknown
  std::string pci_path;       // realpath of /sys/class/net/IF/device, "" for virtual ones
  uint64_t guid = 0;
  uint32_t fwmark = 0;  // the path's fwmark (dualpathd): pins a socket to the rail, no class
};

// Rails from NCCL_DUALPATH_RAILS ("IF[=ADDR][@RATE],..."; RATE like 1Gbit or
// 250Mbit), else from NCCL_SOCKET_IFNAME's interfaces (exact names, "^" and
// "=" prefixes understood as NCCL does only for exclusion: excluded names are
// skipped). An unknown interface, or one without an address, is an error.
bool rails_from_env(const Settings& s, std::vector<Rail>* rails, std::string* error);

// The first IPv4 address on ifname that is not link-local, else the first
// global IPv6 one.
bool interface_address(const std::string& ifname, sockaddr_storage* addr, socklen_t* len);
bool parse_address(const std::string& text, sockaddr_storage* addr, socklen_t* len);
std::string address_string(const sockaddr_storage& addr);
// "1Gbit", "250mbit", "100G", or a number of bits a second.
std::optional<uint64_t> parse_rate(const std::string& text);
// sysfs facts of a rail: PCI path and guid (from the MAC address).
void fill_sysfs(Rail* r);

}  // namespace dpnccl
