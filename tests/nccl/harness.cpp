// SPDX-License-Identifier: Apache-2.0
// Plays NCCL's part for dualpath's net plugin: dlopen the built library
// (RTLD_NOW | RTLD_LOCAL, as NCCL does), take one table version, and drive it
// as NCCL's proxy does: init with a logger (per communicator from v11),
// devices, getProperties, listen, the handle exchanged with the peer rank,
// connect and accept spun until both return a comm, regMr of host buffers,
// isend/irecv with tags and grouped receives, test polled, setNetAttr where
// the table has it, closes, finalize.
//
//   dp_nccl_harness --plugin LIB --version N --scenario S            (forks both ranks)
//   dp_nccl_harness --plugin LIB --version N --scenario S --rank R --exchange DIR
//                                                (one rank; the lab runs one per node)
//
// Scenarios: props, sizes, many, grouped, fault, badenv, stream (a long
// transfer for the lab: --rounds, --bytes, --pause-ms between rounds), bench (nccl-tests' alltoall
// and sendrecv: --op, --min-bytes, --max-bytes, --step, --budget, --warmup; --transport socket
// --socket-addr A: plain TCP, the baseline; tools/nccl/bench drives it). Exit 0 when every check
// held; the last line is a JSON summary.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "dualpath/nccl/net.h"

namespace {

using Clock = std::chrono::steady_clock;

int g_rank = 0;
std::mutex g_log_mu;
std::vector<std::string> g_log;

void logger(ncclDebugLogLevel level, unsigned long, const char* file, int line, const char* fmt,
            ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> g(g_log_mu);
  const char* lv = level == NCCL_LOG_WARN ? "WARN" : level == NCCL_LOG_INFO ? "INFO" : "TRACE";
  // (the wall clock's ms: both ranks' logs line up)
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count() %
            100'000'000;
  std::fprintf(stderr, "%lld rank%d %s %s:%d %s\n", static_cast<long long>(ms), g_rank, lv, file,
               line, buf);
  g_log.push_back(std::string(lv) + " " + buf);
}

bool log_has(const std::string& what) {
  std::lock_guard<std::mutex> g(g_log_mu);
  for (auto& l : g_log)
    if (l.find(what) != std::string::npos) return true;
  return false;
}

int log_count(const std::string& what) {
  std::lock_guard<std::mutex> g(g_log_mu);
  int n = 0;
  for (auto& l : g_log)
    if (l.find(what) != std::string::npos) ++n;
  return n;
}

[[noreturn]] void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "rank%d FAIL: ", g_rank);
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
  std::exit(1);
}

