// SPDX-License-Identifier: Apache-2.0
#include "daemon_view.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "dualpath/nccl/net.h"
#include "log.h"

namespace dpnccl {

using json = nlohmann::json;

const DaemonClass* DaemonSnapshot::klass(const std::string& name) const {
  for (auto& c : classes)
    if (c.name == name) return &c;
  return nullptr;
}

const DaemonPath* DaemonSnapshot::path(const std::string& name) const {
  for (auto& p : paths)
    if (p.name == name) return &p;
  return nullptr;
}

bool daemon_call(const std::string& socket, const std::string& cmd, std::string* data_json,
                 std::string* error, int timeout_ms) {
  return daemon_call_args(socket, cmd, "{}", data_json, error, timeout_ms);
}

bool daemon_call_args(const std::string& socket, const std::string& cmd, const std::string& args,
                      std::string* data_json, std::string* error, int timeout_ms) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (socket.size() >= sizeof(a.sun_path)) {
    *error = "socket path " + socket + " is too long";
    return false;
  }
  std::memcpy(a.sun_path, socket.c_str(), socket.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    *error = "cannot reach dualpathd at " + socket + ": " + std::strerror(errno);
    return false;
  }
  json request_args = json::parse(args, nullptr, false);
  if (request_args.is_discarded()) request_args = json::object();
  std::string out = json{{"cmd", cmd}, {"args", request_args}}.dump() + "\n";
  for (size_t off = 0; off < out.size();) {
    ssize_t n = ::send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      *error = "sending to " + socket + ": " + std::strerror(errno);
      return false;
    }
    off += static_cast<size_t>(n);
  }
  std::string in;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[16384];
  while (in.find('\n') == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      *error = "dualpathd at " + socket + " did not answer " + cmd;
      return false;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      *error = "reading dualpathd's reply to " + cmd + " failed";
      return false;
    }
    in.append(buf, static_cast<size_t>(n));
  }
  json reply = json::parse(in.substr(0, in.find('\n')), nullptr, false);
  if (reply.is_discarded() || !reply.is_object()) {
    *error = "dualpathd's reply to " + cmd + " is not JSON";
    return false;
  }
  if (!reply.value("ok", false)) {
    *error = cmd + ": " + reply["error"].value("message", std::string("refused"));
    return false;
  }
  *data_json = reply["data"].dump();
  return true;
}

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// a key or a string value without its quotes
std::string unquote(std::string s) {
  s = trim(s);
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front())
    return s.substr(1, s.size() - 2);
  return s;
}

// the line without its comment (a # outside quotes)
std::string strip_comment(const std::string& line) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    char ch = line[i];
    if (quote) {
      if (ch == quote) quote = 0;
    } else if (ch == '"' || ch == '\'') {
      quote = ch;
    } else if (ch == '#') {
      return line.substr(0, i);
    }
  }
  return line;
}

