// SPDX-License-Identifier: Apache-2.0
// The TCP transport: each connection is several TCP streams per rail. A
// message is cut into chunks; each chunk goes on one stream with a header
// (message seq, offset, length, tag, total), so the receiver places it
// wherever it arrives and never recomputes the split. Chunks are spread over
// the rails by the placement's shares (deficit order), and over a rail's
// streams by what each has in flight. The receiver acknowledges each chunk on
// the stream it came on; a send completes when every chunk is acknowledged,
// so that the chunks in flight on a rail that fails (a socket error, or a
// stall: segments unacknowledged and no TCP ACK for NCCL_DUALPATH_STALL_MS) can be sent
// again on another rail: the receiver accepts a chunk once, by offset, and
// drops what arrives for a message it has completed. A failed rail's streams
// are reopened after NCCL_DUALPATH_REOPEN_MS; only no stream at all for
// NCCL_DUALPATH_TIMEOUT_MS, with bytes to move, is an error.
//
// Wire format (host byte order: both ends run this plugin on one
// architecture): each stream starts with a Hello {magic, version, rail,
// stream, connection id}; then data ChunkHdr+payload one way, Ack the other.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "dualpath/nccl/net.h"
#include "log.h"
#include "transport.h"

namespace dpnccl {

namespace {

using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

constexpr uint32_t kHelloMagic = 0x44504e31;   // "DPN1"
constexpr uint32_t kHandleMagic = 0x44504e48;  // "DPNH"
constexpr uint16_t kVersion = 2;               // 2: probes
constexpr int kMaxRails = 4;

struct Hello {
  uint32_t magic;
  uint16_t version;
  uint8_t rail;
  uint8_t stream;
  uint64_t conn_id;
};
static_assert(sizeof(Hello) == 16);

struct ChunkHdr {
  uint64_t seq;
  uint64_t offset;
  uint64_t total;  // the message's size
  uint32_t len;
  int32_t tag;
};
static_assert(sizeof(ChunkHdr) == 32);

struct Ack {
  uint64_t seq;
  uint64_t offset;
};
static_assert(sizeof(Ack) == 16);

// A probe: a header with no payload that asks the receiver to answer at
// once with an Ack{seq, kProbe}, whatever it is reading. A sender whose
// bytes TCP acknowledged but whose chunk's acknowledgement is overdue sends
// one: if the way back failed, the probe's own bytes go unacknowledged and
// the stall is seen as usual.
constexpr uint64_t kProbe = ~uint64_t{0};

struct WireRail {
  uint8_t family;
  uint8_t pad;
  uint16_t port;  // network order
  uint8_t addr[16];
};
struct WireHandle {
  uint32_t magic;
  uint8_t version;
  uint8_t nrails;
  uint16_t pad;
  uint64_t listen_id;
  WireRail rail[kMaxRails];
  void* stage;  // the connect in progress (the local copy of the handle only)
};
static_assert(sizeof(WireHandle) <= NCCL_NET_HANDLE_MAXSIZE);

std::string errstr(int e) { return std::strerror(e); }

uint64_t random_id() {
  uint64_t v = 0;
  if (::getrandom(&v, sizeof(v), 0) != sizeof(v))
    v = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^
        (static_cast<uint64_t>(::getpid()) << 32);
  return v;
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

sockaddr_storage to_sockaddr(const WireRail& w, socklen_t* len) {
  sockaddr_storage s{};
  if (w.family == 4) {
    auto* a = reinterpret_cast<sockaddr_in*>(&s);
    a->sin_family = AF_INET;
    a->sin_port = w.port;
    std::memcpy(&a->sin_addr, w.addr, 4);
    *len = sizeof(sockaddr_in);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&s);
    a->sin6_family = AF_INET6;
    a->sin6_port = w.port;
    std::memcpy(&a->sin6_addr, w.addr, 16);
    *len = sizeof(sockaddr_in6);
  }
  return s;
}

void set_port(sockaddr_storage* s, uint16_t port_net) {
  if (s->ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(s)->sin_port = port_net;
  else
    reinterpret_cast<sockaddr_in6*>(s)->sin6_port = port_net;
}

std::once_flag bind_warned, mark_warned;

// The kernel's minimum retransmission timeout (200 ms) for a send stream,
// lowered: a stall is only declared once a retransmission timeout fired, so
// on a rail that went black the first one decides how soon its chunks move.
// TCP_RTO_MIN_US is Linux 6.15's; older kernels refuse it and keep theirs.
#ifndef TCP_RTO_MIN_US
#define TCP_RTO_MIN_US 45
#endif
void set_rto_min(int fd, int min_ms) {
  if (min_ms <= 0) return;
  int us = min_ms * 1000;
  ::setsockopt(fd, IPPROTO_TCP, TCP_RTO_MIN_US, &us, sizeof(us));
}

// A socket bound to a rail: to its interface where allowed (SO_BINDTODEVICE
// needs CAP_NET_RAW), and to its address, so the kernel routes it out there.
int rail_socket(const Rail& r, std::string* error) {
  int fd = ::socket(r.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *error = "socket: " + errstr(errno);
    return -1;
  }
  if (::setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, r.ifname.c_str(),
                   static_cast<socklen_t>(r.ifname.size())) != 0) {
    int e = errno;
    std::call_once(bind_warned, [&] {
      DPN_INFO(
          "binding to interface %s refused (%s): rails are kept apart by their source "
          "addresses only",
          r.ifname.c_str(), errstr(e).c_str());
    });
  }
  // the path's fwmark tells dualpathd's datapath that the plugin placed this
  // socket itself: it stays on the rail (SO_MARK needs CAP_NET_ADMIN)
  if (r.fwmark && ::setsockopt(fd, SOL_SOCKET, SO_MARK, &r.fwmark, sizeof(r.fwmark)) != 0) {
    int e = errno;
    std::call_once(mark_warned, [&] {
      traffic().unmarked();
      DPN_INFO(
          "marking sockets with %s's fwmark 0x%x refused (%s): dualpathd may steer them "
          "as unclassified traffic",
          r.name.c_str(), r.fwmark, errstr(e).c_str());
    });
  }
  sockaddr_storage a = r.addr;
  set_port(&a, 0);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), r.addrlen) != 0) {
    *error = "bind to " + address_string(r.addr) + " on " + r.ifname + ": " + errstr(errno);
    ::close(fd);
    return -1;
  }
  set_nodelay(fd);
  return fd;
}

// ------------------------------------------------------------------ listen

// The listening sockets of one listen (one per rail) and the streams that
// arrived on them, by connection id. Shared by the listen comm and every
// receive connection accepted from it, so a rail's streams can be reopened
// after NCCL closed the listen comm; guarded by a mutex, as several proxy
// threads may reach it.
class ListenSet {
 public:
  struct Arrived {
    int fd;
    int rail;
  };
  ~ListenSet() {
    for (int fd : lfds_) ::close(fd);
    for (auto& p : handshaking_) ::close(p.fd);
    for (auto& [id, v] : ready_)
      for (auto& a : v) ::close(a.fd);
  }
  std::vector<int> lfds_;
  int rto_min_ms = 0;

  // From a connection's progress, which NCCL's proxy calls in a tight loop:
  // new streams (a rail reopened) are rare, so the listeners are looked at
  // once a millisecond, or at once while a stream is still saying hello.
  void poll_due() {
    auto now = Clock::now();
    {
      std::lock_guard<std::mutex> g(mu_);
      if (handshaking_.empty() && now - polled_ < std::chrono::milliseconds(1)) return;
    }
    poll();
  }