#define CHECK_NCCL(call)                                                         \
  do {                                                                           \
    ncclResult_t r_ = (call);                                                    \
    if (r_ != ncclSuccess) die("%s returned %d (line %d)", #call, r_, __LINE__); \
  } while (0)

// The properties the checks read, from any version's struct.
struct Props {
  std::string name;
  const char* name_ptr = nullptr;  // as the plugin gave it: NCCL keeps it
  const char* pci = nullptr;
  uint64_t guid = 0;
  int ptr = 0, speed = 0, max_comms = 0, max_recvs = 0, reg_global = -1, vdevs = 1;
  size_t max_p2p = 0;
};

// One table version behind one interface (v12's signatures).
struct Net {
  int version = 0;
  void* lib = nullptr;
  const void* table = nullptr;
  template <typename T>
  const T* t() const {
    return static_cast<const T*>(table);
  }

  ncclResult_t init(void** ctx, uint64_t comm_id, int traffic_class) {
    ncclNetCommConfig_v12_t cfg{traffic_class};
    *ctx = nullptr;
    if (version <= 9) return t<ncclNet_v6_t>()->init(logger);  // same position and type
    if (version == 10) return t<ncclNet_v10_t>()->init(logger, nullptr);
    if (version == 11) return t<ncclNet_v11_t>()->init(ctx, comm_id, &cfg, logger, nullptr);
    return t<ncclNet_v12_t>()->init(ctx, comm_id, &cfg, logger, nullptr);
  }
  ncclResult_t finalize(void* ctx) {
    if (version == 11) return t<ncclNet_v11_t>()->finalize(ctx);
    if (version >= 12) return t<ncclNet_v12_t>()->finalize(ctx);
    return ncclSuccess;
  }
  ncclResult_t devices(int* n) { return t<ncclNet_v6_t>()->devices(n); }  // same in all

  ncclResult_t props(int dev, Props* out) {
    auto common = [&](auto& p) {
      out->name = p.name ? p.name : "";
      out->name_ptr = p.name;
      out->pci = p.pciPath;
      out->guid = p.guid;
      out->ptr = p.ptrSupport;
      out->speed = p.speed;
      out->max_comms = p.maxComms;
      out->max_recvs = p.maxRecvs;
    };
    ncclResult_t r;
    switch (version) {
      case 6: {
        ncclNetProperties_v6_t p{};
        r = t<ncclNet_v6_t>()->getProperties(dev, &p);
        common(p);
        return r;
      }
      case 7: {
        ncclNetProperties_v7_t p{};
        r = t<ncclNet_v7_t>()->getProperties(dev, &p);
        common(p);
        return r;
      }
      case 8: {
        ncclNetProperties_v8_t p{};
        r = t<ncclNet_v8_t>()->getProperties(dev, &p);
        common(p);
        out->reg_global = p.regIsGlobal;
        return r;
      }
      case 9:
      case 10: {
        ncclNetProperties_v9_t p{};
        r = version == 9 ? t<ncclNet_v9_t>()->getProperties(dev, &p)
                         : t<ncclNet_v10_t>()->getProperties(dev, &p);
        common(p);
        out->reg_global = p.regIsGlobal;
        out->max_p2p = p.maxP2pBytes;
        out->vdevs = p.vProps.ndevs;
        return r;
      }
      case 11: {
        ncclNetProperties_v11_t p{};
        r = t<ncclNet_v11_t>()->getProperties(dev, &p);
        common(p);
        out->reg_global = p.regIsGlobal;
        out->max_p2p = p.maxP2pBytes;
        out->vdevs = p.vProps.ndevs;
        return r;
      }
      default: {
        ncclNetProperties_v12_t p{};
        r = t<ncclNet_v12_t>()->getProperties(dev, &p);
        common(p);
        out->reg_global = p.regIsGlobal;
        out->max_p2p = p.maxP2pBytes;
        out->vdevs = p.vProps.ndevs;
        if (p.railId != NCCL_NET_ID_UNDEF || p.planeId != NCCL_NET_ID_UNDEF)
          die("railId/planeId should be undefined");
        return r;
      }
    }
  }
  ncclResult_t make_vdevice(int* d, int a, int b) {
    if (version < 9) return ncclInvalidUsage;
    if (version >= 12) {
      ncclNetVDeviceProps_v12_t p{};
      p.ndevs = 2;
      p.devs[0] = a;
      p.devs[1] = b;
      return t<ncclNet_v12_t>()->makeVDevice(d, &p);
    }
    ncclNetVDeviceProps_v9_t p{};
    p.ndevs = 2;
    p.devs[0] = a;
    p.devs[1] = b;
    if (version == 9) return t<ncclNet_v9_t>()->makeVDevice(d, &p);
    if (version == 10) return t<ncclNet_v10_t>()->makeVDevice(d, &p);
    return t<ncclNet_v11_t>()->makeVDevice(d, &p);
  }
  ncclResult_t listen(void* ctx, int dev, void* handle, void** lc) {
    if (version >= 12) return t<ncclNet_v12_t>()->listen(ctx, dev, handle, lc);
    if (version == 11) return t<ncclNet_v11_t>()->listen(ctx, dev, handle, lc);
    return t<ncclNet_v6_t>()->listen(dev, handle, lc);
  }
  ncclResult_t connect(void* ctx, int dev, void* handle, void** sc, int traffic_class) {
    ncclNetDeviceHandle_v7_t* dh = nullptr;
    ncclNetCommConfig_v10_t cfg{traffic_class};
    switch (version) {
      case 6:
        return t<ncclNet_v6_t>()->connect(dev, handle, sc);
      case 7:
        return t<ncclNet_v7_t>()->connect(dev, handle, sc, &dh);
      case 8:
        return t<ncclNet_v8_t>()->connect(dev, handle, sc, &dh);
      case 9:
        return t<ncclNet_v9_t>()->connect(dev, handle, sc, &dh);
      case 10:
        return t<ncclNet_v10_t>()->connect(dev, &cfg, handle, sc, &dh);
      case 11:
        return t<ncclNet_v11_t>()->connect(ctx, dev, handle, sc, &dh);
      default:
        return t<ncclNet_v12_t>()->connect(ctx, dev, handle, sc, &dh);
    }
  }
  ncclResult_t accept(void* lc, void** rc) {
    ncclNetDeviceHandle_v7_t* dh = nullptr;
    if (version == 6) return t<ncclNet_v6_t>()->accept(lc, rc);
    return t<ncclNet_v7_t>()->accept(lc, rc, &dh);  // same from v7 on
  }
  ncclResult_t reg(void* comm, void* data, size_t size, void** mh) {
    if (version <= 7)
      return t<ncclNet_v6_t>()->regMr(comm, data, static_cast<int>(size), NCCL_PTR_HOST, mh);
    return t<ncclNet_v8_t>()->regMr(comm, data, size, NCCL_PTR_HOST, mh);
  }
  ncclResult_t dereg(void* comm, void* mh) { return t<ncclNet_v6_t>()->deregMr(comm, mh); }
  ncclResult_t isend(void* sc, void* data, size_t size, int tag, void* mh, void** req) {
    if (version <= 8)
      return t<ncclNet_v8_t>()->isend(sc, data, static_cast<int>(size), tag, mh, req);
    if (version == 9) return t<ncclNet_v9_t>()->isend(sc, data, size, tag, mh, req);
    return t<ncclNet_v10_t>()->isend(sc, data, size, tag, mh, nullptr, req);
  }
  ncclResult_t irecv(void* rc, int n, void** data, size_t* sizes, int* tags, void** mh,
                     void** req) {
    if (version <= 8) {
      int s[8];
      for (int i = 0; i < n; ++i) s[i] = static_cast<int>(sizes[i]);
      return t<ncclNet_v8_t>()->irecv(rc, n, data, s, tags, mh, req);
    }
    // NCCL may ask for optional completion: the plugin must still write a request
    *req = reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION);
    void* ph[8] = {};
    if (version == 9) return t<ncclNet_v9_t>()->irecv(rc, n, data, sizes, tags, mh, req);
    return t<ncclNet_v10_t>()->irecv(rc, n, data, sizes, tags, mh, ph, req);
  }
  ncclResult_t test(void* req, int* done, int* sizes) {
    return t<ncclNet_v6_t>()->test(req, done, sizes);  // same position from v6 to v12
  }
  ncclResult_t set_op(void* ctx, uint32_t op) {
    ncclNetAttr_v12_t a = NCCL_NET_ATTR_INIT_VALUE(op);
    if (version == 11) return t<ncclNet_v11_t>()->setNetAttr(ctx, &a);
    if (version >= 12) return t<ncclNet_v12_t>()->setNetAttr(ctx, &a);
    return ncclSuccess;
  }
  static ncclNetAttr_v12_t NCCL_NET_ATTR_INIT_VALUE(uint32_t op) {
    ncclNetAttr_v12_t a;
    a.sendCommAttr = {-1, -1, -1, -1};
    a.recvCommAttr = {-1, -1, -1, -1};
    a.op = op;
    a.algo = static_cast<uint32_t>(NCCL_NET_ATTR_UNDEF);
    a.proto = static_cast<uint32_t>(NCCL_NET_ATTR_UNDEF);
    return a;
  }
  ncclResult_t close_send(void* c) { return t<ncclNet_v6_t>()->closeSend(c); }
  ncclResult_t close_recv(void* c) { return t<ncclNet_v6_t>()->closeRecv(c); }
  ncclResult_t close_listen(void* c) { return t<ncclNet_v6_t>()->closeListen(c); }
};

// The members used through the v6/v7/v8 views above sit at the same offsets
// in every later table: check it, so that the shortcuts are right.
static_assert(offsetof(ncclNet_v6_t, test) == offsetof(ncclNet_v12_t, test));
static_assert(offsetof(ncclNet_v6_t, closeListen) == offsetof(ncclNet_v12_t, closeListen));
static_assert(offsetof(ncclNet_v6_t, deregMr) == offsetof(ncclNet_v12_t, deregMr));
static_assert(offsetof(ncclNet_v7_t, accept) == offsetof(ncclNet_v12_t, accept));
static_assert(offsetof(ncclNet_v8_t, regMr) == offsetof(ncclNet_v12_t, regMr));
static_assert(offsetof(ncclNet_v10_t, isend) == offsetof(ncclNet_v12_t, isend));
static_assert(offsetof(ncclNet_v10_t, irecv) == offsetof(ncclNet_v12_t, irecv));