// "a . b" -> {"a", "b"}
std::vector<std::string> dotted(const std::string& key) {
  std::vector<std::string> out;
  std::string cur;
  char quote = 0;
  for (char ch : key) {
    if (quote) {
      if (ch == quote) quote = 0;
      cur += ch;
    } else if (ch == '"' || ch == '\'') {
      quote = ch;
      cur += ch;
    } else if (ch == '.') {
      out.push_back(unquote(cur));
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(unquote(cur));
  return out;
}

void put(DaemonSnapshot* s, const std::string& table, const std::string& key,
         const std::string& value) {
  if (table == "traffic_class") {
    char* end = nullptr;
    long n = std::strtol(key.c_str(), &end, 10);
    if (end && !*end && !key.empty()) s->traffic_classes[static_cast<int>(n)] = value;
  } else if (table == "operation") {
    s->operations[key] = value;
  }
}

}  // namespace

void parse_policy_nccl(const std::string& text, DaemonSnapshot* s) {
  std::string section;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = trim(strip_comment(text.substr(start, end - start)));
    start = end + 1;
    if (line.empty()) continue;
    if (line.front() == '[') {
      std::string name = line.substr(line.find_first_not_of('['));
      name = name.substr(0, name.find(']'));
      auto parts = dotted(name);
      section.clear();
      for (auto& p : parts) section += (section.empty() ? "" : ".") + p;
      continue;
    }
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    auto key = dotted(trim(line.substr(0, eq)));
    std::string value = trim(line.substr(eq + 1));
    if (section == "node" && key.size() == 1 && key[0] == "default_class") {
      s->default_class = unquote(value);
    } else if (section == "nccl" && key.size() == 2) {
      put(s, key[0], key[1], unquote(value));
    } else if (section == "nccl" && key.size() == 1 && value.size() > 1 && value.front() == '{') {
      // traffic_class = { 3 = "a", 5 = "b" }
      std::string body = value.substr(1, value.rfind('}') - 1);
      size_t i = 0;
      while (i < body.size()) {
        size_t comma = body.find(',', i);
        if (comma == std::string::npos) comma = body.size();
        std::string pair = body.substr(i, comma - i);
        i = comma + 1;
        auto e = pair.find('=');
        if (e != std::string::npos)
          put(s, key[0], unquote(pair.substr(0, e)), unquote(pair.substr(e + 1)));
      }
    } else if ((section == "nccl.traffic_class" || section == "nccl.operation") &&
               key.size() == 1) {
      put(s, section.substr(5), key[0], unquote(value));
    }
  }
}

namespace {

bool query(const std::string& socket, const std::string& cmd, json* out, std::string* error) {
  std::string text;
  if (!daemon_call(socket, cmd, &text, error)) return false;
  *out = json::parse(text, nullptr, false);
  return !out->is_discarded();
}

}  // namespace

bool DaemonView::refresh(std::string* error) {
  json paths, classes, nccl;
  if (!query(socket_, "path.list", &paths, error) || !query(socket_, "class.list", &classes, error))
    return false;
  auto s = std::make_shared<DaemonSnapshot>();
  try {
    for (auto& p : paths) {
      DaemonPath d;
      d.name = p.value("name", "");
      d.interface = p.value("interface", "");
      d.capacity_bps = p.value("capacity_bps", uint64_t{0});
      d.fwmark = p.value("fwmark", uint32_t{0});
      if (p.contains("health") && p["health"].is_object())
        d.state = p["health"].value("state", "up");
      s->paths.push_back(d);
    }
    for (auto& c : classes) {
      DaemonClass d;
      d.name = c.value("name", "");
      if (c.contains("shares") && c["shares"].is_object())
        for (auto& [k, v] : c["shares"].items())
          if (v.is_number()) d.shares[k] = v.get<double>();
      if (c.contains("cgroups") && c["cgroups"].is_array())
        for (auto& g : c["cgroups"])
          if (g.contains("cgroup") && g["cgroup"].is_string())
            d.cgroups.push_back(g["cgroup"].get<std::string>());
      s->classes.push_back(d);
    }
    // the policy's [nccl] mapping and default class, read again when the policy changed
    auto now = std::chrono::steady_clock::now();
    if (policy_hash_.empty() || now - policy_read_ > std::chrono::seconds(1)) {
      json pol;
      std::string ignored;
      policy_read_ = now;
      if (query(socket_, "policy.show", &pol, &ignored) && pol.is_object() &&
          pol.contains("text") && pol["text"].is_string()) {
        DaemonSnapshot mapping;
        parse_policy_nccl(pol["text"].get<std::string>(), &mapping);
        policy_hash_ = pol.value("hash", std::string("?"));
        traffic_classes_ = mapping.traffic_classes;
        operations_ = mapping.operations;
        default_class_ = mapping.default_class;
      }
    }
    s->traffic_classes = traffic_classes_;
    s->operations = operations_;
    s->default_class = default_class_;
  } catch (const std::exception& e) {
    *error = std::string("unexpected reply from dualpathd: ") + e.what();
    return false;
  }
  std::lock_guard<std::mutex> g(mu_);
  auto same = [](const DaemonSnapshot& a, const DaemonSnapshot& b) {
    if (a.paths.size() != b.paths.size() || a.classes.size() != b.classes.size()) return false;
    for (size_t i = 0; i < a.paths.size(); ++i)
      if (a.paths[i].name != b.paths[i].name || a.paths[i].state != b.paths[i].state) return false;
    for (size_t i = 0; i < a.classes.size(); ++i)
      if (a.classes[i].name != b.classes[i].name || a.classes[i].shares != b.classes[i].shares)
        return false;
    return a.traffic_classes == b.traffic_classes && a.operations == b.operations &&
           a.default_class == b.default_class;
  };
  s->generation = snap_ ? snap_->generation + (same(*snap_, *s) ? 0 : 1) : 1;
  snap_ = std::move(s);
  return true;
}