  void poll() {
    std::lock_guard<std::mutex> g(mu_);
    polled_ = Clock::now();
    for (size_t i = 0; i < lfds_.size(); ++i) {
      for (;;) {
        int fd = ::accept4(lfds_[i], nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        set_nodelay(fd);
        // its chunks' acknowledgements go back this way: on a lossy rail
        // they come as late as the kernel's timeouts let them
        set_rto_min(fd, rto_min_ms);
        handshaking_.push_back({fd, {}, 0, Clock::now()});
      }
    }
    for (size_t i = 0; i < handshaking_.size();) {
      auto& p = handshaking_[i];
      ssize_t n = ::recv(p.fd, reinterpret_cast<char*>(&p.hello) + p.off, sizeof(Hello) - p.off, 0);
      bool drop = false;
      if (n > 0) p.off += static_cast<size_t>(n);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) drop = true;
      if (!drop && p.off < sizeof(Hello) && Clock::now() - p.since > ms(10000)) drop = true;
      if (!drop && p.off == sizeof(Hello)) {
        if (p.hello.magic != kHelloMagic || p.hello.version != kVersion) {
          DPN_WARN(
              "a stream that is not dualpath's (or another version) reached the listener: "
              "closed");
          drop = true;
        } else if (closed_.count(p.hello.conn_id)) {
          drop = true;
        } else {
          ready_[p.hello.conn_id].push_back({p.fd, p.hello.rail});
          handshaking_.erase(handshaking_.begin() + static_cast<ptrdiff_t>(i));
          continue;
        }
      }
      if (drop) {
        ::close(p.fd);
        handshaking_.erase(handshaking_.begin() + static_cast<ptrdiff_t>(i));
        continue;
      }
      ++i;
    }
  }

  // A connection no receive comm holds yet, with its first streams.
  bool take_new(uint64_t* id, std::vector<Arrived>* streams) {
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = ready_.begin(); it != ready_.end(); ++it) {
      if (claimed_.count(it->first)) continue;
      *id = it->first;
      claimed_.insert(it->first);
      *streams = std::move(it->second);
      ready_.erase(it);
      return true;
    }
    return false;
  }

  // Streams that arrived since for a connection already held.
  void take(uint64_t id, std::vector<Arrived>* streams) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = ready_.find(id);
    if (it == ready_.end()) return;
    for (auto& a : it->second) streams->push_back(a);
    ready_.erase(it);
  }

  void release(uint64_t id) {
    std::lock_guard<std::mutex> g(mu_);
    claimed_.erase(id);
    closed_.insert(id);
    if (auto it = ready_.find(id); it != ready_.end()) {
      for (auto& a : it->second) ::close(a.fd);
      ready_.erase(it);
    }
  }

 private:
  struct Handshake {
    int fd;
    Hello hello;
    size_t off;
    Clock::time_point since;
  };
  std::mutex mu_;
  Clock::time_point polled_{};
  std::vector<Handshake> handshaking_;
  std::map<uint64_t, std::vector<Arrived>> ready_;
  std::set<uint64_t> claimed_, closed_;
};

// ------------------------------------------------------------------ receive

class RecvConnImpl;

struct RecvSub {
  char* data = nullptr;
  size_t cap = 0;
  int tag = 0;
  bool matched = false;
  bool done = false;
  uint64_t seq = 0;
  size_t total = 0;
  size_t got = 0;
  std::unordered_set<uint64_t> offsets;  // chunks taken, by offset
};

class RecvReq final : public Request {
 public:
  RecvConnImpl* conn = nullptr;
  bool used = false;
  int n = 0;
  int ndone = 0;
  uint64_t base = 0;  // seqs base .. base+n-1
  std::array<RecvSub, kMaxRecvs> subs;
  Status test(bool* done, int* sizes) override;
};

// Every receive connection of the process. After a rail failed, a chunk
// that had arrived on it may come again on another rail after its
// receive completed; its sender waits for the acknowledgement, which a
// connection with no receive posted would never read, since NCCL tests
// only requests in flight: send requests' tests read such idle
// connections too (progress_idle_receivers()).
std::mutex g_recvs_mu;
std::vector<RecvConnImpl*> g_recvs;

class RecvConnImpl final : public RecvConn {
 public:
  RecvConnImpl(const Settings& s, std::shared_ptr<ListenSet> ls, uint64_t id,
               std::vector<ListenSet::Arrived> first)
      : s_(s), ls_(std::move(ls)), id_(id), no_stream_since_(Clock::now()) {
    for (auto& a : first) add(a);
    for (auto& r : reqs_) r.conn = this;
    std::lock_guard<std::mutex> g(g_recvs_mu);
    g_recvs.push_back(this);
  }
  ~RecvConnImpl() override {
    {
      // (an idle progress runs under g_recvs_mu: none is left after this)
      std::lock_guard<std::mutex> g(g_recvs_mu);
      g_recvs.erase(std::find(g_recvs.begin(), g_recvs.end(), this));
    }
    for (auto& st : streams_) ::close(st.fd);
    ls_->release(id_);
  }
  // Reads the connection if it has no receive posted and no one else is
  // at it; g_recvs_mu is held.
  void progress_if_idle() {
    std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
    if (lk.owns_lock() && groups_.empty() && error_.ok()) progress();
  }
  std::mutex mu_;  // NCCL's calls on the connection, and idle progress from other threads

  Status irecv(int n, void** data, const size_t* sizes, const int* tags,
               Request** request) override {
    std::lock_guard<std::mutex> g(mu_);
    *request = nullptr;
    if (n < 1 || n > kMaxRecvs)
      return Status::fail(Err::Invalid, "irecv of " + std::to_string(n) + " buffers (at most " +
                                            std::to_string(kMaxRecvs) + ")");
    if (!error_.ok()) return error_;
    RecvReq* r = nullptr;
    for (auto& x : reqs_)
      if (!x.used) {
        r = &x;
        break;
      }
    if (!r) return {};
    r->used = true;
    r->n = n;
    r->ndone = 0;
    r->base = next_seq_;
    for (int i = 0; i < n; ++i) {
      RecvSub& sub = r->subs[static_cast<size_t>(i)];
      sub = RecvSub{};
      sub.data = static_cast<char*>(data[i]);
      sub.cap = sizes[i];
      sub.tag = tags ? tags[i] : 0;
    }
    groups_[r->base] = r;
    next_seq_ += static_cast<uint64_t>(n);
    *request = r;
    return progress();
  }

  Status progress();
  Status error_;

