// SPDX-License-Identifier: Apache-2.0
// dualpath's NCCL net plugin: NCCL's ABI on one side (one set of functions
// with the newest signatures, then one table per ABI version, v6 to v12,
// whose wrappers narrow sizes and properties), the TCP transport on the
// other. Devices are the node's rails (dualpathd's paths, or the rails the
// environment names); each request's bytes are placed by its class's
// decision (daemon_view.h). No exception reaches NCCL: every entry point
// catches and returns an ncclResult_t.
#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon_view.h"
#include "dualpath/nccl/net.h"
#include "log.h"
#include "settings.h"
#include "transport.h"

namespace dpnccl {

namespace {

constexpr size_t kMaxNetSize = 1024L * 1024 * 1024;  // sizes travel as int in test()

// A communicator (v11+: one per init; older versions: one for the process,
// and one per connection where v10's connect names a traffic class).
struct Context {
  uint64_t comm_id = 0;
  int traffic_class = NCCL_NET_TRAFFIC_CLASS_UNDEF;
  std::atomic<uint32_t> op{static_cast<uint32_t>(NCCL_NET_ATTR_UNDEF)};
};

struct Device {
  std::string name;
  std::vector<int> rails;     // rails a connection on this device uses
  std::vector<int> physical;  // the physical devices it fuses (itself for one)
};

struct State {
  std::mutex mu;
  int refs = 0;
  Settings settings;
  std::vector<Rail> rails;
  // a deque: getProperties hands NCCL each device's name, which a later
  // makeVDevice must not move (NCCL reads the names of earlier devices after it)
  std::deque<Device> devices;
  bool discovered = false;  // rails and devices: once per load (init_once)
  std::unique_ptr<Transport> transport;
  DaemonView daemon;
  bool have_daemon = false;
  std::string cgroup;
  std::shared_ptr<Context> process_ctx = std::make_shared<Context>();
  ~State() { daemon.stop(); }
};

State& state() {
  static State s;
  return s;
}

struct ListenComm {
  std::unique_ptr<Listener> l;
};
struct SendComm {
  std::unique_ptr<SendConn> c;
};
struct RecvComm {
  std::unique_ptr<RecvConn> c;
};
struct MemHandle {
  void* data;
  size_t size;
  int type;
};

ncclResult_t to_nccl(const Status& s, const char* what) {
  if (s.ok()) return ncclSuccess;
  DPN_WARN("%s: %s", what, s.message.c_str());
  switch (s.err) {
    case Err::Invalid:
      return ncclInvalidUsage;
    case Err::Remote:
      return ncclRemoteError;
    case Err::Internal:
      return ncclInternalError;
    default:
      return ncclSystemError;
  }
}

// No exception reaches NCCL.
template <typename F>
ncclResult_t guard(const char* what, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    DPN_WARN("%s: %s", what, e.what());
  } catch (...) {
    DPN_WARN("%s: unexpected failure", what);
  }
  return ncclInternalError;
}

// Rails from the daemon's paths (their names, so that decisions map), or from
// the environment; NCCL_DUALPATH_RAILS wins where both exist.
bool discover(State& st, std::string* error) {
  std::string why;
  st.have_daemon = st.settings.use_daemon && st.daemon.start(st.settings.socket, &why);
  auto snap = st.have_daemon ? st.daemon.snapshot() : nullptr;
  if (!st.settings.rails_env.empty() || !snap) {
    if (!rails_from_env(st.settings, &st.rails, error)) return false;
    if (snap)
      for (auto& r : st.rails)
        for (auto& p : snap->paths)
          if (p.interface == r.ifname) {
            r.name = p.name;
            r.fwmark = p.fwmark;
            if (!r.capacity_bps) r.capacity_bps = p.capacity_bps;
          }
  } else {
    for (auto& p : snap->paths) {
      Rail r;
      r.name = p.name;
      r.ifname = p.interface;
      r.capacity_bps = p.capacity_bps;
      r.fwmark = p.fwmark;
      if (!interface_address(r.ifname, &r.addr, &r.addrlen)) {
        DPN_INFO("rail %s: interface %s has no address here: not used", r.name.c_str(),
                 r.ifname.c_str());
        continue;
      }
      fill_sysfs(&r);
      st.rails.push_back(std::move(r));
    }
    if (st.rails.empty()) {
      *error = "none of dualpathd's paths has an interface with an address here";
      return false;
    }
  }
  if (!st.have_daemon) {
    static std::once_flag once;
    std::call_once(once, [&] {
      std::string names;
      for (auto& r : st.rails) names += (names.empty() ? "" : ", ") + r.name;
      DPN_INFO("running without dualpathd (%s): rails %s from the environment, shares by capacity",
               st.settings.use_daemon ? why.c_str() : "NCCL_DUALPATH_DAEMON=0", names.c_str());
    });
  }
  if (!st.settings.klass.empty()) {
    if (snap && !snap->klass(st.settings.klass)) {
      std::string names;
      for (auto& c : snap->classes) names += (names.empty() ? "" : ", ") + c.name;
      *error = "NCCL_DUALPATH_CLASS=\"" + st.settings.klass +
               "\": dualpathd's policy has no such class (classes: " + names + ")";
      return false;
    }
    if (!snap)
      DPN_INFO("NCCL_DUALPATH_CLASS=%s has no effect without dualpathd", st.settings.klass.c_str());
  }
  for (size_t i = 0; i < st.rails.size(); ++i) {
    Device d;
    d.name = st.rails[i].name;
    d.physical = {static_cast<int>(i)};
    if (st.settings.spread) {
      // the decision places the bytes: every device's connections use every rail, its own first
      d.rails.push_back(static_cast<int>(i));
      for (size_t j = 0; j < st.rails.size(); ++j)
        if (j != i) d.rails.push_back(static_cast<int>(j));
    } else {
      d.rails = {static_cast<int>(i)};
    }
    st.devices.push_back(std::move(d));
  }
  std::string names;
  for (auto& r : st.rails)
    names +=
        (names.empty() ? "" : ", ") + r.name + " (" + r.ifname + " " + address_string(r.addr) + ")";
  DPN_INFO("rails: %s%s", names.c_str(), st.have_daemon ? ", from dualpathd" : "");
  return true;
}

ncclResult_t init_once(ncclDebugLogger_t logfn) {
  set_logger(logfn);
  State& st = state();
  std::lock_guard<std::mutex> g(st.mu);
  if (st.refs++ > 0) return ncclSuccess;
  if (!st.discovered) {
    std::string error;
    st.settings = Settings{};
    st.rails.clear();
    st.devices.clear();
    if (!load_settings(&st.settings, &error) || !discover(st, &error)) {
      DPN_WARN("init failed: %s; NCCL goes on without the dualpath plugin", error.c_str());
      st.daemon.stop();
      st.refs = 0;
      return ncclInvalidUsage;
    }
    st.discovered = true;
  } else {
    // a communicator after every earlier one was finalized, the library kept
    // loaded (NCCL_NET_PLUGIN_REF_COUNT): NCCL read devices() and made its
    // virtual devices on the first init of this load, so the rails and
    // devices stay as they were; only the daemon's view starts again
    std::string why;
    st.have_daemon = st.settings.use_daemon && st.daemon.start(st.settings.socket, &why);
    if (!st.have_daemon && st.settings.use_daemon)
      DPN_INFO("dualpathd is not reachable (%s): shares by the rails' capacity", why.c_str());
  }
  st.cgroup = own_cgroup();
  st.transport = make_tcp_transport(st.settings, st.rails);
  return ncclSuccess;
}

void release_once() {
  State& st = state();
  std::lock_guard<std::mutex> g(st.mu);
  if (st.refs > 0 && --st.refs == 0) {
    // the last communicator: NCCL may unload the plugin now; no thread may outlive it
    st.daemon.stop();
    st.transport.reset();
    st.have_daemon = false;
  }
}

// ------------------------------------------------------------------ entry points

ncclResult_t dp_init(void** ctx, uint64_t comm_id, ncclNetCommConfig_v12_t* config,
                     ncclDebugLogger_t logfn) {
  return guard("init", [&]() -> ncclResult_t {
    ncclResult_t r = init_once(logfn);
    if (r != ncclSuccess) return r;
    auto* c = new Context;
    c->comm_id = comm_id;
    if (config) c->traffic_class = config->trafficClass;
    *ctx = c;
    return ncclSuccess;
  });
}

ncclResult_t dp_finalize(void* ctx) {
  return guard("finalize", [&]() -> ncclResult_t {
    delete static_cast<Context*>(ctx);
    release_once();
    return ncclSuccess;
  });
}

ncclResult_t dp_devices(int* ndev) {
  return guard("devices", [&]() -> ncclResult_t {
    State& st = state();
    std::lock_guard<std::mutex> g(st.mu);
    *ndev = static_cast<int>(st.devices.size());
    return ncclSuccess;
  });
}

// Every field, in the newest layout; the tables narrow it.
ncclResult_t dp_properties(int dev, ncclNetProperties_v12_t* p) {
  return guard("getProperties", [&]() -> ncclResult_t {
    State& st = state();
    std::lock_guard<std::mutex> g(st.mu);
    if (dev < 0 || static_cast<size_t>(dev) >= st.devices.size()) return ncclInvalidArgument;
    const Device& d = st.devices[static_cast<size_t>(dev)];
    const Rail& first = st.rails[static_cast<size_t>(d.physical[0])];
    std::memset(p, 0, sizeof(*p));
    p->name = const_cast<char*>(d.name.c_str());
    p->pciPath = first.pci_path.empty() ? nullptr : const_cast<char*>(first.pci_path.c_str());
    uint64_t speed = 0;
    p->guid = 0;
    for (int ph : d.physical) {
      const Rail& r = st.rails[static_cast<size_t>(ph)];
      speed += r.capacity_bps ? r.capacity_bps / 1000000 : 10000;
      p->guid = p->guid * 31 + r.guid;
    }
    p->ptrSupport = NCCL_PTR_HOST;
    p->regIsGlobal = 0;
    p->forceFlush = 0;
    p->speed = static_cast<int>(std::min<uint64_t>(speed, 1u << 30));
    p->port = 0;
    p->latency = 0;
    p->maxComms = 65536;
    p->maxRecvs = kAdvertisedRecvs;
    p->netDeviceType = NCCL_NET_DEVICE_HOST;
    p->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    p->vProps.ndevs = static_cast<int>(d.physical.size());
    for (size_t i = 0; i < d.physical.size() && i < NCCL_NET_MAX_DEVS_PER_NIC_V12; ++i)
      p->vProps.devs[i] = d.physical[i];
    p->maxP2pBytes = kMaxNetSize;
    p->maxCollBytes = kMaxNetSize;
    p->maxMultiRequestSize = 1;
    p->railId = NCCL_NET_ID_UNDEF;
    p->planeId = NCCL_NET_ID_UNDEF;
    return ncclSuccess;
  });
}

ncclResult_t dp_make_vdevice(int* d, int ndevs, const int* devs) {
  return guard("makeVDevice", [&]() -> ncclResult_t {
    State& st = state();
    std::lock_guard<std::mutex> g(st.mu);
    if (ndevs < 1 || ndevs > static_cast<int>(st.rails.size())) return ncclInvalidArgument;
    Device v;
    for (int i = 0; i < ndevs; ++i) {
      if (devs[i] < 0 || static_cast<size_t>(devs[i]) >= st.rails.size()) {
        DPN_WARN("makeVDevice: %d is not a physical device", devs[i]);
        return ncclInvalidArgument;
      }
      v.physical.push_back(devs[i]);
      v.rails.push_back(devs[i]);
      v.name += (i ? "+" : "") + st.rails[static_cast<size_t>(devs[i])].name;
    }
    *d = static_cast<int>(st.devices.size());
    DPN_INFO("device %d fuses %s", *d, v.name.c_str());
    st.devices.push_back(std::move(v));
    return ncclSuccess;
  });
}

ncclResult_t dp_listen(void* /*ctx*/, int dev, void* handle, void** listen_comm) {
  return guard("listen", [&]() -> ncclResult_t {
    State& st = state();
    std::vector<int> rails;
    Transport* t = nullptr;
    {
      std::lock_guard<std::mutex> g(st.mu);
      if (dev < 0 || static_cast<size_t>(dev) >= st.devices.size() || !st.transport)
        return ncclInvalidArgument;
      rails = st.devices[static_cast<size_t>(dev)].rails;
      t = st.transport.get();
    }
    auto lc = std::make_unique<ListenComm>();
    ncclResult_t r = to_nccl(t->listen(rails, handle, &lc->l), "listen");
    if (r != ncclSuccess) return r;
    *listen_comm = lc.release();
    return ncclSuccess;
  });
}

ncclResult_t dp_connect(std::shared_ptr<Context> ctx, int dev, void* handle, void** send_comm) {
  return guard("connect", [&]() -> ncclResult_t {
    *send_comm = nullptr;
    State& st = state();
    std::vector<int> rails;
    std::vector<Rail> used;
    Transport* t = nullptr;
    std::string env_class, cgroup;
    {
      std::lock_guard<std::mutex> g(st.mu);
      if (dev < 0 || static_cast<size_t>(dev) >= st.devices.size() || !st.transport)
        return ncclInvalidArgument;
      rails = st.devices[static_cast<size_t>(dev)].rails;
      for (int r : rails) used.push_back(st.rails[static_cast<size_t>(r)]);
      t = st.transport.get();
      env_class = st.settings.klass;
      cgroup = st.cgroup;
    }
    PlacementFn placement = [ctx, used, env_class, cgroup]() {
      State& s = state();
      auto snap = s.have_daemon ? s.daemon.snapshot() : nullptr;
      return place(snap.get(), env_class, ctx->traffic_class, ctx->op.load(), cgroup, used);
    };
    char label[64];
    std::snprintf(label, sizeof(label), "comm %llx dev %d",
                  static_cast<unsigned long long>(ctx->comm_id), dev);
    std::unique_ptr<SendConn> c;
    ncclResult_t r = to_nccl(t->connect(rails, handle, placement, label, &c), "connect");
    if (r != ncclSuccess) return r;
    if (c) {
      auto sc = std::make_unique<SendComm>();
      sc->c = std::move(c);
      *send_comm = sc.release();
    }
    return ncclSuccess;
  });
}

ncclResult_t dp_accept(void* listen_comm, void** recv_comm) {
  return guard("accept", [&]() -> ncclResult_t {
    *recv_comm = nullptr;
    std::unique_ptr<RecvConn> c;
    ncclResult_t r = to_nccl(static_cast<ListenComm*>(listen_comm)->l->accept(&c), "accept");
    if (r != ncclSuccess) return r;
    if (c) {
      auto rc = std::make_unique<RecvComm>();
      rc->c = std::move(c);
      *recv_comm = rc.release();
    }
    return ncclSuccess;
  });
}

ncclResult_t dp_reg_mr(void* /*comm*/, void* data, size_t size, int type, void** mhandle) {
  if (type != NCCL_PTR_HOST) {
    DPN_WARN("regMr: only host memory (NCCL_PTR_HOST), not type %d", type);
    return ncclInternalError;
  }
  return guard("regMr", [&]() -> ncclResult_t {
    *mhandle = new MemHandle{data, size, type};
    return ncclSuccess;
  });
}

ncclResult_t dp_reg_mr_int(void* comm, void* data, int size, int type, void** mhandle) {
  if (size < 0) return ncclInvalidArgument;
  return dp_reg_mr(comm, data, static_cast<size_t>(size), type, mhandle);
}

ncclResult_t dp_dereg_mr(void* /*comm*/, void* mhandle) {
  delete static_cast<MemHandle*>(mhandle);
  return ncclSuccess;
}

ncclResult_t dp_isend(void* send_comm, void* data, size_t size, int tag, void* /*mhandle*/,
                      void** request) {
  return guard("isend", [&]() -> ncclResult_t {
    *request = nullptr;
    if (size > kMaxNetSize) return ncclInvalidArgument;
    Request* r = nullptr;
    ncclResult_t res =
        to_nccl(static_cast<SendComm*>(send_comm)->c->isend(data, size, tag, &r), "isend");
    *request = r;
    return res;
  });
}

ncclResult_t dp_irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
                      void** request) {
  return guard("irecv", [&]() -> ncclResult_t {
    // *request may come in as NCCL_NET_OPTIONAL_RECV_COMPLETION: a real request is written anyway
    *request = nullptr;
    Request* r = nullptr;
    ncclResult_t res =
        to_nccl(static_cast<RecvComm*>(recv_comm)->c->irecv(n, data, sizes, tags, &r), "irecv");
    *request = r;
    return res;
  });
}

