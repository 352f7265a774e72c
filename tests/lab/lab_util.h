// SPDX-License-Identifier: Apache-2.0
// Helpers for lab tests: shell commands, namespaces, real TCP/UDP traffic.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace lab {

using json = nlohmann::json;

struct Cmd {
  int rc = -1;
  std::string out;  // stdout and stderr
};
Cmd sh(const std::string& cmd);
// Like sh(), but fails the current test when rc != 0.
std::string must(const std::string& cmd);

std::string dp_lab();  // path of tools/dp-lab with the test's environment
// `ss -tniH FILTER` in network namespace ns: each TCP socket's line and its
// information line, joined by a space.
std::vector<std::string> tcp_sockets(const std::string& ns, const std::string& filter);
// The most the socket is paced at, bits/s ("pacing_rate CUR/MAXbps"); 0 when
// it has no cap.
uint64_t max_pacing_bps(const std::string& socket);
std::string read_file(const std::string& p);  // "" when it cannot be read
// A process's CPU time so far (utime + stime from /proc/PID/stat), in seconds.
double cpu_seconds(pid_t pid);
uint64_t tx_bytes(const std::string& ns, const std::string& dev);
json dpctl(const std::string& node, const std::string& args);  // -j, parsed
// An IPv4 or IPv6 socket address (the family from the text), and its length.
sockaddr_storage make_addr(const std::string& ip, uint16_t port, socklen_t* len);
// An MPTCP socket that has not fallen back to TCP (MPTCP_INFO answers).
bool is_mptcp(int fd);

// The lab's own daemon on node ("a", "b") again when the scope ends, stopped
// and started (`dp-lab stop`, `start`), whatever failed: for a test that
// stops it, or runs another build or other arguments in its place. done():
// the test has put the lab's own daemon back itself.
class LabDaemonAfter {
 public:
  explicit LabDaemonAfter(std::string node) : node_(std::move(node)) {}
  ~LabDaemonAfter();
  LabDaemonAfter(const LabDaemonAfter&) = delete;
  LabDaemonAfter& operator=(const LabDaemonAfter&) = delete;
  void done() { node_.clear(); }

 private:
  std::string node_;
};

// The health state dpctl reports for a node's rail ("up", "holddown", ...; "?").
std::string rail_state(const std::string& node, const std::string& rail);
// Waits until both rails of both nodes are up; false after `timeout`.
bool wait_rails_up(std::chrono::milliseconds timeout);

// Where the cgroup v2 hierarchy is mounted.
std::string cgroup2_mount();

// A node's MPTCP connections of the multipath classes (dpctl flow list); the
// one whose remote port (or, accepted, local port) is `port`, or null.
json mptcp_conns(const std::string& node);
json mptcp_conn(const std::string& node, uint16_t port);
// The paths of a connection's subflows (with that role: "active", "backup"),
// but the shared topology's first, which the datapath places as any flow of
// its class and which stands by.
std::set<std::string> subflow_paths(const json& c, const char* role = nullptr);
// Polls until pred(connection on `node`) holds, up to `ms`; returns the last read.
template <class P>
json wait_conn(const std::string& node, uint16_t port, int ms, P pred) {
  json c;
  for (int waited = 0; waited <= ms; waited += 50) {
    c = mptcp_conn(node, port);
    if (c.is_object() && pred(c)) return c;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return c;
}

struct TransferSpec {
  std::string client_ns = "dpl-a";
  std::string server_ns = "dpl-b";
  std::string dst = "10.99.0.2";
  uint16_t dport = 0;
  uint16_t sport = 0;  // 0: ephemeral
  uint32_t mark = 0;   // SO_MARK on the client socket
  uint64_t bytes = 4 << 20;
  double rate_bps = 0;  // 0: as fast as possible
  // A CPU-bound receiver: the server spins this long per KiB it reads.
  double server_us_per_kib = 0;
  // Both ends join this cgroup (a directory under the cgroup v2 mount) first.
  std::string cgroup{};
  bool mptcp = false;         // IPPROTO_MPTCP sockets at both ends ...
  bool server_tcp = false;    // ... but the server's: a peer without MPTCP
  std::string server_bind{};  // the server's address; "": every address
};

struct TransferResult {
  uint64_t sent = 0, received = 0;
  uint64_t sent_sum = 0, received_sum = 0;  // FNV-1a over the byte stream
  uint64_t max_gap_us = 0;  // the receiver's longest wait between two reads that returned data
  std::string error;        // empty when both ends succeeded
  // mptcp: each end's socket was still MPTCP at the end (not fallen back to TCP)
  bool client_mptcp = false, server_mptcp = false;
  bool ok() const { return error.empty() && sent == received && sent_sum == received_sum; }
};

// A TCP transfer from client_ns to server_ns, each end in a forked child that
// entered the namespace. start() returns once the server listens.
class Transfer {
 public:
  explicit Transfer(TransferSpec s);
  ~Transfer();
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;
  // The client sends no more after the chunk in hand (64 KiB) and ends the
  // transfer as if spec.bytes were what it had sent: for a connection that
  // must outlast events whose timing the test does not control.
  void stop();
  TransferResult wait();

 private:
  TransferSpec spec_;
  int stop_ = -1;  // closed by stop()
  pid_t server_ = -1, client_ = -1;
  int server_pipe_ = -1, client_pipe_ = -1;
};

TransferResult tcp_transfer(const TransferSpec& s);

// Round trips of `size`-byte messages over one TCP connection (client in
// client_ns, echo server in server_ns); returns each round trip in
// microseconds, or an empty vector on error.
std::vector<double> ping_pong(const std::string& client_ns, const std::string& server_ns,
                              const std::string& dst, uint16_t port, int count, int size,
                              int pause_us = 500);

// A UDP stream from client_ns to server_ns: `pps` datagrams a second of
// `size` bytes (at least 8: each carries its sequence number) for `seconds`,
// as a media or telemetry sender keeps sending through a fault. Blocks until
// done. The receiver waits a second after the last datagram was sent.
struct UdpStreamResult {
  uint64_t sent = 0, received = 0;  // distinct datagrams that arrived
  uint64_t max_gap_us = 0;  // the receiver's longest wait between two datagrams that arrived
  uint64_t tail_sent = 0, tail_received = 0;  // of the stream's last fifth
  std::string error;                          // the setup failed
};
UdpStreamResult udp_stream(const std::string& client_ns, const std::string& server_ns,
                           const std::string& dst, uint16_t dport, double seconds, int pps,
                           int size = 200);

// `flows` UDP flows from source ports first_sport.. in ns, each sending one
// datagram per second to dst:dport, for `seconds`. Blocks until done.
void udp_flows(const std::string& ns, const std::string& src, const std::string& dst,
               uint16_t dport, uint16_t first_sport, int flows, double seconds);

// Runs argv in ns (nsenter-like: fork, setns, exec) with output to log; returns the pid.
pid_t spawn_in_ns(const std::string& ns, const std::vector<std::string>& argv,
                  const std::string& log);
// SIGTERM, then SIGKILL after timeout_ms; reaps the child.
void stop_child(pid_t pid, int timeout_ms = 5000);
// Sends `count` UDP datagrams of `size` bytes; returns the number sent.
int udp_send(const std::string& ns, const std::string& dst, uint16_t dport, uint16_t sport,
             int count, int size, uint32_t mark = 0);

}  // namespace lab
