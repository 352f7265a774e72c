// SPDX-License-Identifier: Apache-2.0
// Multipath classes (policy key multipath = true): what each MPTCP connection
// of such a class should have, as a pure function of what it has, which
// rails are usable and where the class's decision puts it.
//   - One subflow on every usable rail; the connecting side makes them (the
//     accepting side cannot) and removes a second that came up beside one,
//     both sides remove a failed rail's.
//   - A subflow is active on a rail the decision gives a share, a backup
//     elsewhere (MP_PRIO): a latency-sensitive class runs on its rail and
//     keeps the other warm; a split elastic class uses both, and an elastic
//     class uses rails of comparable or wider capacity anyway
//     (active_rails). The connecting side sets the roles; its MP_PRIO holds
//     for both directions, and the accepting side's decisions (its own
//     policy) are not consulted.
//   - A rail whose subflow failed is tried again after a backoff.
//   - The first joins wait for the connection to be known at the peer.
// daemon/multipath.cpp carries the actions out over the path manager.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "dualpath/core/policy.h"
#include "dualpath/core/units.h"

namespace dp::multipath {

using Time = std::chrono::steady_clock::time_point;

// A subflow's two ends (ports in host order).
struct Ends {
  IpAddr local, remote;
  uint16_t lport = 0, rport = 0;
  bool operator==(const Ends&) const = default;
};

constexpr size_t kNoPath = static_cast<size_t>(-1);

// How long the connecting side waits after a connection is established
// before it asks for its joins: sent at once on another rail, a join can
// reach the peer ahead of the first subflow's third ACK (queued on a busy
// rail), find no connection there and be refused.
constexpr auto kFirstJoinAfter = std::chrono::milliseconds(20);

// A join is made as a backup, and made active only once it has been up this
// long. Data sent on a join at once (as MPTCP's scheduler does with an
// active one, within microseconds of the handshake) can be placed at the
// wrong place in the stream by the accepting kernel, which then resets the
// join (Linux 6.18 under load; docs/troubleshooting.md, "A multipath class
// delivers a piece of its stream twice"). A backup carries nothing while
// an active subflow can.
constexpr auto kJoinSettle = std::chrono::milliseconds(100);

// How long a join may take to come up. A path that drops MP_JOIN SYNs
// without a word would otherwise keep the join sending its SYN for about
// two minutes (tcp_syn_retries), long after the rail should have been given
// up (kGiveUpAfter). Two seconds lets one lost SYN be sent again (after 1 s)
// and answered; a join on a path that answers comes up within its RTT.
constexpr auto kJoinTimeout = std::chrono::seconds(2);

struct Subflow {
  Ends ends;
  size_t path = kNoPath;  // kNoPath: not bound to a rail (the shared topology's first one)
  bool backup = false;
  Time up{};  // when it was established (Time{}: not known)
};

struct Connection {
  uint32_t token = 0;
  size_t klass = 0;
  bool server_side = false;  // accepted here: the peer makes the subflows
  Ends first;                // the first subflow, as the application connected
  std::vector<Subflow> subflows;
  std::vector<Time> retry_after;  // per path: no new subflow before this
  std::vector<int> failures;      // per path: subflows that ended since the last that worked
  std::vector<int> refused;       // per path: joins in a row that never came up
  std::vector<Time> joining;      // per path: when the join under way was asked for (Time{}: none)
  Time since{};                   // when the connection was established here
  uint8_t last_join_id = 0;       // shared topology: the address id of the last join made
};

struct Want {
  std::vector<bool> usable;               // per path
  std::vector<std::vector<bool>> active;  // per class, per path: the decision gives it a share
};

struct Action {
  enum class Kind { Create, Destroy, SetBackup } kind = Kind::Create;
  size_t path = kNoPath;
  bool backup = false;
  Ends ends;  // Create: local address and remote address and port
};

// The rail a subflow's local end is on, from the paths' sources (separate
// topology) or the interface it is bound to (ifindex; shared topology).
size_t path_of(const Policy& p, const std::vector<uint32_t>& ifindex, const IpAddr& local,
               int bound_ifindex);

// The peer's address on rail `to`: its address there in the policy's peer
// table, else the same host on that rail's network (separate topology: the
// mapping of connect-time placement), or the same address (shared).
// nullopt: the table has no address there, the host part does not fit, or
// `peer` is on no rail's network.
std::optional<IpAddr> peer_on_path(const Policy& p, const IpAddr& peer, size_t to);

// The rails where class `klass`'s subflows are active: those its decision
// (`shares`) gives a share; and for an elastic class that no operator
// pinned, also every other usable rail at least kComparable as wide as the
// widest rail the decision opens (a comparable rail, or a wider one).
// MPTCP's own scheduler then spreads each connection's data over the
// subflows' room: on rails of comparable capacity that carries more than
// holding one back (dp-lab bench, separate topology, equal rails: stock
// MPTCP with both active carried 1.63x one rail), while on a much slower
// rail the kernel's scheduler makes the connection wait for what it sent
// there (0.70x at 4:1), so only the decision opens a much narrower rail.
// A wider rail never makes it wait: a class the decision moved to a narrow
// rail keeps sending on the wide one as far as that has room, and the
// connecting side's roles bind the peer's sending too (a class moved for
// what this node sends would otherwise confine what the peer answers).
constexpr double kComparable = 0.5;
std::vector<bool> active_rails(const Policy& p, size_t klass, const std::vector<uint16_t>& shares,
                               const std::vector<bool>& usable, bool operator_pinned);

// What the subflows of a multipath class are expected to carry, per policy
// path (DP_SHARE_SCALE in all): the decision's shares where the active rails
// are those the decision gives a share. Where an elastic class also uses
// rails the decision gives nothing (active_rails), MPTCP's scheduler fills
// every active subflow, so the split follows the active rails' capacities.
// dpctl class list, the metrics and the carried-share check compare what
// the class carries with this, not with a share its subflows cannot keep.
std::vector<uint16_t> subflow_shares(const Policy& p, const std::vector<bool>& active,
                                     const std::vector<uint16_t>& decided);

// What `c` needs now. A rail is active when the class's decision gives it a
// share; when no usable rail is, every usable one is.
std::vector<Action> reconcile(const Policy& p, const Connection& c, const Want& w, Time now);

// A subflow of `c` on `path` could not be made: the next try waits 1 s,
// doubling per failure up to 8 s. After kGiveUpAfter joins in a row that
// never came up (a firewall or middlebox that drops or refuses MP_JOIN,
// which would otherwise be asked every 8 s for the connection's life) the
// rail is asked again only every kGiveUpFor; the connection goes on with
// its other subflows. Returns true for the failure that began that: the
// caller says so.
constexpr int kGiveUpAfter = 6;
constexpr auto kGiveUpFor = std::chrono::minutes(10);
bool note_failure(Connection& c, size_t path, Time now);

// A subflow of `c` that was established at `up` (Time{}: never, a join
// that could not be made: note_failure) ended at `now`. One that
// carried the connection for kLived or longer worked: its rail's backoff
// starts again at 1 s. One that ended sooner counts as a failure of its
// rail, as a refused join does: a peer that holds the rail down (its own
// hold-down after a failure this end did not see) closes each join it
// accepts, and a join made again each second would churn until it is back.
constexpr auto kLived = std::chrono::seconds(2);
bool note_closed(Connection& c, size_t path, Time up, Time now);  // note_failure's

// A join of `c` on `path` was asked for at `now`: none is asked for there
// again until it is answered (note_answered), so that a path whose joins go
// unanswered never has more than one under way.
void note_asked(Connection& c, size_t path, Time now);
// The join under way on `path` came up, was refused or was ended.
void note_answered(Connection& c, size_t path);
// The paths whose join has been under way for kJoinTimeout or longer: the
// caller ends each and counts it as a join that never came up (note_failure).
std::vector<size_t> overdue_joins(const Connection& c, Time now);

// This end removed a subflow of `c` on `path` (its rail failed or lost its
// role) that was established at `up`: one that carried the connection for
// kLived worked, and its rail's backoff starts again from 1 s (the closing
// that follows is then its first failure, as for any rail that failed).
void note_removed(Connection& c, size_t path, Time up, Time now);

}  // namespace dp::multipath