ncclResult_t dp_irecv_int(void* recv_comm, int n, void** data, int* sizes, int* tags,
                          void** /*mhandles*/, void** request) {
  if (n < 1 || n > kMaxRecvs) return ncclInvalidArgument;
  size_t s[kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return ncclInvalidArgument;
    s[i] = static_cast<size_t>(sizes[i]);
  }
  return dp_irecv(recv_comm, n, data, s, tags, request);
}

ncclResult_t dp_iflush(void* /*recv_comm*/, int /*n*/, void** /*data*/, int* /*sizes*/,
                       void** /*mhandles*/, void** request) {
  *request = nullptr;  // host memory: nothing to flush
  return ncclSuccess;
}

ncclResult_t dp_test(void* request, int* done, int* sizes) {
  return guard("test", [&]() -> ncclResult_t {
    bool d = false;
    ncclResult_t r = to_nccl(static_cast<Request*>(request)->test(&d, sizes), "test");
    *done = d ? 1 : 0;
    return r;
  });
}

ncclResult_t dp_close_send(void* c) {
  return guard("closeSend", [&]() -> ncclResult_t {
    delete static_cast<SendComm*>(c);
    return ncclSuccess;
  });
}
ncclResult_t dp_close_recv(void* c) {
  return guard("closeRecv", [&]() -> ncclResult_t {
    delete static_cast<RecvComm*>(c);
    return ncclSuccess;
  });
}
ncclResult_t dp_close_listen(void* c) {
  return guard("closeListen", [&]() -> ncclResult_t {
    delete static_cast<ListenComm*>(c);
    return ncclSuccess;
  });
}