Net load(const std::string& path, int version) {
  Net n;
  n.version = version;
  n.lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!n.lib) die("dlopen %s: %s", path.c_str(), ::dlerror());
  std::string sym = "ncclNetPlugin_v" + std::to_string(version);
  n.table = ::dlsym(n.lib, sym.c_str());
  if (!n.table) die("%s has no %s", path.c_str(), sym.c_str());
  if (std::strcmp(*static_cast<const char* const*>(n.table), "dualpath") != 0)
    die("the table's name is not dualpath");
  return n;
}

// ------------------------------------------------------------------ data

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void fill(char* p, size_t n, uint64_t seed) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = mix(seed ^ (i >> 3));
    std::memcpy(p + i, &v, 8);
  }
  uint64_t v = mix(seed ^ (i >> 3));
  std::memcpy(p + i, &v, n - i);
}

// the first byte that differs, or -1
long long verify(const char* p, size_t n, uint64_t seed) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = mix(seed ^ (i >> 3));
    if (std::memcmp(p + i, &v, 8) != 0) return static_cast<long long>(i);
  }
  uint64_t v = mix(seed ^ (i >> 3));
  if (std::memcmp(p + i, &v, n - i) != 0) return static_cast<long long>(i);
  return -1;
}

// nearest rank
double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

// ------------------------------------------------------------------ exchange

struct Exchange {
  std::string dir;
  void put(const std::string& name, const void* data, size_t n) {
    std::string tmp = dir + "/." + name + ".tmp", fin = dir + "/" + name;
    std::ofstream(tmp, std::ios::binary)
        .write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    std::filesystem::rename(tmp, fin);
  }
  void get(const std::string& name, void* data, size_t n, int timeout_s = 60) {
    std::string fin = dir + "/" + name;
    auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    while (!std::filesystem::exists(fin)) {
      if (Clock::now() > deadline) die("the peer never wrote %s", fin.c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::ifstream(fin, std::ios::binary)
        .read(static_cast<char*>(data), static_cast<std::streamsize>(n));
  }
  // both ranks reach the same point
  void barrier(const std::string& name) {
    char one = 1;
    put(name + ".r" + std::to_string(g_rank), &one, 1);
    get(name + ".r" + std::to_string(1 - g_rank), &one, 1, 120);
  }
};

struct Options {
  std::string plugin, scenario = "sizes", exchange;
  int version = 12, rank = -1, conns = 16, dev = 0, traffic_class = NCCL_NET_TRAFFIC_CLASS_UNDEF;
  int rounds = 20;
  size_t bytes = 4u << 20;
  bool fuse = false;
  // bench
  std::string op = "alltoall", transport = "plugin", socket_addr;
  size_t min_bytes = 64u << 10, max_bytes = 64u << 20, step = 512u << 10, budget = 128u << 20;
  size_t warmup = 0;
  int pause_ms = 0;  // stream: between rounds
};

struct Pair {
  void* send = nullptr;
  void* recv = nullptr;
  void* listen = nullptr;
};

// listen, swap handles, spin connect and accept until both have a comm
std::vector<Pair> connect_pairs(Net& net, void* ctx, Exchange& ex, int dev, int count,
                                int traffic_class, const std::string& tag) {
  std::vector<Pair> pairs(static_cast<size_t>(count));
  std::vector<std::array<char, NCCL_NET_HANDLE_MAXSIZE>> mine(pairs.size()), theirs(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    mine[i].fill(0);
    CHECK_NCCL(net.listen(ctx, dev, mine[i].data(), &pairs[i].listen));
    if (!pairs[i].listen) die("listen returned no comm");
  }
  std::vector<char> blob(pairs.size() * NCCL_NET_HANDLE_MAXSIZE);
  for (size_t i = 0; i < pairs.size(); ++i)
    std::memcpy(blob.data() + i * NCCL_NET_HANDLE_MAXSIZE, mine[i].data(), NCCL_NET_HANDLE_MAXSIZE);
  ex.put(tag + ".handles.r" + std::to_string(g_rank), blob.data(), blob.size());
  ex.get(tag + ".handles.r" + std::to_string(1 - g_rank), blob.data(), blob.size());
  for (size_t i = 0; i < pairs.size(); ++i)
    std::memcpy(theirs[i].data(), blob.data() + i * NCCL_NET_HANDLE_MAXSIZE,
                NCCL_NET_HANDLE_MAXSIZE);
  auto deadline = Clock::now() + std::chrono::seconds(30);
  long spins = 0;
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < pairs.size(); ++i) {
      if (!pairs[i].send)
        CHECK_NCCL(net.connect(ctx, dev, theirs[i].data(), &pairs[i].send, traffic_class));
      if (!pairs[i].recv) CHECK_NCCL(net.accept(pairs[i].listen, &pairs[i].recv));
      all = all && pairs[i].send && pairs[i].recv;
    }
    ++spins;
    if (all) break;
    if (Clock::now() > deadline) die("connect/accept did not finish in 30 s");
  }
  if (spins < 2) std::fprintf(stderr, "rank%d note: connect and accept returned at once\n", g_rank);
  return pairs;
}

