// dualpathd: owns the datapath of one node. Loads (or adopts) the BPF
// programs and pinned maps, programs them and the policy routing from the
// policy, runs the tick loop, and serves the control socket.
#pragma once

#include <sys/types.h>
#include <array>
#include <chrono>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dualpath/client/control_socket.h"
#include "dualpath/core/bfd.h"
#include "dualpath/core/health.h"
#include "dualpath/core/measure.h"
#include "dualpath/core/metrics.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"
#include "dualpath/core/scheduler.h"
#include "dualpath/kernel/bfd_io.h"
#include "dualpath/kernel/datapath.h"
#include "dualpath/kernel/exporter.h"
#include "dualpath/kernel/linkstats.h"
#include "dualpath/kernel/rdma.h"

struct nl_sock;  // libnl

namespace dp {

struct DaemonOptions {
  std::string policy_file;
  std::string socket_path = kDefaultSocket;
  std::string bpffs_root = "/sys/fs/bpf";  // pins go to <bpffs_root>/dualpath/<node>
  // Members of this group may query the control socket (mode 0660); only
  // root may change anything. Empty: the socket keeps the daemon's group.
  std::string socket_group;
};

// Per rail and class, summed over CPUs.
using CounterTable = std::array<std::array<dp_counters, DP_MAX_CLASSES>, DP_MAX_RAILS>;

class Daemon {
 public:
  explicit Daemon(DaemonOptions opts) : opts_(std::move(opts)) {}
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Validates the policy, loads or adopts the datapath, programs everything.
  Result<void> start();
  // Serves until SIGTERM/SIGINT; SIGHUP reloads. Returns the exit code.
  int run();

  // One control request; `privileged` is true for uid 0 peers.
  json handle(const json& request, bool privileged);

  // Removes everything dualpath created for this policy (dualpathd --cleanup).
  static Result<void> cleanup(const Policy& p, const std::string& bpffs_root);
  static std::string pin_dir(const std::string& bpffs_root, const std::string& node);

 private:
  Result<void> apply_policy(const Policy& next);
  Result<void> reload();                // reload_policy(), counted for the metrics
  Result<std::string> reload_policy();  // what changed, in one line
  void arm_tick();
  void tick();
  void check_interfaces();
  size_t paths_carrying() const;
  json policy_disk_hash() const;
  // if_nametoindex() without its socket per call: a socket made and closed
  // every tick costs a veth rail ~10% of its TCP throughput (measured).
  unsigned ifindex_of(const std::string& ifname) const;
  Result<void> set_class_rail(int class_index, int path_index, bool pinned);
  Result<void> write_shares(size_t class_index, const Shares& shares);
  void run_scheduler();
  void adapt_flowlet_gap();
  // health and failover (failover.cpp)
  void setup_health(const Policy& next);
  Result<void> open_link_events();
  void on_link_events();
  void on_bfd_readable(size_t path);
  void service_bfd();                 // due transmissions and detection timers
  void bfd_transitions(size_t path);  // session transitions into rail health
  void check_evidence();
  void health_changed();  // events, decisions first, then routing
  void write_effective();
  void log_event(SchedulerEvent e);
  json health_json(size_t path) const;
  json drain(const std::string& path, bool on);
  int next_timeout_ms() const;
  void watch_fd(int fd);
  void unwatch_fd(int fd);
  void send_admin_down();
  json events_json(const json& args) const;

  json status_json() const;
  json paths_json() const;
  json classes_json() const;
  json flows_json(const json& args) const;
  void read_tcp();
  void discover_rdma_ports(bool quiet);
  void measure_paths();
  Result<void> start_metrics(const std::string& listen);
  void publish_metrics();

  DaemonOptions opts_;
  Policy policy_;
  bool have_policy_ = false;
  bool adopted_ = false;
  std::string pin_dir_;
  std::unique_ptr<DpSkeleton> skel_;
  std::vector<int> class_slot_;         // per policy class
  std::vector<int> rail_slot_;          // per policy path
  std::vector<uint32_t> rail_ifindex_;  // per policy path, as attached
  std::vector<bool> rail_vanished_;     // interface gone: not a redirect target
  uint32_t gen_ = 0;
  uint32_t decision_version_ = 0;
  uint64_t flowlet_gap_ns_ = 0;  // as written to dp_config (adapted to the rails' RTTs)

  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_tick_;
  CounterTable counters_{};
  std::array<double, DP_MAX_RAILS> tx_bps_{};
  std::array<double, DP_MAX_RAILS> rx_bps_{};
  std::array<std::array<uint64_t, DP_EXC_MAX>, DP_MAX_RAILS> exceptions_{};
  uint64_t ticks_ = 0;
  // measurement
  std::unique_ptr<LinkStatsReader> links_;
  std::vector<PathMeasure> measures_;  // per policy path
  std::array<std::array<TcpCounters, DP_MAX_CLASSES>, DP_MAX_RAILS> tcp_{};
  uint64_t netns_cookie_ = 0;
  std::string sockops_cgroup_;     // "" when TCP measurement is off
  std::vector<bool> disagreeing_;  // per path: reconciliation reported
  std::unique_ptr<MetricsExporter> metrics_;
  std::vector<RdmaPort> rdma_ports_;                    // ports whose netdev is a path's interface
  std::vector<std::vector<std::string>> rdma_by_path_;  // device names per policy path
  std::string metrics_listen_;

  // scheduler
  SchedulerState sched_;
  std::vector<bool> op_pinned_;        // per policy class: pinned with dpctl class set
  std::vector<RateEstimator> demand_;  // per policy class: transmit rate over all rails
  struct LoggedEvent {
    uint64_t seq;
    std::chrono::system_clock::time_point wall;
    SchedulerEvent e;
  };
  std::deque<LoggedEvent> events_;  // the newest kMaxEvents
  uint64_t event_seq_ = 0;
  std::map<std::pair<std::string, std::string>, uint64_t> switches_;  // (class, kind) -> count

  // health and failover, per policy path
  struct Rail {
    RailHealth health;
    std::unique_ptr<BfdEndpoint> io;
    std::optional<bfd::Session> bfd;
    uint64_t bfd_discarded = 0;
    std::string bfd_last_discard;
    TcpCounters tcp_prev{};  // for data-path evidence
    std::string key;         // interface and BFD peer: a reload keeps a rail whose key is the same
  };
  std::vector<Rail> rails_;
  std::vector<std::vector<double>> former_;  // per path, per class: share before the path failed
  std::vector<Shares> written_;              // per class: what the decision map holds
  std::vector<bool> routed_failed_;          // per path: routing rewritten around it
  bool all_down_ = false;
  std::vector<SchedClock::time_point> settle_until_;  // per path: no evidence before
  std::unique_ptr<::nl_sock, void (*)(::nl_sock*)> link_events_{nullptr, nullptr};
  int epoll_fd_ = -1;
  uint64_t reloads_applied_ = 0, reloads_refused_ = 0;
  bool last_reload_ok_ = true;
  int tick_fd_ = -1;  // the timerfd of run(), re-armed by arm_tick()
  Nanos armed_tick_{0};
  std::map<int, size_t> bfd_fds_;  // receive fd -> path

  Fd listen_fd_;          // claimed first: one daemon per socket
  Fd ifreq_fd_;           // for SIOCGIFINDEX (ifindex_of)
  ino_t socket_ino_ = 0;  // unlink the socket at exit only if it is still ours
};

}  // namespace dp