 private:
  struct RStream {
    int fd = -1;
    int rail = 0;
    enum { Hdr, Payload, Discard } st = Hdr;
    ChunkHdr h{};
    size_t hoff = 0;
    size_t poff = 0;
    std::string acks;  // not yet written
    // written, and not yet all acknowledged by TCP: sent again by another
    // rail's stream when this one's way back retransmits (way_back())
    std::string recent;
    Clock::time_point stuck_since{}, checked{};
    bool dead = false;
  };
  void way_back(Clock::time_point now);
  // writes what it can of st.acks, keeping it in st.recent
  static void flush_acks(RStream& st);
  void add(const ListenSet::Arrived& a) {
    RStream st;
    st.fd = a.fd;
    st.rail = a.rail;
    streams_.push_back(std::move(st));
  }
  // the receive a seq belongs to (and its sub, once matched); null if done or not posted
  RecvReq* group_of(uint64_t seq) {
    auto it = groups_.upper_bound(seq);
    if (it == groups_.begin()) return nullptr;
    --it;
    RecvReq* r = it->second;
    return seq < r->base + static_cast<uint64_t>(r->n) ? r : nullptr;
  }
  RecvSub* sub_of(uint64_t seq) {
    RecvReq* r = group_of(seq);
    if (!r) return nullptr;
    for (int i = 0; i < r->n; ++i) {
      RecvSub& s = r->subs[static_cast<size_t>(i)];
      if (s.matched && s.seq == seq) return s.done ? nullptr : &s;
    }
    return nullptr;
  }
  bool complete(uint64_t seq) {
    // posted, and either not in a live group or its sub is done
    if (seq >= next_seq_) return false;
    RecvReq* r = group_of(seq);
    if (!r) return true;
    for (int i = 0; i < r->n; ++i) {
      RecvSub& s = r->subs[static_cast<size_t>(i)];
      if (s.matched && s.seq == seq) return s.done;
    }
    return false;
  }
  Status start_chunk(RStream& st);
  Status read_stream(RStream& st);
  void finish_chunk(RStream& st);

  Settings s_;
  std::shared_ptr<ListenSet> ls_;
  uint64_t id_;
  std::vector<RStream> streams_;
  std::vector<pollfd> pfds_;  // progress()'s, kept to spare an allocation a call
  std::array<RecvReq, kMaxRequests> reqs_;
  std::map<uint64_t, RecvReq*> groups_;  // by base seq
  uint64_t next_seq_ = 0;
  Clock::time_point no_stream_since_;
  char scratch_[65536];
  friend class RecvReq;
};

Status RecvConnImpl::start_chunk(RStream& st) {
  const ChunkHdr& h = st.h;
  st.poff = 0;
  if (complete(h.seq) || (h.seq < next_seq_ && !group_of(h.seq))) {
    st.st = RStream::Discard;  // a chunk sent again for a message already whole
    return {};
  }
  RecvReq* r = group_of(h.seq);
  RecvSub* sub = nullptr;
  for (int i = 0; r && i < r->n; ++i) {
    RecvSub& s = r->subs[static_cast<size_t>(i)];
    if (s.matched && s.seq == h.seq) sub = &s;
  }
  if (!sub) {
    // the first chunk of this message: match it to a receive of the group by tag
    for (int i = 0; r && i < r->n && !sub; ++i) {
      RecvSub& s = r->subs[static_cast<size_t>(i)];
      if (!s.matched && s.tag == h.tag) sub = &s;
    }
    if (!sub)
      return Status::fail(Err::Internal, "a message with tag " + std::to_string(h.tag) +
                                             " matches no receive of its group");
    if (h.total > sub->cap)
      return Status::fail(Err::Invalid, "a message of " + std::to_string(h.total) +
                                            " bytes is larger than its receive of " +
                                            std::to_string(sub->cap));
    sub->matched = true;
    sub->seq = h.seq;
    sub->total = h.total;
  }
  if (h.offset + h.len > sub->total)
    return Status::fail(Err::Internal, "a chunk beyond its message's end");
  st.st = RStream::Payload;
  return {};
}

void RecvConnImpl::finish_chunk(RStream& st) {
  const ChunkHdr& h = st.h;
  if (st.st == RStream::Payload) {
    if (RecvSub* sub = sub_of(h.seq); sub && sub->offsets.insert(h.offset).second) {
      sub->got += h.len;
      if (sub->got >= sub->total) {
        sub->done = true;
        sub->offsets.clear();
        if (RecvReq* r = group_of(h.seq)) ++r->ndone;
      }
    }
  }
  Ack a{h.seq, h.offset};
  st.acks.append(reinterpret_cast<const char*>(&a), sizeof(a));
  st.st = RStream::Hdr;
  st.hoff = 0;
}

Status RecvConnImpl::read_stream(RStream& st) {
  size_t budget = 8u << 20;  // bytes a call, so that one stream does not starve the others
  while (!st.dead && budget) {
    if (st.st == RStream::Hdr) {
      if (st.hoff < sizeof(ChunkHdr)) {
        ssize_t n =
            ::recv(st.fd, reinterpret_cast<char*>(&st.h) + st.hoff, sizeof(ChunkHdr) - st.hoff, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
          st.dead = true;
          break;
        }
        if (n < 0) break;
        st.hoff += static_cast<size_t>(n);
        if (st.hoff < sizeof(ChunkHdr)) break;
      }
      if (st.h.total == kProbe) {
        Ack pong{st.h.seq, kProbe};
        st.acks.append(reinterpret_cast<const char*>(&pong), sizeof(pong));
        st.hoff = 0;
        continue;
      }
      if (st.h.seq >= next_seq_) break;  // its receive is not posted yet: leave it in the socket
      if (Status s = start_chunk(st); !s.ok()) return s;
      if (st.h.len == 0) {
        finish_chunk(st);
        continue;
      }
    }
    // a message that completed meanwhile (its chunk came again elsewhere): drop the rest
    if (st.st == RStream::Payload && !sub_of(st.h.seq)) st.st = RStream::Discard;
    size_t want = std::min<size_t>(st.h.len - st.poff, budget);
    char* dst = scratch_;
    if (st.st == RStream::Payload) {
      dst = sub_of(st.h.seq)->data + st.h.offset + st.poff;
    } else {
      want = std::min(want, sizeof(scratch_));
    }
    ssize_t n = ::recv(st.fd, dst, want, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      st.dead = true;
      break;
    }
    if (n < 0) break;
    st.poff += static_cast<size_t>(n);
    budget -= static_cast<size_t>(n);
    if (st.poff == st.h.len) finish_chunk(st);
  }
  flush_acks(st);
  return {};
}

void RecvConnImpl::flush_acks(RStream& st) {
  while (!st.dead && !st.acks.empty()) {
    ssize_t n = ::send(st.fd, st.acks.data(), st.acks.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) st.dead = true;
      break;
    }
    st.recent.append(st.acks, 0, static_cast<size_t>(n));
    st.acks.erase(0, static_cast<size_t>(n));
  }
  // (the newest acks, whole ones: the sender ignores what it has already)
  constexpr size_t kRecentMax = 4096 * sizeof(Ack);
  if (st.recent.size() > kRecentMax) {
    size_t cut = st.recent.size() - kRecentMax;
    st.recent.erase(0, cut + (sizeof(Ack) - cut % sizeof(Ack)) % sizeof(Ack));
  }
}