bool DaemonView::start(const std::string& socket, std::string* error) {
  socket_ = socket;
  if (!refresh(error)) return false;
  stop_ = false;
  thread_ = std::thread([this] { loop(); });
  return true;
}

void Traffic::sent(const std::string& klass, const std::string& rail, uint64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  bytes_[{klass, rail}] += bytes;
  changed_ = true;
}

void Traffic::moved(const std::string& klass, std::string reason) {
  std::lock_guard<std::mutex> g(mu_);
  if (moves_.size() < kMaxMoves) moves_.emplace_back(klass, std::move(reason));
  changed_ = true;
}

std::string Traffic::report(const std::string& process) {
  std::lock_guard<std::mutex> g(mu_);
  if (!changed_) return "";
  json counts = json::array(), moves = json::array();
  for (const auto& [k, n] : bytes_) counts.push_back({k.first, k.second, n});
  for (auto& [k, why] : moves_) moves.push_back({{"class", k}, {"reason", why.substr(0, 512)}});
  moves_.clear();
  changed_ = false;
  json args{{"process", process}, {"bytes", counts}, {"moves", moves}};
  if (unmarked_) args["unmarked"] = true;
  return args.dump();
}

void Traffic::unmarked() {
  std::lock_guard<std::mutex> g(mu_);
  unmarked_ = true;
}

Traffic& traffic() {
  // never destroyed: the daemon view's last report runs in the plugin
  // state's destructor, at exit, after statics made later are gone
  static Traffic* t = new Traffic;
  return *t;
}

namespace {

std::string process_name() {
  std::ifstream f("/proc/self/comm");
  std::string name;
  std::getline(f, name);
  return name.empty() ? "?" : name;
}

}  // namespace

void DaemonView::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  const std::string name = process_name();
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(100));
    if (stop_) break;
    lk.unlock();
    std::string error;
    refresh(&error);  // a daemon that went away keeps its last word
    if (report_ && ++report_ticks_ >= kReportTicks) {
      report_ticks_ = 0;
      std::string args = traffic().report(name), data;
      if (!args.empty() && !daemon_call_args(socket_, "nccl.report", args, &data, &error) &&
          error.find("unknown command") != std::string::npos) {
        DPN_INFO(
            "dualpathd does not take nccl.report (an older version): the plugin's bytes "
            "per class are not in its class list or metrics");
        report_ = false;
      }
    }
    lk.lock();
  }
  lk.unlock();
  // what was sent since the last report
  std::string args = traffic().report(name), data, error;
  if (report_ && !args.empty()) daemon_call_args(socket_, "nccl.report", args, &data, &error, 200);
}

void DaemonView::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

DaemonView::~DaemonView() { stop(); }

std::shared_ptr<const DaemonSnapshot> DaemonView::snapshot() const {
  std::lock_guard<std::mutex> g(mu_);
  return snap_;
}

std::string operation_name(uint32_t op) {
  // one function's bit, as NCCL sets it before a transfer; a mask of several
  // (the point-to-point functions, at connect) or NCCL_NET_ATTR_UNDEF names
  // none
  if (op == 0 || op == static_cast<uint32_t>(NCCL_NET_ATTR_UNDEF) || (op & (op - 1)) != 0)
    return "";
  switch (std::countr_zero(op)) {
    case ncclFuncAlltoAll:
      return "alltoall";
    case ncclFuncAllReduce:
      return "allreduce";
    case ncclFuncAllGather:
    case ncclFuncAllGatherV:
      return "allgather";
    case ncclFuncReduceScatter:
      return "reducescatter";
    case ncclFuncBroadcast:
      return "broadcast";
    case ncclFuncReduce:
      return "reduce";
    case ncclFuncSendRecv:
    case ncclFuncSend:
    case ncclFuncRecv:
      return "sendrecv";
    default:
      return "";
  }
}