ncclResult_t dp_set_net_attr(void* ctx, ncclNetAttr_v12_t* attr) {
  return guard("setNetAttr", [&]() -> ncclResult_t {
    if (!ctx || !attr) return ncclSuccess;
    auto* c = static_cast<Context*>(ctx);
    uint32_t before = c->op.exchange(attr->op);
    if (before != attr->op) {
      std::string name = operation_name(attr->op);
      DPN_TRACE("comm %llx: operation %s (mask %#x)", static_cast<unsigned long long>(c->comm_id),
                name.empty() ? "other" : name.c_str(), attr->op);
    }
    return ncclSuccess;
  });
}

// v6..v10 have one init for the process; their comms share its context, and
// v11+ contexts are owned by NCCL through ctx. A shared_ptr that does not
// own the v11 context keeps the code paths one.
std::shared_ptr<Context> borrowed(void* ctx) {
  return std::shared_ptr<Context>(static_cast<Context*>(ctx), [](Context*) {});
}

// ------------------------------------------------------------------ per version

ncclResult_t init_v6(ncclDebugLogger_t logfn) {
  return guard("init", [&]() -> ncclResult_t { return init_once(logfn); });
}
ncclResult_t init_v10(ncclDebugLogger_t logfn, ncclProfilerCallback_t) { return init_v6(logfn); }
ncclResult_t init_v11(void** ctx, uint64_t comm_id, ncclNetCommConfig_v11_t* config,
                      ncclDebugLogger_t logfn, ncclProfilerCallback_t) {
  return dp_init(ctx, comm_id, config, logfn);
}