Status RecvConnImpl::progress() {
  if (!error_.ok()) return error_;
  ls_->poll_due();
  std::vector<ListenSet::Arrived> more;
  ls_->take(id_, &more);
  for (auto& a : more) add(a);
  // one poll() for every stream, then reads only where there is something
  // to do: most calls find nothing, and a recv() per stream per call was
  // most of the plugin's CPU (NCCL's proxy calls test() in a loop)
  pfds_.resize(streams_.size());
  for (size_t i = 0; i < streams_.size(); ++i) pfds_[i] = {streams_[i].fd, POLLIN, 0};
  if (!pfds_.empty() && ::poll(pfds_.data(), pfds_.size(), 0) < 0 && errno != EINTR)
    for (auto& p : pfds_) p.revents = POLLIN;  // (read them all: the reads tell what is wrong)
  for (size_t i = 0; i < streams_.size(); ++i) {
    auto& st = streams_[i];
    // a header read whose receive was not posted then, or ACKs not yet written
    bool owed = (st.st == RStream::Hdr && st.hoff == sizeof(ChunkHdr)) || !st.acks.empty();
    if (!pfds_[i].revents && !owed) continue;
    if (Status s = read_stream(st); !s.ok()) {
      error_ = s;
      return s;
    }
  }
  way_back(Clock::now());
  for (size_t i = 0; i < streams_.size();) {
    if (streams_[i].dead) {
      ::close(streams_[i].fd);
      streams_.erase(streams_.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  if (!streams_.empty()) {
    no_stream_since_ = Clock::now();
  } else if (!groups_.empty() && Clock::now() - no_stream_since_ > ms(s_.timeout_ms)) {
    error_ =
        Status::fail(Err::Remote, "no stream from the peer for " + std::to_string(s_.timeout_ms) +
                                      " ms with receives posted: every rail failed");
    DPN_WARN("%s", error_.message.c_str());
  }
  return error_;
}

// The way back: this end's acknowledgements travel on the stream their
// chunk came by, and a rail that loses what the peer sends here (a lossy
// or failing link in this direction only) holds them in TCP's backoff,
// while the sender's bytes were all delivered, so the sender sees no stall
// and waits (seconds, as the RTO doubles). A stream whose acks TCP has been
// retransmitting for half the stall time has them sent again by a stream
// of another rail; the sender takes an acknowledgement from any stream,
// once.
void RecvConnImpl::way_back(Clock::time_point now) {
  for (auto& st : streams_) {
    if (st.dead || st.recent.empty() || now - st.checked < ms(10)) continue;
    st.checked = now;
    tcp_info ti{};
    socklen_t len = sizeof(ti);
    if (::getsockopt(st.fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) continue;
    // (`recent` starts at an ack's first byte; a partly written one stays,
    // so that what is sent again is whole acks)
    const size_t whole = st.recent.size() - st.recent.size() % sizeof(Ack);
    if (ti.tcpi_unacked == 0) {  // every ack written was delivered
      st.recent.erase(0, whole);
      st.stuck_since = {};
      continue;
    }
    if (ti.tcpi_retransmits == 0 && ti.tcpi_backoff == 0) {
      st.stuck_since = {};
      continue;
    }
    if (st.stuck_since == Clock::time_point{}) st.stuck_since = now;
    if (now - st.stuck_since < ms(s_.stall_ms) / 2) continue;
    RStream* other = nullptr;
    for (auto& o : streams_)
      if (!o.dead && o.rail != st.rail && (!other || o.recent.size() < other->recent.size()))
        other = &o;
    if (!other || whole == 0) continue;
    DPN_TRACE(
        "recv %llx: %zu acknowledgements on rail %d sent again by rail %d: its way back "
        "retransmits (%u retransmissions, backoff %u)",
        static_cast<unsigned long long>(id_), whole / sizeof(Ack), st.rail, other->rail,
        static_cast<unsigned>(ti.tcpi_retransmits), static_cast<unsigned>(ti.tcpi_backoff));
    // (a stream's unwritten acks end at an ack's last byte: these follow whole)
    other->acks.append(st.recent, 0, whole);
    st.recent.erase(0, whole);
    st.stuck_since = {};
    flush_acks(*other);  // what is left, by its next progress
  }
}

Status RecvReq::test(bool* done, int* sizes) {
  std::lock_guard<std::mutex> g(conn->mu_);
  *done = false;
  Status s = conn->progress();
  if (!s.ok()) return s;
  if (ndone < n) return {};
  *done = true;
  for (int i = 0; i < n; ++i)
    if (sizes) sizes[i] = static_cast<int>(subs[static_cast<size_t>(i)].total);
  conn->groups_.erase(base);
  used = false;
  return {};
}

class ListenerImpl final : public Listener {
 public:
  ListenerImpl(const Settings& s, std::shared_ptr<ListenSet> ls) : s_(s), ls_(std::move(ls)) {}
  Status accept(std::unique_ptr<RecvConn>* out) override {
    out->reset();
    ls_->poll();
    uint64_t id = 0;
    std::vector<ListenSet::Arrived> first;
    if (ls_->take_new(&id, &first)) *out = std::make_unique<RecvConnImpl>(s_, ls_, id, first);
    return {};
  }

 private:
  Settings s_;
  std::shared_ptr<ListenSet> ls_;
};

// ------------------------------------------------------------------ send

class SendConnImpl;

struct SendChunk {
  uint64_t off;
  uint32_t len;
  bool acked = false;
};

class SendReq final : public Request {
 public:
  SendConnImpl* conn = nullptr;
  bool used = false;
  uint64_t seq = 0;
  const char* data = nullptr;
  size_t size = 0;
  int tag = 0;
  std::string klass;  // the class it was placed in ("" without dualpathd)
  std::vector<SendChunk> chunks;
  size_t nacked = 0;
  Status test(bool* done, int* sizes) override;
};

struct ChunkRef {
  SendReq* r;
  uint32_t idx;
};

class SendConnImpl final : public SendConn {
 public:
  SendConnImpl(const Settings& s, const std::vector<Rail>& all, std::vector<int> rails,
               const WireHandle& peer, PlacementFn placement, std::string label)
      : s_(s), placement_fn_(std::move(placement)), label_(std::move(label)), id_(random_id()) {
    for (auto& r : reqs_) r.conn = this;
    for (size_t k = 0; k < rails.size(); ++k) {
      RailState rs;
      rs.rail = all[static_cast<size_t>(rails[k])];
      const WireRail& w = peer.rail[k % peer.nrails];
      rs.peer = to_sockaddr(w, &rs.peerlen);
      if (rs.peer.ss_family != rs.rail.addr.ss_family) {
        // the peer's rail has an address of the other family only: no route between them
        rs.usable = false;
        rs.reason = "the peer's address on this rail is of another family";
      }
      int n = s.streams_per_rail;
      if (!n) {
        uint64_t gbps = rs.rail.capacity_bps / 1000000000ULL;
        n = std::clamp(static_cast<int>((gbps + 24) / 25), 2, 8);
      }
      for (int i = 0; i < n; ++i) {
        SStream st;
        st.rail = static_cast<int>(k);
        st.index = i;
        streams_.push_back(st);
      }
      rails_.push_back(std::move(rs));
    }
    assigned_.assign(rails_.size(), 0.0);
    placement_ = placement_fn_();
    log_placement("placed", placement_);
    no_live_since_ = created_ = Clock::now();
  }
  ~SendConnImpl() override {
    for (auto& st : streams_)
      if (st.fd >= 0) ::close(st.fd);
  }

  // connect's loop: true when the connection can carry messages
  Status establish(bool* ready) {
    *ready = false;
    Status s = progress();
    if (!s.ok()) return s;
    bool pending = false, live = false;
    for (auto& st : streams_) {
      pending = pending || st.state == SStream::Connecting || st.state == SStream::Greeting;
      live = live || st.state == SStream::Live;
    }
    *ready = live && !pending;
    if (!live && Clock::now() - created_ > ms(s_.timeout_ms)) {
      std::string why;
      for (auto& rs : rails_)
        why += (why.empty() ? "" : "; ") + rs.rail.name + ": " +
               (rs.reason.empty() ? "no answer" : rs.reason);
      return Status::fail(Err::System, "cannot connect on any rail within " +
                                           std::to_string(s_.timeout_ms) + " ms (" + why + ")");
    }
    return {};
  }

  Status isend(const void* data, size_t size, int tag, Request** request) override {
    *request = nullptr;
    if (!error_.ok()) return error_;
    SendReq* r = nullptr;
    for (auto& x : reqs_)
      if (!x.used) {
        r = &x;
        break;
      }
    if (!r) return progress();
    r->used = true;
    r->seq = next_seq_++;
    r->data = static_cast<const char*>(data);
    r->size = size;
    r->tag = tag;
    r->nacked = 0;
    r->chunks.clear();
    size_t cb = s_.chunk_bytes;
    if (size == 0) r->chunks.push_back({0, 0});
    for (size_t off = 0; off < size; off += cb)
      r->chunks.push_back({off, static_cast<uint32_t>(std::min(cb, size - off))});
    by_seq_[r->seq] = r;
    for (uint32_t i = 0; i < r->chunks.size(); ++i) pending_.push_back({r, i});
    Placement p = placement_fn_();
    if (!(p == placement_)) {
      bool moved = p.klass == placement_.klass;
      std::string line = log_placement(moved ? "moved" : "placed", p);
      if (moved && !p.klass.empty()) traffic().moved(p.klass, line);
      placement_ = p;
      std::fill(assigned_.begin(), assigned_.end(), 0.0);
    }
    r->klass = placement_.klass;
    *request = r;
    return progress();
  }

  Status progress();
  Status error_;

 private:
  struct RailState {
    Rail rail;
    sockaddr_storage peer{};
    socklen_t peerlen = 0;
    bool usable = true;
    bool failed = false;
    Clock::time_point retry_at{};
    std::string reason;
  };
  struct SStream {
    int fd = -1;
    int rail = 0;
    int index = 0;
    enum { Down, Connecting, Greeting, Live } state = Down;
    Clock::time_point started{}, last_progress{}, busy_since{}, last_check{};
    bool busy = false;
    // the loss window: when it began, and the segments sent and sent again by then
    Clock::time_point loss_at{};
    uint32_t segs_at = 0, retrans_at = 0;
    int lossy_windows = 0;  // in a row
    // when TCP last acknowledged new bytes of it (tcpi_bytes_acked moved)
    uint64_t bytes_acked = 0;
    Clock::time_point acked_at{};
    bool probed = false;     // a probe is out, not answered
    std::deque<ChunkRef> q;  // assigned, not yet acknowledged, in write order
    size_t wi = 0;           // q[0..wi) written
    size_t woff = 0;         // bytes of q[wi] (header, then payload) written
    ChunkHdr whdr{};
    uint64_t unacked = 0;
    Ack abuf{};
    size_t aoff = 0;
    Hello hello{};
    size_t hoff = 0;
  };

  // Logs a placement; returns the line (for dualpathd's events).
  std::string log_placement(const char* what, const Placement& p) {
    std::string shares;
    for (size_t i = 0; i < rails_.size(); ++i) {
      char b[96];
      std::snprintf(b, sizeof(b), "%s%s %.0f%%%s", i ? ", " : "", rails_[i].rail.name.c_str(),
                    100.0 * p.share[i], p.up[i] ? "" : " (down)");
      shares += b;
    }
    std::string line = label_ + ": " + what + " in class " +
                       (p.klass.empty() ? "(none)" : p.klass) + " (" + p.why + "): " + shares;
    DPN_INFO("%s", line.c_str());
    return line;
  }
  void open_stream(SStream& st, Clock::time_point now);
  void fail_stream(SStream& st, const std::string& why, bool whole_rail);
  void requeue(SStream& st);
  Status write_stream(SStream& st);
  void read_acks(SStream& st);
  void check_stall(SStream& st, Clock::time_point now);
  // another rail has a live stream: a failed rail's chunks have somewhere to go
  bool live_elsewhere(int rail) const {
    return std::any_of(streams_.begin(), streams_.end(), [&](const SStream& o) {
      return o.rail != rail && o.state == SStream::Live;
    });
  }
  bool lossy(SStream& st, const tcp_info& ti, socklen_t len, Clock::time_point now);
  void probe(SStream& st, Clock::time_point now);
  void schedule();
  void on_ack(const Ack& a, SStream& st);

  Settings s_;
  PlacementFn placement_fn_;
  std::string label_;
  uint64_t id_;
  std::vector<RailState> rails_;
  std::vector<SStream> streams_;
  // progress()'s: the live streams polled for ACKs (kept to spare an allocation a call)
  std::vector<pollfd> pfds_;
  std::vector<SStream*> live_of_;
  std::array<SendReq, kMaxRequests * kMaxRecvs> reqs_;
  std::unordered_map<uint64_t, SendReq*> by_seq_;
  std::deque<ChunkRef> pending_;
  Placement placement_;
  std::vector<double> assigned_;  // bytes given to each rail since the shares changed
  uint64_t next_seq_ = 0;
  uint64_t written_ = 0;
  bool fault_done_ = false;
  Clock::time_point no_live_since_, created_;
  friend class SendReq;
};

void SendConnImpl::open_stream(SStream& st, Clock::time_point now) {
  RailState& rs = rails_[static_cast<size_t>(st.rail)];
  std::string error;
  int fd = rail_socket(rs.rail, &error);
  if (fd < 0) {
    rs.reason = error;
    rs.retry_at = now + ms(s_.reopen_ms);
    return;
  }
  set_rto_min(fd, s_.rto_min_ms);
  int r = ::connect(fd, reinterpret_cast<sockaddr*>(&rs.peer), rs.peerlen);
  if (r != 0 && errno != EINPROGRESS) {
    rs.reason = "connect to " + address_string(rs.peer) + ": " + errstr(errno);
    rs.retry_at = now + ms(s_.reopen_ms);
    ::close(fd);
    return;
  }
  st.fd = fd;
  st.state = SStream::Connecting;
  st.started = now;
  st.loss_at = {};  // a new socket: its counters start again
  st.lossy_windows = 0;
  st.bytes_acked = 0;
  st.acked_at = now;
  st.probed = false;
  st.hello = Hello{kHelloMagic, kVersion, static_cast<uint8_t>(st.rail),
                   static_cast<uint8_t>(st.index), id_};
  st.hoff = 0;
}

void SendConnImpl::requeue(SStream& st) {
  // unacknowledged chunks go first, before what was never assigned
  for (auto it = st.q.rbegin(); it != st.q.rend(); ++it)
    if (!it->r->chunks[it->idx].acked) pending_.push_front(*it);
  st.q.clear();
  st.wi = st.woff = 0;
  st.unacked = 0;
}

void SendConnImpl::fail_stream(SStream& st, const std::string& why, bool whole_rail) {
  RailState& rs = rails_[static_cast<size_t>(st.rail)];
  auto now = Clock::now();
  size_t moved = 0;
  uint64_t bytes = 0;
  for (auto& st2 : streams_) {
    if (st2.rail != st.rail || (!whole_rail && &st2 != &st)) continue;
    for (auto& c : st2.q)
      if (!c.r->chunks[c.idx].acked) {
        ++moved;
        bytes += c.r->chunks[c.idx].len;
      }
    requeue(st2);
    if (st2.fd >= 0) {
      ::shutdown(st2.fd, SHUT_RDWR);
      ::close(st2.fd);
    }
    st2.fd = -1;
    st2.state = SStream::Down;
  }
  bool was_failed = rs.failed;
  rs.reason = why;
  rs.retry_at = now + ms(s_.reopen_ms);
  if (whole_rail) rs.failed = true;
  if (was_failed && moved == 0) {
    DPN_TRACE("%s: %s still failed (%s)", label_.c_str(), rs.rail.name.c_str(), why.c_str());
    return;
  }
  std::string to;
  for (auto& o : rails_)
    if (&o != &rs) to += (to.empty() ? "" : ", ") + o.rail.name;
  char line[512];
  std::snprintf(
      line, sizeof(line), "%s: class %s: %s %s (%s): %zu chunks (%llu bytes) in flight move to %s",
      label_.c_str(), placement_.klass.empty() ? "(none)" : placement_.klass.c_str(),
      rs.rail.name.c_str(), whole_rail ? "failed" : "lost a stream", why.c_str(), moved,
      static_cast<unsigned long long>(bytes), to.empty() ? "its other streams" : to.c_str());
  DPN_INFO("%s", line);
  if (!placement_.klass.empty()) traffic().moved(placement_.klass, line);
}

void SendConnImpl::on_ack(const Ack& a, SStream& st) {
  if (a.offset == kProbe) {  // the way back works
    // (the receiver may have sent it again by another rail: any stream's)
    for (auto& x : streams_) x.probed = false;
    st.last_progress = Clock::now();
    return;
  }
  auto it = by_seq_.find(a.seq);
  if (it == by_seq_.end()) return;  // a message already whole: a repeated chunk's ack
  SendReq* r = it->second;
  if (a.offset / s_.chunk_bytes >= r->chunks.size()) return;
  auto idx = static_cast<uint32_t>(a.offset / s_.chunk_bytes);
  SendChunk& c = r->chunks[idx];
  if (c.acked) return;
  c.acked = true;
  ++r->nacked;
  // drop it from the stream that holds it (the one the ack came on, unless
  // it was moved, or the receiver sent the ack again by another rail): its
  // rail carried it
  SStream* holder = &st;
  auto drop = [&](SStream& x) {
    for (size_t i = 0; i < x.q.size(); ++i) {
      if (x.q[i].r != r || x.q[i].idx != idx) continue;
      holder = &x;
      if (i == x.wi && x.woff > 0) return true;  // being written: dropped when written
      x.q.erase(x.q.begin() + static_cast<ptrdiff_t>(i));
      if (i < x.wi) --x.wi;
      x.unacked -= c.len;
      return true;
    }
    return false;
  };
  if (!drop(st))
    for (auto& x : streams_)
      if (&x != &st && drop(x)) break;
  if (!r->klass.empty())
    traffic().sent(r->klass, rails_[static_cast<size_t>(holder->rail)].rail.name, c.len);
  st.last_progress = holder->last_progress = Clock::now();
  if (r->nacked == r->chunks.size()) by_seq_.erase(it);
}

void SendConnImpl::read_acks(SStream& st) {
  for (;;) {
    ssize_t n = ::recv(st.fd, reinterpret_cast<char*>(&st.abuf) + st.aoff, sizeof(Ack) - st.aoff,
                       MSG_DONTWAIT);
    if (n == 0) {
      fail_stream(st, "the stream was closed", false);
      return;
    }
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) fail_stream(st, errstr(errno), false);
      return;
    }
    st.aoff += static_cast<size_t>(n);
    if (st.aoff == sizeof(Ack)) {
      st.aoff = 0;
      on_ack(st.abuf, st);
    }
  }
}

Status SendConnImpl::write_stream(SStream& st) {
  while (st.state == SStream::Live && st.wi < st.q.size()) {
    ChunkRef c = st.q[st.wi];
    const SendChunk& ch = c.r->chunks[c.idx];
    if (st.woff == 0 && ch.acked) {
      st.unacked -= ch.len;
      st.q.erase(st.q.begin() + static_cast<ptrdiff_t>(st.wi));
      continue;
    }
    if (st.woff == 0) st.whdr = ChunkHdr{c.r->seq, ch.off, c.r->size, ch.len, c.r->tag};
    iovec iov[2];
    int cnt = 0;
    if (st.woff < sizeof(ChunkHdr)) {
      iov[cnt++] = {reinterpret_cast<char*>(&st.whdr) + st.woff, sizeof(ChunkHdr) - st.woff};
      iov[cnt++] = {const_cast<char*>(c.r->data + ch.off), ch.len};
    } else {
      size_t done = st.woff - sizeof(ChunkHdr);
      iov[cnt++] = {const_cast<char*>(c.r->data + ch.off + done), ch.len - done};
    }
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(cnt);
    ssize_t n = ::sendmsg(st.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) fail_stream(st, errstr(errno), false);
      break;
    }
    st.woff += static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
    if (st.woff == sizeof(ChunkHdr) + ch.len) {
      st.woff = 0;
      if (ch.acked) {  // acknowledged while it was written (a repeat): nothing to wait for
        st.unacked -= ch.len;
        st.q.erase(st.q.begin() + static_cast<ptrdiff_t>(st.wi));
      } else {
        ++st.wi;
      }
    }
    if (s_.fault_rail == st.rail && !fault_done_ && written_ >= s_.fault_after) {
      // testing aid: the stream fails under the sender, as a reset from the peer would
      fault_done_ = true;
      ::shutdown(st.fd, SHUT_RDWR);
    }
  }
  return {};
}

// The rail's interface has its carrier (up and running); asked through any
// socket of the node's namespace.
bool carrier(int fd, const std::string& ifname) {
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
  if (::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) return true;  // cannot tell: the stall check decides
  return (ifr.ifr_flags & IFF_UP) && (ifr.ifr_flags & IFF_RUNNING);
}

// A rail that loses much of what it carries still acknowledges some of it,
// so no stall is declared, and a transfer crawls through TCP's backoff: a
// stream that, in kLossWindows windows of kLossWindow in a row, sent at
// least kLossMinSegments and sent NCCL_DUALPATH_LOSS_PCT of them again
// fails its rail while another rail has a live stream (the rail rests and
// reopens as after a stall). One window is not enough: a stream's start
// into a shaped rail loses a fifth of a window's segments (seen in the lab).
bool SendConnImpl::lossy(SStream& st, const tcp_info& ti, socklen_t len, Clock::time_point now) {
  constexpr auto kLossWindow = std::chrono::milliseconds(100);
  constexpr int kLossWindows = 3;
  constexpr uint32_t kLossMinSegments = 64;
  if (s_.loss_pct <= 0 || len < offsetof(tcp_info, tcpi_segs_out) + sizeof(ti.tcpi_segs_out))
    return false;
  if (st.loss_at == Clock::time_point{}) {
    st.loss_at = now;
    st.segs_at = ti.tcpi_segs_out;
    st.retrans_at = ti.tcpi_total_retrans;
    return false;
  }
  if (now - st.loss_at < kLossWindow) return false;
  const uint32_t segs = ti.tcpi_segs_out - st.segs_at,
                 again = ti.tcpi_total_retrans - st.retrans_at;
  const auto window_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - st.loss_at);
  st.loss_at = now;
  st.segs_at = ti.tcpi_segs_out;
  st.retrans_at = ti.tcpi_total_retrans;
  if (segs < kLossMinSegments ||
      uint64_t{again} * 100 < uint64_t{segs} * static_cast<uint64_t>(s_.loss_pct)) {
    st.lossy_windows = 0;
    return false;
  }
  if (++st.lossy_windows < kLossWindows) return false;
  st.lossy_windows = 0;
  if (!live_elsewhere(st.rail)) return false;  // nowhere better to go: TCP carries on
  fail_stream(st,
              "loss: " + std::to_string(again) + " of " + std::to_string(segs) +
                  " segments sent again in the last " + std::to_string(window_ms.count()) +
                  " ms, and as many in the " + std::to_string(kLossWindows - 1) + " windows before",
              true);
  return true;
}