std::string own_cgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return "";
}

namespace {

// the cgroup directory of a class rule contains the process's cgroup
bool cgroup_within(const std::string& own, const std::string& dir) {
  if (dir.empty() || own.empty()) return false;
  std::string d = dir;
  // the daemon names directories below the cgroup mount, with or without it
  if (auto p = d.find("/sys/fs/cgroup"); p == 0) d = d.substr(std::strlen("/sys/fs/cgroup"));
  if (d.empty() || d[0] != '/') d = "/" + d;
  return own == d ||
         (own.size() > d.size() && own.compare(0, d.size(), d) == 0 && own[d.size()] == '/');
}

}  // namespace

Placement place(const DaemonSnapshot* snap, const std::string& env_class, int traffic_class,
                uint32_t op, const std::string& cgroup, const std::vector<Rail>& rails) {
  Placement p;
  p.share.assign(rails.size(), 0.0);
  p.up.assign(rails.size(), true);
  if (!snap) {
    uint64_t total = 0;
    bool known = true;
    for (auto& r : rails) {
      total += r.capacity_bps;
      known = known && r.capacity_bps;
    }
    for (size_t i = 0; i < rails.size(); ++i)
      p.share[i] = known && total
                       ? static_cast<double>(rails[i].capacity_bps) / static_cast<double>(total)
                       : 1.0 / static_cast<double>(rails.size());
    p.why = known ? "no dualpathd: shares by the rails' capacity"
                  : "no dualpathd: equal shares (rail capacities unknown)";
    return p;
  }
  std::string opname = operation_name(op);
  const DaemonClass* c = nullptr;
  if (!env_class.empty() && (c = snap->klass(env_class))) {
    p.why = "NCCL_DUALPATH_CLASS";
  } else if (auto t = snap->traffic_classes.find(traffic_class);
             traffic_class != NCCL_NET_TRAFFIC_CLASS_UNDEF && t != snap->traffic_classes.end() &&
             (c = snap->klass(t->second))) {
    p.why = "the communicator's traffic class " + std::to_string(traffic_class);
  } else if (auto o = snap->operations.find(opname);
             !opname.empty() && o != snap->operations.end() && (c = snap->klass(o->second))) {
    p.why = "operation " + opname;
  } else {
    for (auto& k : snap->classes) {
      for (auto& g : k.cgroups)
        if (cgroup_within(cgroup, g)) c = &k;
      if (c) break;
    }
    if (c) {
      p.why = "the process's cgroup " + cgroup;
    } else if (!snap->default_class.empty() && (c = snap->klass(snap->default_class))) {
      p.why = "the policy's default class";
    }
  }
  for (size_t i = 0; i < rails.size(); ++i) {
    const DaemonPath* dp = snap->path(rails[i].name);
    p.up[i] = !dp || (dp->state != "down" && dp->state != "holddown" && dp->state != "drained");
  }
  double total = 0;
  if (c) {
    p.klass = c->name;
    for (size_t i = 0; i < rails.size(); ++i) {
      auto s = c->shares.find(rails[i].name);
      p.share[i] = p.up[i] && s != c->shares.end() ? s->second : 0.0;
      total += p.share[i];
    }
  }
  if (total <= 0) {
    // no class, or a decision that names none of these rails: by capacity over the rails up
    if (!c) p.why = "no class matched: shares by the rails' capacity";
    for (size_t i = 0; i < rails.size(); ++i) {
      p.share[i] =
          p.up[i] ? static_cast<double>(rails[i].capacity_bps ? rails[i].capacity_bps : 1) : 0.0;
      total += p.share[i];
    }
  }
  if (total <= 0) {
    for (auto& s : p.share) s = 1.0 / static_cast<double>(rails.size());
    return p;
  }
  for (auto& s : p.share) s /= total;
  return p;
}

}  // namespace dpnccl