struct Stats {
  uint64_t bytes = 0;
  double longest_gap_ms = 0;
  Clock::time_point last = Clock::now();
  void progress() {
    auto now = Clock::now();
    longest_gap_ms =
        std::max(longest_gap_ms, std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
  }
};

// One message each way on a pair at once; the receive may be larger than the send.
void exchange_one(Net& net, Pair& p, size_t size, size_t recv_extra, uint64_t seed_out,
                  uint64_t seed_in, int tag, Stats& st) {
  std::vector<char> out(std::max<size_t>(size, 1)), in(std::max<size_t>(size + recv_extra, 1));
  fill(out.data(), size, seed_out);
  void *mh_s = nullptr, *mh_r = nullptr;
  CHECK_NCCL(net.reg(p.send, out.data(), out.size(), &mh_s));
  CHECK_NCCL(net.reg(p.recv, in.data(), in.size(), &mh_r));
  void *sreq = nullptr, *rreq = nullptr;
  auto begin = Clock::now();
  auto deadline = begin + std::chrono::seconds(60);
  while (!sreq) {
    CHECK_NCCL(net.isend(p.send, out.data(), size, tag, mh_s, &sreq));
    if (Clock::now() > deadline) die("isend never took the request");
  }
  void* data[1] = {in.data()};
  size_t sizes[1] = {size + recv_extra};
  int tags[1] = {tag};
  void* mhs[1] = {mh_r};
  do {
    CHECK_NCCL(net.irecv(p.recv, 1, data, sizes, tags, mhs, &rreq));
    if (rreq == reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION))
      die("irecv left the optional-completion marker as its request");
  } while (!rreq);
  int sdone = 0, rdone = 0, ssize = -1, rsize = -1;
  while (!sdone || !rdone) {
    if (!sdone) {
      CHECK_NCCL(net.test(sreq, &sdone, &ssize));
      if (sdone) st.progress();
    }
    if (!rdone) {
      CHECK_NCCL(net.test(rreq, &rdone, &rsize));
      if (rdone) st.progress();
    }
    if (Clock::now() > deadline) die("a %zu-byte exchange did not complete in 60 s", size);
  }
  if (static_cast<size_t>(rsize) != size)
    die("received size %d, the peer sent %zu (receive of %zu)", rsize, size, size + recv_extra);
  if (long long bad = verify(in.data(), size, seed_in); bad >= 0)
    die("%zu-byte message: byte %lld differs", size, bad);
  st.bytes += size;
  if (std::getenv("DP_HARNESS_VERBOSE"))
    std::fprintf(stderr, "%lld rank%d %zu bytes each way in %.1f ms\n",
                 static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count() %
                                        100'000'000),
                 g_rank, size,
                 std::chrono::duration<double, std::milli>(Clock::now() - begin).count());
  CHECK_NCCL(net.dereg(p.send, mh_s));
  CHECK_NCCL(net.dereg(p.recv, mh_r));
}

void close_pairs(Net& net, std::vector<Pair>& pairs) {
  for (auto& p : pairs) {
    CHECK_NCCL(net.close_send(p.send));
    CHECK_NCCL(net.close_recv(p.recv));
    CHECK_NCCL(net.close_listen(p.listen));
  }
}

uint64_t seed_of(int from, size_t size, int round) {
  return (static_cast<uint64_t>(from) << 56) ^ (static_cast<uint64_t>(size) << 8) ^
         static_cast<uint64_t>(round);
}

// ------------------------------------------------------------------ scenarios

int props(Net& net, void*& ctx) {
  int n = 0;
  CHECK_NCCL(net.devices(&n));
  if (n < 1) die("no devices");
  std::set<uint64_t> guids;
  std::set<std::string> names;
  int speed_sum = 0;
  for (int d = 0; d < n; ++d) {
    Props p;
    CHECK_NCCL(net.props(d, &p));
    if (p.name.empty() || !names.insert(p.name).second) die("device %d: empty or repeated name", d);
    if (!guids.insert(p.guid).second) die("device %d: a guid another device has", d);
    if (p.ptr != NCCL_PTR_HOST) die("device %d: ptrSupport %d, not host", d, p.ptr);
    if (p.speed <= 0 || p.max_comms <= 0 || p.max_recvs < 1)
      die("device %d: speed %d maxComms %d maxRecvs %d", d, p.speed, p.max_comms, p.max_recvs);
    if (net.version >= 9 && (p.max_p2p == 0 || p.vdevs != 1)) die("device %d: maxP2pBytes 0", d);
    if (net.version >= 8 && p.reg_global < 0) die("device %d: regIsGlobal unset", d);
    speed_sum += p.speed;
    std::fprintf(stderr, "device %d: %s pci=%s guid=%llx speed=%d maxRecvs=%d\n", d, p.name.c_str(),
                 p.pci ? p.pci : "(none)", static_cast<unsigned long long>(p.guid), p.speed,
                 p.max_recvs);
  }
  // NCCL keeps the name pointers getProperties gave, and reads them after
  // making virtual devices (ncclTopoForceMerge); a NULL pci path is allowed
  std::vector<std::pair<const char*, std::string>> kept;
  for (int d = 0; d < n; ++d) {
    Props p;
    CHECK_NCCL(net.props(d, &p));
    kept.emplace_back(p.name_ptr, p.name);
  }
  if (net.version >= 9 && n >= 2) {
    int v = -1;
    CHECK_NCCL(net.make_vdevice(&v, 0, 1));
    for (int k = 0; k < 8; ++k) {  // more, so that storage that moves would have moved
      int more = -1;
      CHECK_NCCL(net.make_vdevice(&more, 0, 1));
    }
    for (const auto& [ptr, name] : kept)
      if (!ptr || name != ptr) die("a device's name changed after makeVDevice: %s", name.c_str());
    int n2 = 0;
    CHECK_NCCL(net.devices(&n2));
    if (v != n || n2 != n + 9) die("makeVDevice gave %d, devices now %d", v, n2);
    Props p;
    CHECK_NCCL(net.props(v, &p));
    if (p.vdevs != 2 || p.speed != speed_sum || p.name.find('+') == std::string::npos)
      die("the fused device: %d devices, speed %d (rails add up to %d), name %s", p.vdevs, p.speed,
          speed_sum, p.name.c_str());
    int bad = -1;
    if (net.make_vdevice(&bad, 0, 99) == ncclSuccess) die("makeVDevice took a device that is not");
  }
  int made = 0;
  CHECK_NCCL(net.devices(&made));
  // v11+: NCCL may keep the library loaded across communicators
  // (NCCL_NET_PLUGIN_REF_COUNT) and reads devices() and makes its virtual
  // devices on the first init only: after every communicator was finalized,
  // a new one sees the same devices, virtual ones included
  if (net.version >= 11) {
    CHECK_NCCL(net.finalize(ctx));
    CHECK_NCCL(
        net.init(&ctx, 0x2000 + static_cast<uint64_t>(g_rank), NCCL_NET_TRAFFIC_CLASS_UNDEF));
    int again = 0;
    CHECK_NCCL(net.devices(&again));
    if (again != made) die("after a new init, %d devices instead of %d", again, made);
    Props p;
    CHECK_NCCL(net.props(made - 1, &p));
  }
  std::printf("{\"scenario\":\"props\",\"devices\":%d,\"ok\":true}\n", n);
  return 0;
}