// Everything written was acknowledged by TCP, and a chunk's acknowledgement
// is overdue by half the stall time: the receiver has not posted its
// receive (it then answers once it reads on), or the way back failed, which
// TCP cannot see from this end. A probe's bytes tell them apart.
void SendConnImpl::probe(SStream& st, Clock::time_point now) {
  if (st.probed || st.q.empty() || st.wi < st.q.size() || st.woff > 0 ||
      now - st.last_progress < ms(s_.stall_ms) / 2)
    return;
  const ChunkRef& c = st.q.front();
  ChunkHdr h{c.r->seq, 0, kProbe, 0, 0};
  ssize_t n = ::send(st.fd, &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(sizeof(h))) {
    st.probed = true;
  } else if (n > 0) {
    // (an empty send buffer takes 32 bytes; a part of a header would
    // corrupt the stream)
    fail_stream(st, "a probe was cut short", false);
  }
}

void SendConnImpl::check_stall(SStream& st, Clock::time_point now) {
  if (now - st.last_check < ms(10)) return;
  st.last_check = now;
  const Rail& rail = rails_[static_cast<size_t>(st.rail)].rail;
  if (!carrier(st.fd, rail.ifname)) {
    fail_stream(st, "carrier lost on " + rail.ifname, true);
    return;
  }
  if (!st.unacked) return;
  tcp_info ti{};
  socklen_t len = sizeof(ti);
  if (::getsockopt(st.fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return;
  if (lossy(st, ti, len, now)) return;
  // segments sent and not acknowledged: a receiver that closed its window
  // (it has not posted the receive yet) leaves none, and is no stall
  if (ti.tcpi_unacked == 0) {
    st.busy = false;
    probe(st, now);
    return;
  }
  if (!st.busy) {
    st.busy = true;
    st.busy_since = now;
  }
  // With no other rail live, moving the chunks only waits for this rail to
  // reopen: a saturated rail whose tail drop waits out a timeout behind its
  // own queue is not failed for that (seen: 119 ms on the 250 Mbit/s rail
  // alone, then a 1.4 s round while it reopened); ten times the stall time
  // is, so that a stream that is truly gone is still opened again.
  const int stall_ms = live_elsewhere(st.rail) ? s_.stall_ms : 10 * s_.stall_ms;
  auto stall = ms(stall_ms);
  // how long TCP has acknowledged nothing new: an ACK that moves nothing
  // (a peer's retransmission carries one) is no sign that the rail works
  uint32_t no_ack_ms = ti.tcpi_last_ack_recv;
  if (len >= offsetof(tcp_info, tcpi_bytes_acked) + sizeof(ti.tcpi_bytes_acked)) {
    if (ti.tcpi_bytes_acked != st.bytes_acked) {
      st.bytes_acked = ti.tcpi_bytes_acked;
      st.acked_at = now;
    }
    no_ack_ms = static_cast<uint32_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(now - st.acked_at).count());
  }
  // a peer whose advertised window is closed is slow, not gone (kernels
  // before 6.2 do not report the window: len says whether the field came)
  bool window_closed =
      len >= offsetof(tcp_info, tcpi_snd_wnd) + sizeof(ti.tcpi_snd_wnd) && ti.tcpi_snd_wnd == 0;
  // bytes in flight, a retransmission timeout fired, and neither a TCP ACK
  // nor a chunk's acknowledgement for the stall time
  // (or four times the stall time without one, where retransmissions fail locally)
  bool retransmitting = ti.tcpi_retransmits > 0 || ti.tcpi_backoff > 0 ||
                        no_ack_ms > 4 * static_cast<uint32_t>(stall_ms);
  if (now - st.busy_since > stall && now - st.last_progress > stall &&
      no_ack_ms > static_cast<uint32_t>(stall_ms) && retransmitting && !window_closed) {
    fail_stream(st,
                "stall: " + std::to_string(ti.tcpi_unacked) +
                    " segments unacknowledged, nothing new acknowledged for " +
                    std::to_string(no_ack_ms) + " ms, " + std::to_string(ti.tcpi_retransmits) +
                    " retransmissions",
                true);
  }
}

void SendConnImpl::schedule() {
  while (!pending_.empty()) {
    ChunkRef c = pending_.front();
    if (c.r->chunks[c.idx].acked) {
      pending_.pop_front();
      continue;
    }
    uint32_t len = c.r->chunks[c.idx].len;
    // the rail furthest behind its share, among those with a live stream
    int best = -1;
    double best_v = 0;
    bool any_share = false;
    for (size_t k = 0; k < rails_.size(); ++k) {
      bool live = false;
      for (auto& st : streams_)
        live = live || (st.rail == static_cast<int>(k) && st.state == SStream::Live);
      if (!live || rails_[k].failed) continue;
      double share = placement_.share[k];
      if (share <= 0) continue;
      any_share = true;
      double v = (assigned_[k] + len) / share;
      if (best < 0 || v < best_v) {
        best = static_cast<int>(k);
        best_v = v;
      }
    }
    if (!any_share) {
      // the decision's rails are all failed: any live rail carries the class meanwhile
      for (size_t k = 0; k < rails_.size() && best < 0; ++k)
        for (auto& st : streams_)
          if (st.rail == static_cast<int>(k) && st.state == SStream::Live)
            best = static_cast<int>(k);
    }
    if (best < 0) return;
    SStream* pick = nullptr;
    for (auto& st : streams_) {
      if (st.rail != best || st.state != SStream::Live) continue;
      if (st.unacked + len > s_.window_bytes && st.unacked > 0) continue;
      if (!pick || st.unacked < pick->unacked) pick = &st;
    }
    if (!pick) return;  // that rail's window is full: wait rather than skew the split
    pending_.pop_front();
    pick->q.push_back(c);
    if (pick->unacked == 0) pick->last_progress = Clock::now();
    pick->unacked += len;
    assigned_[static_cast<size_t>(best)] += len;
  }
}

Status SendConnImpl::progress() {
  if (!error_.ok()) return error_;
  auto now = Clock::now();
  pfds_.clear();
  live_of_.clear();
  for (auto& st : streams_) {
    RailState& rs = rails_[static_cast<size_t>(st.rail)];
    bool allowed = rs.usable && placement_.up[static_cast<size_t>(st.rail)];
    if (st.state == SStream::Down) {
      if (allowed && now >= rs.retry_at) {
        int probe = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        bool up = probe < 0 || carrier(probe, rs.rail.ifname);
        if (probe >= 0) ::close(probe);
        if (up) {
          open_stream(st, now);
        } else {
          rs.reason = "carrier lost on " + rs.rail.ifname;
          rs.retry_at = now + ms(std::min(s_.reopen_ms, 100));
        }
      }
      continue;
    }
    if (!allowed) {
      fail_stream(st, "dualpathd reports the rail down", true);
      continue;
    }
    if (st.state == SStream::Connecting) {
      pollfd p{st.fd, POLLOUT, 0};
      if (::poll(&p, 1, 0) > 0) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(st.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
          fail_stream(st, "connect to " + address_string(rs.peer) + ": " + errstr(err), false);
          continue;
        }
        st.state = SStream::Greeting;
      } else if (now - st.started > ms(std::max(1000, s_.stall_ms * 5))) {
        fail_stream(st, "connect to " + address_string(rs.peer) + ": no answer", false);
        continue;
      }
    }
    if (st.state == SStream::Greeting) {
      ssize_t n = ::send(st.fd, reinterpret_cast<char*>(&st.hello) + st.hoff,
                         sizeof(Hello) - st.hoff, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        fail_stream(st, errstr(errno), false);
        continue;
      }
      if (n > 0) st.hoff += static_cast<size_t>(n);
      if (st.hoff < sizeof(Hello)) continue;
      st.state = SStream::Live;
      st.last_progress = now;
      if (rs.failed) {
        rs.failed = false;
        std::string line = label_ + ": class " +
                           (placement_.klass.empty() ? "(none)" : placement_.klass) + ": " +
                           rs.rail.name + " reopened, back to the decision's shares";
        DPN_INFO("%s", line.c_str());
        if (!placement_.klass.empty()) traffic().moved(placement_.klass, line);
        std::fill(assigned_.begin(), assigned_.end(), 0.0);
      }
    }
    if (st.state == SStream::Live) {
      pfds_.push_back({st.fd, POLLIN, 0});
      live_of_.push_back(&st);
    }
  }
  // the ACKs of every live stream with one poll() (most calls find none)
  if (!pfds_.empty() && ::poll(pfds_.data(), pfds_.size(), 0) < 0 && errno != EINTR)
    for (auto& p : pfds_) p.revents = POLLIN;
  for (size_t i = 0; i < pfds_.size(); ++i)
    if (pfds_[i].revents && live_of_[i]->state == SStream::Live) read_acks(*live_of_[i]);
  schedule();
  bool live = false;
  for (auto& st : streams_) {
    if (st.state != SStream::Live) continue;
    if (Status s = write_stream(st); !s.ok()) return error_ = s;
    if (st.state == SStream::Live) check_stall(st, now);
    live = live || st.state == SStream::Live;
  }
  bool work = !pending_.empty() || !by_seq_.empty();
  if (live || !work) {
    no_live_since_ = now;
  } else if (now - no_live_since_ > ms(s_.timeout_ms)) {
    std::string why;
    for (auto& rs : rails_)
      why += (why.empty() ? "" : "; ") + rs.rail.name + ": " +
             (rs.reason.empty() ? "down" : rs.reason);
    error_ = Status::fail(Err::Remote, "every rail failed for more than " +
                                           std::to_string(s_.timeout_ms) + " ms (" + why + ")");
    DPN_WARN("%s: %s", label_.c_str(), error_.message.c_str());
  }
  return error_;
}