template <typename P>
ncclResult_t props_v6_like(int dev, P* out) {
  ncclNetProperties_v12_t p;
  ncclResult_t r = dp_properties(dev, &p);
  if (r != ncclSuccess) return r;
  out->name = p.name;
  out->pciPath = p.pciPath;
  out->guid = p.guid;
  out->ptrSupport = p.ptrSupport;
  out->speed = p.speed;
  out->port = p.port;
  out->latency = p.latency;
  out->maxComms = p.maxComms;
  out->maxRecvs = p.maxRecvs;
  if constexpr (!std::is_same_v<P, ncclNetProperties_v6_t>) {
    out->netDeviceType = p.netDeviceType;
    out->netDeviceVersion = p.netDeviceVersion;
  }
  if constexpr (!std::is_same_v<P, ncclNetProperties_v6_t> &&
                !std::is_same_v<P, ncclNetProperties_v7_t>)
    out->regIsGlobal = p.regIsGlobal;
  return ncclSuccess;
}

template <typename P>
ncclResult_t props_v9_like(int dev, P* out) {
  ncclNetProperties_v12_t p;
  ncclResult_t r = dp_properties(dev, &p);
  if (r != ncclSuccess) return r;
  out->name = p.name;
  out->pciPath = p.pciPath;
  out->guid = p.guid;
  out->ptrSupport = p.ptrSupport;
  out->regIsGlobal = p.regIsGlobal;
  out->forceFlush = p.forceFlush;
  out->speed = p.speed;
  out->port = p.port;
  out->latency = p.latency;
  out->maxComms = p.maxComms;
  out->maxRecvs = p.maxRecvs;
  out->netDeviceType = p.netDeviceType;
  out->netDeviceVersion = p.netDeviceVersion;
  out->vProps.ndevs = std::min(p.vProps.ndevs, NCCL_NET_MAX_DEVS_PER_NIC_V11);
  for (int i = 0; i < out->vProps.ndevs; ++i) out->vProps.devs[i] = p.vProps.devs[i];
  out->maxP2pBytes = p.maxP2pBytes;
  out->maxCollBytes = p.maxCollBytes;
  if constexpr (std::is_same_v<P, ncclNetProperties_v11_t>)
    out->maxMultiRequestSize = p.maxMultiRequestSize;
  return ncclSuccess;
}