int sizes(Net& net, void* ctx, Exchange& ex, const Options& o) {
  auto pairs = connect_pairs(net, ctx, ex, o.dev, 1, o.traffic_class, "sizes");
  Stats st;
  const size_t list[] = {0,       1,        7,        128, 4096, 65536, 1 << 20, (1 << 20) + 13,
                         4 << 20, 16 << 20, 64u << 20};
  int round = 0;
  for (size_t s : list) {
    // every other receive is larger than what is sent, as NCCL may post
    size_t extra = (round % 2) ? 4096 : 0;
    exchange_one(net, pairs[0], s, extra, seed_of(g_rank, s, round), seed_of(1 - g_rank, s, round),
                 round, st);
    ++round;
  }
  close_pairs(net, pairs);
  std::printf(
      "{\"scenario\":\"sizes\",\"bytes_each_way\":%llu,\"longest_gap_ms\":%.1f,\"ok\":true}\n",
      static_cast<unsigned long long>(st.bytes), st.longest_gap_ms);
  return 0;
}

// Many connections at once, each with NCCL_NET_MAX_REQUESTS requests in flight.
int many(Net& net, void* ctx, Exchange& ex, const Options& o) {
  auto pairs = connect_pairs(net, ctx, ex, o.dev, o.conns, o.traffic_class, "many");
  const int per = NCCL_NET_MAX_REQUESTS;
  const size_t size = 64 << 10;
  std::vector<std::vector<char>> out(pairs.size() * per), in(pairs.size() * per);
  std::vector<void*> sreq(out.size()), rreq(in.size());
  for (size_t c = 0; c < pairs.size(); ++c)
    for (int k = 0; k < per; ++k) {
      size_t i = c * per + static_cast<size_t>(k);
      out[i].resize(size);
      in[i].resize(size);
      fill(out[i].data(), size, seed_of(g_rank, c, k));
      do {
        CHECK_NCCL(net.isend(pairs[c].send, out[i].data(), size, k, nullptr, &sreq[i]));
      } while (!sreq[i]);
      void* data[1] = {in[i].data()};
      size_t sizes_[1] = {size};
      int tags[1] = {k};
      void* mh[1] = {nullptr};
      do {
        CHECK_NCCL(net.irecv(pairs[c].recv, 1, data, sizes_, tags, mh, &rreq[i]));
      } while (!rreq[i]);
    }
  auto deadline = Clock::now() + std::chrono::seconds(60);
  size_t left = out.size() + in.size();
  std::vector<bool> sd(out.size()), rd(in.size());
  while (left) {
    for (size_t i = 0; i < out.size(); ++i) {
      int done = 0, sz = 0;
      if (!sd[i]) {
        CHECK_NCCL(net.test(sreq[i], &done, &sz));
        if (done) sd[i] = true, --left;
      }
      if (!rd[i]) {
        CHECK_NCCL(net.test(rreq[i], &done, &sz));
        if (done) {
          rd[i] = true, --left;
          size_t c = i / per;
          int k = static_cast<int>(i % per);
          if (static_cast<size_t>(sz) != size ||
              verify(in[i].data(), size, seed_of(1 - g_rank, c, k)) >= 0)
            die("connection %zu message %d arrived wrong", c, k);
        }
      }
    }
    if (Clock::now() > deadline) die("%zu requests still open after 60 s", left);
  }
  close_pairs(net, pairs);
  std::printf("{\"scenario\":\"many\",\"connections\":%zu,\"messages\":%zu,\"ok\":true}\n",
              pairs.size(), out.size() * 2);
  return 0;
}

// Grouped receives: n receives in one irecv, matched by tag whatever the send order.
int grouped(Net& net, void* ctx, Exchange& ex, const Options& o) {
  auto pairs = connect_pairs(net, ctx, ex, o.dev, 1, o.traffic_class, "grouped");
  Pair& p = pairs[0];
  const int n = 4;
  for (int round = 0; round < 8; ++round) {
    std::vector<std::vector<char>> out(n), in(n);
    size_t sz[n];
    int tags[n];
    void* data[n];
    void* mh[n] = {};
    for (int i = 0; i < n; ++i) {
      sz[i] = static_cast<size_t>(1000 + i * 300000 + round);
      tags[i] = 100 + i;
      in[static_cast<size_t>(i)].resize(sz[i] + 64);
      data[i] = in[static_cast<size_t>(i)].data();
      out[static_cast<size_t>(i)].resize(sz[i]);
      fill(out[static_cast<size_t>(i)].data(), sz[i], seed_of(g_rank, sz[i], round));
    }
    size_t rsz[n];
    for (int i = 0; i < n; ++i) rsz[i] = sz[i] + 64;
    void* rreq = nullptr;
    do {
      CHECK_NCCL(net.irecv(p.recv, n, data, rsz, tags, mh, &rreq));
    } while (!rreq);
    // the sends go in another order than the receives were posted
    void* sreq[n] = {};
    for (int j = 0; j < n; ++j) {
      int i = (j * 3 + round) % n;
      do {
        CHECK_NCCL(net.isend(p.send, out[static_cast<size_t>(i)].data(), sz[i], tags[i], nullptr,
                             &sreq[i]));
      } while (!sreq[i]);
    }
    int rdone = 0, got[n] = {};
    int sdone[n] = {};
    auto deadline = Clock::now() + std::chrono::seconds(30);
    for (;;) {
      bool all = true;
      for (int i = 0; i < n; ++i) {
        int s = 0;
        if (!sdone[i]) CHECK_NCCL(net.test(sreq[i], &sdone[i], &s));
        all = all && sdone[i];
      }
      if (!rdone) CHECK_NCCL(net.test(rreq, &rdone, got));
      if (all && rdone) break;
      if (Clock::now() > deadline) die("grouped round %d did not complete", round);
    }
    for (int i = 0; i < n; ++i)
      if (static_cast<size_t>(got[i]) != sz[i] ||
          verify(in[static_cast<size_t>(i)].data(), sz[i], seed_of(1 - g_rank, sz[i], round)) >= 0)
        die("grouped round %d receive %d: size %d (sent %zu) or data wrong", round, i, got[i],
            sz[i]);
  }
  close_pairs(net, pairs);
  std::printf("{\"scenario\":\"grouped\",\"rounds\":8,\"ok\":true}\n");
  return 0;
}

// A stream fails mid-transfer (NCCL_DUALPATH_FAULT in the environment): the
// plugin sends its chunks again elsewhere and every byte arrives.
int fault(Net& net, void* ctx, Exchange& ex, const Options& o) {
  auto pairs = connect_pairs(net, ctx, ex, o.dev, 1, o.traffic_class, "fault");
  Stats st;
  for (int round = 0; round < 4; ++round)
    exchange_one(net, pairs[0], 32u << 20, 0, seed_of(g_rank, 32, round),
                 seed_of(1 - g_rank, 32, round), round, st);
  close_pairs(net, pairs);
  int moves = log_count("move to");
  if (!moves) die("the fault was never reported as a move in the log");
  std::printf(
      "{\"scenario\":\"fault\",\"bytes_each_way\":%llu,\"moves\":%d,\"longest_gap_ms\":%.1f,"
      "\"ok\":true}\n",
      static_cast<unsigned long long>(st.bytes), moves, st.longest_gap_ms);
  return 0;
}