// At most once a millisecond per thread, and never waiting for a lock.
void progress_idle_receivers() {
  thread_local Clock::time_point last{};
  auto now = Clock::now();
  if (now - last < std::chrono::milliseconds(1)) return;
  last = now;
  std::unique_lock<std::mutex> lk(g_recvs_mu, std::try_to_lock);
  if (!lk.owns_lock()) return;
  for (RecvConnImpl* r : g_recvs) r->progress_if_idle();
}

Status SendReq::test(bool* done, int* sizes) {
  *done = false;
  Status s = conn->progress();
  if (!s.ok()) return s;
  progress_idle_receivers();
  if (nacked < chunks.size()) return {};
  *done = true;
  if (sizes) *sizes = static_cast<int>(size);
  used = false;
  return {};
}

// ------------------------------------------------------------------ transport

class TcpTransport final : public Transport {
 public:
  TcpTransport(const Settings& s, std::vector<Rail> rails) : s_(s), rails_(std::move(rails)) {}

  Status listen(const std::vector<int>& rails, void* handle,
                std::unique_ptr<Listener>* out) override {
    auto ls = std::make_shared<ListenSet>();
    ls->rto_min_ms = s_.rto_min_ms;
    WireHandle h{};
    h.magic = kHandleMagic;
    h.version = static_cast<uint8_t>(kVersion);
    h.listen_id = random_id();
    for (int idx : rails) {
      if (h.nrails == kMaxRails) break;
      const Rail& r = rails_[static_cast<size_t>(idx)];
      int fd = ::socket(r.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) return Status::fail(Err::System, "socket: " + errstr(errno));
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_storage a = r.addr;
      set_port(&a, 0);
      if (::bind(fd, reinterpret_cast<sockaddr*>(&a), r.addrlen) != 0 || ::listen(fd, 128) != 0) {
        int e = errno;
        ::close(fd);
        return Status::fail(Err::System, "listening on " + address_string(r.addr) + " (" + r.name +
                                             "): " + errstr(e));
      }
      socklen_t len = sizeof(a);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
      ls->lfds_.push_back(fd);
      WireRail& w = h.rail[h.nrails++];
      if (a.ss_family == AF_INET) {
        auto* a4 = reinterpret_cast<sockaddr_in*>(&a);
        w.family = 4;
        w.port = a4->sin_port;
        std::memcpy(w.addr, &a4->sin_addr, 4);
      } else {
        auto* a6 = reinterpret_cast<sockaddr_in6*>(&a);
        w.family = 6;
        w.port = a6->sin6_port;
        std::memcpy(w.addr, &a6->sin6_addr, 16);
      }
    }
    std::memcpy(handle, &h, sizeof(h));
    *out = std::make_unique<ListenerImpl>(s_, ls);
    return {};
  }