ncclResult_t props_v6(int d, ncclNetProperties_v6_t* p) { return props_v6_like(d, p); }
ncclResult_t props_v7(int d, ncclNetProperties_v7_t* p) { return props_v6_like(d, p); }
ncclResult_t props_v8(int d, ncclNetProperties_v8_t* p) { return props_v6_like(d, p); }
ncclResult_t props_v9(int d, ncclNetProperties_v9_t* p) { return props_v9_like(d, p); }
ncclResult_t props_v11(int d, ncclNetProperties_v11_t* p) { return props_v9_like(d, p); }
ncclResult_t props_v12(int d, ncclNetProperties_v12_t* p) { return dp_properties(d, p); }

ncclResult_t listen_v6(int dev, void* handle, void** lc) {
  return dp_listen(nullptr, dev, handle, lc);
}
ncclResult_t connect_v6(int dev, void* handle, void** sc) {
  return dp_connect(state().process_ctx, dev, handle, sc);
}
ncclResult_t connect_v7(int dev, void* handle, void** sc, ncclNetDeviceHandle_v7_t** /*dev_comm*/) {
  return connect_v6(dev, handle, sc);
}
ncclResult_t connect_v10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sc,
                         ncclNetDeviceHandle_v10_t** /*dev_comm*/) {
  auto ctx = state().process_ctx;
  if (config && config->trafficClass != NCCL_NET_TRAFFIC_CLASS_UNDEF) {
    auto own = std::make_shared<Context>();
    own->traffic_class = config->trafficClass;
    ctx = own;
  }
  return dp_connect(ctx, dev, handle, sc);
}
ncclResult_t connect_v11(void* ctx, int dev, void* handle, void** sc,
                         ncclNetDeviceHandle_v11_t** /*dev_comm*/) {
  return dp_connect(ctx ? borrowed(ctx) : state().process_ctx, dev, handle, sc);
}
ncclResult_t accept_v6(void* lc, void** rc) { return dp_accept(lc, rc); }
ncclResult_t accept_v7(void* lc, void** rc, ncclNetDeviceHandle_v7_t** /*dev_comm*/) {
  return dp_accept(lc, rc);
}
ncclResult_t isend_v6(void* sc, void* data, int size, int tag, void* mh, void** req) {
  if (size < 0) return ncclInvalidArgument;
  return dp_isend(sc, data, static_cast<size_t>(size), tag, mh, req);
}
ncclResult_t isend_v9(void* sc, void* data, size_t size, int tag, void* mh, void** req) {
  return dp_isend(sc, data, size, tag, mh, req);
}
ncclResult_t isend_v10(void* sc, void* data, size_t size, int tag, void* mh, void* /*phandle*/,
                       void** req) {
  return dp_isend(sc, data, size, tag, mh, req);
}
ncclResult_t irecv_v9(void* rc, int n, void** data, size_t* sizes, int* tags, void** /*mh*/,
                      void** req) {
  return dp_irecv(rc, n, data, sizes, tags, req);
}
ncclResult_t irecv_v10(void* rc, int n, void** data, size_t* sizes, int* tags, void** /*mh*/,
                       void** /*phandles*/, void** req) {
  return dp_irecv(rc, n, data, sizes, tags, req);
}
ncclResult_t make_vdevice_v9(int* d, ncclNetVDeviceProps_v9_t* props) {
  if (!props) return ncclInvalidArgument;
  return dp_make_vdevice(d, props->ndevs, props->devs);
}
ncclResult_t make_vdevice_v12(int* d, ncclNetVDeviceProps_v12_t* props) {
  if (!props) return ncclInvalidArgument;
  return dp_make_vdevice(d, props->ndevs, props->devs);
}
ncclResult_t finalize_v11(void* ctx) { return dp_finalize(ctx); }
ncclResult_t set_net_attr_v11(void* ctx, ncclNetAttr_v11_t* attr) {
  return dp_set_net_attr(ctx, attr);
}

}  // namespace
}  // namespace dpnccl

