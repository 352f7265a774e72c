// SPDX-License-Identifier: Apache-2.0
// The plugin's transport, behind a small interface: plugin.cpp speaks NCCL's
// ABI and places requests; a transport moves bytes over the rails it is
// given. TCP (tcp_transport.cpp) is the one this product ships; a verbs
// transport would implement the same four classes.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon_view.h"
#include "settings.h"

namespace dpnccl {

enum class Err { None, System, Invalid, Remote, Internal };

struct Status {
  Err err = Err::None;
  std::string message;
  bool ok() const { return err == Err::None; }
  static Status fail(Err e, std::string m) { return {e, std::move(m)}; }
};

// A request in flight. test() moves the connection along; done when all of
// its bytes are sent (and acknowledged) or received; sizes gets one size per
// receive of a group (one for a send).
class Request {
 public:
  virtual ~Request() = default;
  virtual Status test(bool* done, int* sizes) = 0;
};

// What a send connection asks before each message: the message's class and
// the share of each of its rails (in the order of the rails it was given).
using PlacementFn = std::function<Placement()>;

class SendConn {
 public:
  virtual ~SendConn() = default;
  // *request is null when the connection has no free slot (NCCL tries later).
  virtual Status isend(const void* data, size_t size, int tag, Request** request) = 0;
};

class RecvConn {
 public:
  virtual ~RecvConn() = default;
  virtual Status irecv(int n, void** data, const size_t* sizes, const int* tags,
                       Request** request) = 0;
};

class Listener {
 public:
  virtual ~Listener() = default;
  // Never blocks: *out stays null until a peer's connection is there.
  virtual Status accept(std::unique_ptr<RecvConn>* out) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Listens on the given rails (indexes into the transport's rails) and
  // writes the handle the peer connects to (at most NCCL_NET_HANDLE_MAXSIZE).
  virtual Status listen(const std::vector<int>& rails, void* handle,
                        std::unique_ptr<Listener>* out) = 0;
  // Never blocks: called again with the same handle until *out is set; the
  // state in between lives in the handle (as NCCL's own transports keep it).
  virtual Status connect(const std::vector<int>& rails, void* handle, PlacementFn placement,
                         std::string label, std::unique_ptr<SendConn>* out) = 0;
};

std::unique_ptr<Transport> make_tcp_transport(const Settings& settings, std::vector<Rail> rails);

// Requests a send connection may have in flight: NCCL's 32 times the grouped
// receives a peer may post (maxRecvs).
inline constexpr int kMaxRecvs = 8;
// What getProperties advertises as maxRecvs: 1, as NCCL's socket transport
// does. With more, NCCL shares one connection among the ranks of a node
// (PXN, and NCCL_NET_SHARED_COMMS) and groups their receives into one irecv,
// while those ranks post their sends each at its own pace: a transport that
// matches a group by the order of the sends, and cannot hold a send back
// until its receive is posted (as NCCL's IB transport does), would find a
// message that matches no receive of its group. Grouped receives of up to
// kMaxRecvs are still served, as the ABI allows.
inline constexpr int kAdvertisedRecvs = 1;
inline constexpr int kMaxRequests = 32;

}  // namespace dpnccl