  Status connect(const std::vector<int>& rails, void* handle, PlacementFn placement,
                 std::string label, std::unique_ptr<SendConn>* out) override {
    out->reset();
    auto* h = static_cast<WireHandle*>(handle);
    if (h->magic != kHandleMagic || h->version != kVersion || h->nrails == 0 ||
        h->nrails > kMaxRails)
      return Status::fail(Err::Invalid,
                          "the peer's handle is not a dualpath handle of this version (is the "
                          "peer running the same plugin?)");
    auto* conn = static_cast<SendConnImpl*>(h->stage);
    if (!conn) {
      conn = new SendConnImpl(s_, rails_, rails, *h, std::move(placement), std::move(label));
      h->stage = conn;
    }
    bool ready = false;
    Status s = conn->establish(&ready);
    if (!s.ok()) {
      h->stage = nullptr;
      delete conn;
      return s;
    }
    if (ready) {
      h->stage = nullptr;
      out->reset(conn);
    }
    return {};
  }

 private:
  Settings s_;
  std::vector<Rail> rails_;
};

}  // namespace

std::unique_ptr<Transport> make_tcp_transport(const Settings& settings, std::vector<Rail> rails) {
  return std::make_unique<TcpTransport>(settings, std::move(rails));
}

}  // namespace dpnccl