// A long transfer (the lab): --rounds messages of --bytes each way.
int stream(Net& net, void* ctx, Exchange& ex, const Options& o) {
  auto pairs = connect_pairs(net, ctx, ex, o.dev, 1, o.traffic_class, "stream");
  if (net.version >= 11) CHECK_NCCL(net.set_op(ctx, 1u << ncclFuncAlltoAll));
  ex.barrier("stream.start");
  Stats st;
  int round = 0;
  std::vector<double> round_ms;
  for (; round < o.rounds; ++round) {
    auto began = Clock::now();
    exchange_one(net, pairs[0], o.bytes, 0, seed_of(g_rank, o.bytes, round),
                 seed_of(1 - g_rank, o.bytes, round), round, st);
    round_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - began).count());
    if (o.pause_ms > 0) {
      // a job with its rails mostly idle: the gaps counted are the transfers'
      std::this_thread::sleep_for(std::chrono::milliseconds(o.pause_ms));
      st.last = Clock::now();
    }
  }
  ex.barrier("stream.end");
  close_pairs(net, pairs);
  std::printf(
      "{\"scenario\":\"stream\",\"rounds\":%d,\"bytes_each_way\":%llu,\"longest_gap_ms\":%.1f,"
      "\"median_round_ms\":%.1f,\"moves\":%d,\"ok\":true}\n",
      round, static_cast<unsigned long long>(st.bytes), st.longest_gap_ms,
      round_ms.empty() ? 0.0 : percentile(round_ms, 0.5), log_count("move to"));
  return 0;
}

// ------------------------------------------------------------------ bench
// nccl-tests' alltoall_perf and sendrecv_perf between the two ranks, moved
// as NCCL's proxy moves a collective over a net transport: what a rank sends
// its peer (alltoall: half of the size, the other half stays on the rank;
// sendrecv: all of it) cut into steps of --step bytes (NCCL's Simple
// protocol: a 4 MiB buffer in NCCL_STEPS = 8 steps of 512 KiB), at most 8
// steps in flight each way, each posted when the one before it left a slot.
// busbw as nccl-tests reports it: alltoall algbw * (n-1)/n, sendrecv algbw;
// with two ranks both are the bytes each way over the time. Per size: a
// few untimed iterations, then --budget bytes' worth (5 to 100 iterations),
// the last one's bytes checked. One JSON line per size.
//
// --transport socket is the baseline: plain TCP between --socket-addr
// addresses (one interface), one connection each way, the whole transfer
// pushed through it by one thread: NCCL's socket transport with its
// defaults (NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD unset: no helper
// threads, the data on the connection's own socket).

constexpr int kStepsInFlight = 8;

// NCCL's proxy thread polls test() in a loop. Both transports here are
// driven by the same loop, which pauses this long after a pass that made no
// progress: on a 2-core machine a loop that never pauses would be most of
// the CPU figure and take the CPU the transport's own threads need.
void idle_pause() {
  timespec ts{0, 20'000};
  ::nanosleep(&ts, nullptr);
}

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

double cpu_s() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// busy and total jiffies of the whole machine (/proc/stat's cpu line)
std::pair<uint64_t, uint64_t> machine_jiffies() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  uint64_t v[8] = {};
  f >> cpu;
  for (auto& x : v) f >> x;
  uint64_t idle = v[3] + v[4], total = 0;
  for (auto x : v) total += x;
  return {total - idle, total};
}

// One direction's bytes of one iteration, cut into steps.
struct Steps {
  size_t bytes = 0, step = 0;
  size_t count() const { return bytes == 0 ? 1 : (bytes + step - 1) / step; }
  size_t offset(size_t i) const { return i * step; }
  size_t len(size_t i) const { return std::min(step, bytes - std::min(bytes, i * step)); }
};

class BenchLink {
 public:
  virtual ~BenchLink() = default;
  // One iteration: `out` to the peer and `in` from it at once.
  virtual void iterate(char* out, char* in, const Steps& st) = 0;
};

class PluginLink : public BenchLink {
 public:
  PluginLink(Net& net, Pair& p, char* out, char* in, size_t cap) : net_(net), p_(p) {
    CHECK_NCCL(net.reg(p.send, out, cap, &mh_s_));
    CHECK_NCCL(net.reg(p.recv, in, cap, &mh_r_));
  }
  ~PluginLink() override {
    net_.dereg(p_.send, mh_s_);
    net_.dereg(p_.recv, mh_r_);
  }
  void iterate(char* out, char* in, const Steps& st) override {
    const size_t n = st.count();
    std::deque<void*> sends, recvs;
    size_t posted_s = 0, posted_r = 0, done_s = 0, done_r = 0;
    auto deadline = Clock::now() + std::chrono::seconds(120);
    while (done_s < n || done_r < n) {
      bool progress = false;
      while (posted_s < n && sends.size() < kStepsInFlight) {
        void* req = nullptr;
        CHECK_NCCL(
            net_.isend(p_.send, out + st.offset(posted_s), st.len(posted_s), 1, mh_s_, &req));
        if (!req) break;
        sends.push_back(req);
        ++posted_s;
        progress = true;
      }
      while (posted_r < n && recvs.size() < kStepsInFlight) {
        void* req = nullptr;
        void* data[1] = {in + st.offset(posted_r)};
        size_t sizes[1] = {st.len(posted_r)};
        int tags[1] = {1};
        void* mhs[1] = {mh_r_};
        CHECK_NCCL(net_.irecv(p_.recv, 1, data, sizes, tags, mhs, &req));
        if (!req) break;
        recvs.push_back(req);
        ++posted_r;
        progress = true;
      }
      // as the proxy does: the oldest request of each side first
      int done = 0, size = 0;
      if (!sends.empty()) {
        CHECK_NCCL(net_.test(sends.front(), &done, &size));
        if (done) sends.pop_front(), ++done_s, progress = true;
      }
      if (!recvs.empty()) {
        CHECK_NCCL(net_.test(recvs.front(), &done, &size));
        if (done) recvs.pop_front(), ++done_r, progress = true;
      }
      if (!progress) idle_pause();
      if (Clock::now() > deadline) die("a %zu-byte iteration did not finish in 120 s", st.bytes);
    }
  }