using namespace dpnccl;

// The tables NCCL looks up by name (dlsym): not const (a const table would
// have internal linkage in C++), the only symbols the library exports.
extern "C" {

__attribute__((visibility("default"))) ncclNet_v12_t ncclNetPlugin_v12 = {
    "dualpath", init_v11,         dp_devices,    props_v12,       dp_listen,       connect_v11,
    accept_v7,  dp_reg_mr,        nullptr,       dp_dereg_mr,     isend_v10,       irecv_v10,
    dp_iflush,  dp_test,          dp_close_send, dp_close_recv,   dp_close_listen, nullptr,
    nullptr,    make_vdevice_v12, finalize_v11,  set_net_attr_v11};

__attribute__((visibility("default"))) ncclNet_v11_t ncclNetPlugin_v11 = {
    "dualpath", init_v11,        dp_devices,    props_v11,       dp_listen,       connect_v11,
    accept_v7,  dp_reg_mr,       nullptr,       dp_dereg_mr,     isend_v10,       irecv_v10,
    dp_iflush,  dp_test,         dp_close_send, dp_close_recv,   dp_close_listen, nullptr,
    nullptr,    make_vdevice_v9, finalize_v11,  set_net_attr_v11};

__attribute__((visibility("default"))) ncclNet_v10_t ncclNetPlugin_v10 = {
    "dualpath",    init_v10,      dp_devices,      props_v9,  listen_v6, connect_v10,    accept_v7,
    dp_reg_mr,     nullptr,       dp_dereg_mr,     isend_v10, irecv_v10, dp_iflush,      dp_test,
    dp_close_send, dp_close_recv, dp_close_listen, nullptr,   nullptr,   make_vdevice_v9};

__attribute__((visibility("default"))) ncclNet_v9_t ncclNetPlugin_v9 = {
    "dualpath",    init_v6,       dp_devices,      props_v9, listen_v6, connect_v7,     accept_v7,
    dp_reg_mr,     nullptr,       dp_dereg_mr,     isend_v9, irecv_v9,  dp_iflush,      dp_test,
    dp_close_send, dp_close_recv, dp_close_listen, nullptr,  nullptr,   make_vdevice_v9};

__attribute__((visibility("default"))) ncclNet_v8_t ncclNetPlugin_v8 = {
    "dualpath",    init_v6,       dp_devices,      props_v8, listen_v6,    connect_v7, accept_v7,
    dp_reg_mr,     nullptr,       dp_dereg_mr,     isend_v6, dp_irecv_int, dp_iflush,  dp_test,
    dp_close_send, dp_close_recv, dp_close_listen, nullptr,  nullptr};

__attribute__((visibility("default"))) ncclNet_v7_t ncclNetPlugin_v7 = {
    "dualpath",    init_v6,       dp_devices,      props_v7, listen_v6,    connect_v7, accept_v7,
    dp_reg_mr_int, nullptr,       dp_dereg_mr,     isend_v6, dp_irecv_int, dp_iflush,  dp_test,
    dp_close_send, dp_close_recv, dp_close_listen, nullptr,  nullptr};

__attribute__((visibility("default"))) ncclNet_v6_t ncclNetPlugin_v6 = {
    "dualpath", init_v6,       dp_devices,    props_v6,      listen_v6,      connect_v6,
    accept_v6,  dp_reg_mr_int, nullptr,       dp_dereg_mr,   isend_v6,       dp_irecv_int,
    dp_iflush,  dp_test,       dp_close_send, dp_close_recv, dp_close_listen};

}  // extern "C"