 private:
  Net& net_;
  Pair& p_;
  void *mh_s_ = nullptr, *mh_r_ = nullptr;
};

class SocketLink : public BenchLink {
 public:
  SocketLink(Exchange& ex, const std::string& addr) {
    sockaddr_storage me{};
    socklen_t len = parse_addr(addr, &me);
    int lfd = ::socket(me.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&me), len) != 0 || ::listen(lfd, 4) != 0)
      die("listening on %s: %s", addr.c_str(), std::strerror(errno));
    sockaddr_storage bound{};
    socklen_t blen = sizeof(bound);
    ::getsockname(lfd, reinterpret_cast<sockaddr*>(&bound), &blen);
    ex.put("socket.r" + std::to_string(g_rank), &bound, sizeof(bound));
    sockaddr_storage peer{};
    ex.get("socket.r" + std::to_string(1 - g_rank), &peer, sizeof(peer));
    send_fd_ = ::socket(me.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_storage src = me;
    set_port(&src, 0);
    if (::bind(send_fd_, reinterpret_cast<sockaddr*>(&src), len) != 0 ||
        ::connect(send_fd_, reinterpret_cast<sockaddr*>(&peer), len) != 0)
      die("connecting from %s: %s", addr.c_str(), std::strerror(errno));
    recv_fd_ = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (recv_fd_ < 0) die("accept: %s", std::strerror(errno));
    ::close(lfd);
    for (int fd : {send_fd_, recv_fd_}) {
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
  }
  ~SocketLink() override {
    ::close(send_fd_);
    ::close(recv_fd_);
  }
  void iterate(char* out, char* in, const Steps& st) override {
    size_t sent = 0, got = 0;
    auto deadline = Clock::now() + std::chrono::seconds(120);
    while (sent < st.bytes || got < st.bytes) {
      bool progress = false;
      if (sent < st.bytes) {
        ssize_t k = ::send(send_fd_, out + sent, st.bytes - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno != EAGAIN) die("send: %s", std::strerror(errno));
        if (k > 0) sent += static_cast<size_t>(k), progress = true;
      }
      if (got < st.bytes) {
        ssize_t k = ::recv(recv_fd_, in + got, st.bytes - got, MSG_DONTWAIT);
        if (k == 0) die("the peer closed its connection");
        if (k < 0 && errno != EAGAIN) die("recv: %s", std::strerror(errno));
        if (k > 0) got += static_cast<size_t>(k), progress = true;
      }
      if (!progress) idle_pause();
      if (Clock::now() > deadline) die("a %zu-byte iteration did not finish in 120 s", st.bytes);
    }
  }

 private:
  static socklen_t parse_addr(const std::string& a, sockaddr_storage* out) {
    if (auto* v4 = reinterpret_cast<sockaddr_in*>(out);
        ::inet_pton(AF_INET, a.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      return sizeof(sockaddr_in);
    }
    auto* v6 = reinterpret_cast<sockaddr_in6*>(out);
    if (::inet_pton(AF_INET6, a.c_str(), &v6->sin6_addr) != 1)
      die("--socket-addr %s is not an address", a.c_str());
    v6->sin6_family = AF_INET6;
    return sizeof(sockaddr_in6);
  }
  static void set_port(sockaddr_storage* a, uint16_t port) {
    if (a->ss_family == AF_INET)
      reinterpret_cast<sockaddr_in*>(a)->sin_port = htons(port);
    else
      reinterpret_cast<sockaddr_in6*>(a)->sin6_port = htons(port);
  }
  int send_fd_ = -1, recv_fd_ = -1;
};

int bench_sizes(BenchLink& link, Exchange& ex, const Options& o, const char* transport,
                std::vector<char>& out, std::vector<char>& in) {
  const bool alltoall = o.op == "alltoall";
  if (o.warmup > 0) {
    // before the first size: --warmup bytes in 4 MiB transfers (the
    // scheduler sees a steady load, as a job that has run a while)
    Steps st{std::min<size_t>(4u << 20, o.max_bytes), o.step};
    ex.barrier("bench." + o.op + ".warmup");
    for (size_t done = 0; done < o.warmup; done += st.bytes)
      link.iterate(out.data(), in.data(), st);
  }
  for (size_t size = o.min_bytes; size <= o.max_bytes; size *= 4) {
    Steps st{alltoall ? size / 2 : size, o.step};
    fill(out.data(), st.bytes, seed_of(g_rank, size, 0));
    const int iters =
        static_cast<int>(std::clamp<size_t>(o.budget / std::max<size_t>(st.bytes, 1), 5, 100));
    ex.barrier("bench." + o.op + "." + std::to_string(size));
    for (int w = 0; w < 2; ++w) link.iterate(out.data(), in.data(), st);
    std::vector<double> ms;
    const double cpu0 = cpu_s();
    const auto [busy0, total0] = machine_jiffies();
    const double t0 = now_s();
    for (int i = 0; i < iters; ++i) {
      const double b = now_s();
      link.iterate(out.data(), in.data(), st);
      ms.push_back((now_s() - b) * 1e3);
    }
    const double wall = now_s() - t0, cpu = cpu_s() - cpu0;
    const auto [busy1, total1] = machine_jiffies();
    if (long long bad = verify(in.data(), st.bytes, seed_of(1 - g_rank, size, 0)); bad >= 0)
      die("%s %zu: byte %lld of the last iteration differs", o.op.c_str(), size, bad);
    const double moved = 2.0 * static_cast<double>(st.bytes) * iters;  // both ways
    const double busbw = static_cast<double>(st.bytes) * iters / wall;
    std::printf(
        "{\"scenario\":\"bench\",\"transport\":\"%s\",\"op\":\"%s\",\"bytes\":%zu,"
        "\"bytes_each_way\":%zu,\"iterations\":%d,\"algbw_gbps\":%.4f,\"busbw_gbps\":%.4f,"
        "\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"cpu_s_per_gb\":%.4f,\"machine_busy\":%.3f,"
        "\"moves\":%d,\"ok\":true}\n",
        transport, o.op.c_str(), size, st.bytes, iters,
        static_cast<double>(size) * iters / wall * 8 / 1e9, busbw * 8 / 1e9, percentile(ms, 0.5),
        percentile(ms, 0.99), cpu / (moved / 1e9),
        total1 > total0 ? static_cast<double>(busy1 - busy0) / static_cast<double>(total1 - total0)
                        : 0.0,
        log_count("move to"));
    std::fflush(stdout);
  }
  return 0;
}

int bench(Net& net, void* ctx, Exchange& ex, const Options& o) {
  auto pairs = connect_pairs(net, ctx, ex, o.dev, 1, o.traffic_class, "bench");
  if (net.version >= 11)
    CHECK_NCCL(net.set_op(ctx, 1u << (o.op == "alltoall" ? ncclFuncAlltoAll : ncclFuncSend)));
  int rc;
  {
    std::vector<char> out(o.max_bytes), in(o.max_bytes);
    PluginLink link(net, pairs[0], out.data(), in.data(), o.max_bytes);
    rc = bench_sizes(link, ex, o, "plugin", out, in);
  }
  ex.barrier("bench.end");
  close_pairs(net, pairs);
  return rc;
}

int run_rank(const Options& o, Exchange& ex) {
  if (o.scenario == "bench" && o.transport == "socket") {
    std::vector<char> out(o.max_bytes), in(o.max_bytes);
    SocketLink link(ex, o.socket_addr);
    int rc = bench_sizes(link, ex, o, "socket", out, in);
    ex.barrier("bench.end");
    return rc;
  }
  Net net = load(o.plugin, o.version);
  void* ctx = nullptr;
  if (o.scenario == "badenv") {
    // the environment holds a value the plugin must refuse
    ncclResult_t r = net.init(&ctx, 1, NCCL_NET_TRAFFIC_CLASS_UNDEF);
    if (r == ncclSuccess) die("init accepted a wrong environment value");
    if (!log_has("WARN") || !log_has("NCCL_DUALPATH_"))
      die("init failed without naming the variable in NCCL's log");
    std::printf("{\"scenario\":\"badenv\",\"result\":%d,\"ok\":true}\n", r);
    return 0;
  }
  CHECK_NCCL(net.init(&ctx, 0x1000 + static_cast<uint64_t>(g_rank), o.traffic_class));
  if (net.version >= 11 && !ctx) die("a v11+ init returned no context");
  int rc = 0;
  if (o.scenario == "props") {
    rc = props(net, ctx);
  } else {
    int n = 0;
    CHECK_NCCL(net.devices(&n));
    Options o2 = o;
    if (o.fuse && n >= 2 && net.version >= 9) {
      CHECK_NCCL(net.make_vdevice(&o2.dev, 0, 1));
    }
    if (net.version >= 11) CHECK_NCCL(net.set_op(ctx, 1u << ncclFuncSend));
    if (o.scenario == "sizes")
      rc = sizes(net, ctx, ex, o2);
    else if (o.scenario == "many")
      rc = many(net, ctx, ex, o2);
    else if (o.scenario == "grouped")
      rc = grouped(net, ctx, ex, o2);
    else if (o.scenario == "fault")
      rc = fault(net, ctx, ex, o2);
    else if (o.scenario == "stream")
      rc = stream(net, ctx, ex, o2);
    else if (o.scenario == "bench")
      rc = bench(net, ctx, ex, o2);
    else
      die("unknown scenario %s", o.scenario.c_str());
  }
  CHECK_NCCL(net.finalize(ctx));
  if (net.version >= 11) ::dlclose(net.lib);  // NCCL unloads after the last finalize
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Plays NCCL's part for dualpath's net plugin (see the head of harness.cpp)"};
  app.add_option("--plugin", o.plugin, "the plugin's library");
  app.add_option("--version", o.version, "the table version to take (6-12)");
  app.add_option("--scenario", o.scenario,
                 "props, sizes, many, grouped, fault, badenv, stream or bench");
  app.add_option("--rank", o.rank, "this rank alone (0 or 1), with --exchange");
  app.add_option("--exchange", o.exchange, "the directory both ranks exchange handles in");
  app.add_option("--conns", o.conns, "many: connections");
  app.add_option("--dev", o.dev, "the device");
  app.add_option("--traffic-class", o.traffic_class, "the communicators' traffic class");
  app.add_option("--rounds", o.rounds, "stream: messages");
  app.add_option("--bytes", o.bytes, "stream: a message's bytes");
  app.add_flag("--fuse", o.fuse, "use a device fused over the first two");
  app.add_option("--op", o.op, "bench: alltoall or sendrecv");
  app.add_option("--transport", o.transport, "bench: plugin, or socket (plain TCP)");
  app.add_option("--socket-addr", o.socket_addr, "bench, socket: this rank's address");
  app.add_option("--min-bytes", o.min_bytes, "bench: the first size");
  app.add_option("--max-bytes", o.max_bytes, "bench: the last size (sizes grow 4x)");
  app.add_option("--step", o.step, "bench: NCCL's step (the bytes of one request)");
  app.add_option("--budget", o.budget, "bench: bytes each way per size");
  app.add_option("--warmup", o.warmup, "bench: bytes moved before the first size");
  app.add_option("--pause-ms", o.pause_ms, "stream: the pause between messages");
  CLI11_PARSE(app, argc, argv);
  if (o.op != "alltoall" && o.op != "sendrecv") die("--op is alltoall or sendrecv");
  if (o.transport != "plugin" && o.transport != "socket") die("--transport is plugin or socket");
  if (o.transport == "socket" && o.socket_addr.empty())
    die("--transport socket needs --socket-addr");
  if (o.min_bytes == 0 || o.min_bytes > o.max_bytes || o.step == 0)
    die("--min-bytes must be above 0 and at most --max-bytes; --step above 0");
  if (o.plugin.empty() && o.transport == "plugin") die("--plugin LIB is needed");
  if (o.version < 6 || o.version > 12) die("--version is 6 to 12");
  ::alarm(300);  // a hung transport fails the test rather than the CI job
  if (o.rank >= 0) {
    if (o.exchange.empty()) die("--rank needs --exchange DIR");
    g_rank = o.rank;
    Exchange ex{o.exchange};
    return run_rank(o, ex);
  }
  if (o.scenario == "badenv" || o.scenario == "props") {
    Exchange ex{"/nonexistent"};
    return run_rank(o, ex);
  }
  char tmpl[] = "/tmp/dp-nccl-XXXXXX";
  if (!::mkdtemp(tmpl)) die("mkdtemp: %s", std::strerror(errno));
  Exchange ex{tmpl};
  std::fflush(nullptr);
  pid_t child = ::fork();
  if (child == 0) {
    g_rank = 1;
    std::_Exit(run_rank(o, ex));
  }
  g_rank = 0;
  int rc = run_rank(o, ex);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::filesystem::remove_all(tmpl);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "rank1 failed (status %d)\n", status);
    return 1;
  }
  return rc;
}
