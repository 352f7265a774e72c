// SPDX-License-Identifier: Apache-2.0
// The control server over a real unix socket and event loop, without root:
// the command table's errors and privileges, nesting refused before parsing,
// and that no client can stall the loop: a flood of slow requests
// is handled a few milliseconds per pass while a timer keeps firing, and a
// client that never reads its replies neither blocks the loop nor another
// client. With root: who may steer, from clients in child processes that
// became nobody with the groups of each role.
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "control_server.h"
#include "dualpath/client/control_socket.h"
#include "event_loop.h"

namespace dp {
namespace {

using namespace std::chrono_literals;

TEST(ControlServer, JsonDepthIgnoresBracketsInStrings) {
  EXPECT_EQ(json_depth(R"({"cmd":"status"})"), 1u);
  EXPECT_EQ(json_depth(R"({"a":[[[1]]]})"), 4u);
  EXPECT_EQ(json_depth(R"({"a":"[[[[{{"})"), 1u);
  EXPECT_EQ(json_depth(R"({"a":"\"[[[","b":[1]})"), 2u);
  EXPECT_EQ(json_depth(std::string(5000, '[')), 5000u);
}

TEST(ControlServer, TheCommandTableOwnsPrivilegesAndErrors) {
  CommandTable t;
  int ran = 0;
  t.add({"q", false, "", {}, [&](const json&) {
           ++ran;
           return reply_ok();
         }});
  t.add({"m", true, "", {}, [&](const json&) {
           ++ran;
           return reply_ok();
         }});
  EXPECT_EQ(t.dispatch(json{{"cmd", "q"}}, false)["ok"], true);
  EXPECT_EQ(t.dispatch(json{{"cmd", "m"}}, false)["error"]["code"], "permission_denied");
  EXPECT_EQ(t.dispatch(json{{"cmd", "m"}}, true)["ok"], true);
  EXPECT_EQ(t.dispatch(json{{"cmd", "x"}}, true)["error"]["code"], "unknown_command");
  EXPECT_EQ(t.dispatch(json{{"cmd", "q"}, {"args", 1}}, true)["error"]["code"], "bad_request");
  EXPECT_EQ(t.dispatch(json::array(), true)["error"]["code"], "bad_request");
  EXPECT_EQ(ran, 2);
  // a peer of no role runs nothing, not even a query
  EXPECT_EQ(t.dispatch(json{{"cmd", "q"}}, Role::None)["error"]["code"], "permission_denied");
  EXPECT_EQ(ran, 2);
}

// Roles from a peer's ids: root and the admin group change, the read group
// queries, by the primary group as well as a supplementary one; the refusal
// names the command and the group it needs.
TEST(ControlServer, ARolesGroupsDecideWhatAPeerMayRun) {
  SocketRoles r{"dpadmin", "dpread", gid_t{2001}, gid_t{2002}};
  const std::vector<gid_t> none{100, 7}, reader{100, 2002}, admin{2001}, both{2002, 2001};
  EXPECT_EQ(r.role_of(0, none), Role::Admin);
  EXPECT_EQ(r.role_of(1000, admin), Role::Admin);
  EXPECT_EQ(r.role_of(1000, both), Role::Admin);
  EXPECT_EQ(r.role_of(1000, reader), Role::Reader);
  EXPECT_EQ(r.role_of(1000, none), Role::None);
  EXPECT_EQ(r.refusal("class.set", true, Role::Reader),
            "class.set changes the node: it needs root or a member of group dpadmin; this client "
            "may only query");
  EXPECT_EQ(r.refusal("status", false, Role::None),
            "status needs root or a member of group dpread or dpadmin");
  SocketRoles read_only{"", "dpread", std::nullopt, gid_t{2002}};
  EXPECT_EQ(read_only.role_of(1000, admin), Role::None);
  EXPECT_EQ(read_only.refusal("policy.reload", true, Role::Reader),
            "policy.reload changes the node: it needs root (dualpathd was started without "
            "--admin-group); this client may only query");
  SocketRoles root_only;
  EXPECT_EQ(root_only.role_of(1000, both), Role::None);
  EXPECT_EQ(root_only.role_of(0, none), Role::Admin);
  SocketRoles unknown{"dp-no-such-group-x", "", {}, {}};
  auto e = unknown.resolve();
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message, "--admin-group dp-no-such-group-x: no such group");
}

// Arguments are checked against the command's declaration before it runs: a
// required one missing or of another type names what the command needs, an
// optional one of the wrong type says what it must be.
TEST(ControlServer, ArgumentsAreCheckedAgainstTheDeclaration) {
  CommandTable t;
  int ran = 0;
  t.add({"class.set",
         true,
         "pin a class",
         {
             {"class", ArgType::String, true, "class name"},
             {"path", ArgType::String, true, "path name"},
         },
         [&](const json&) {
           ++ran;
           return reply_ok();
         }});
  t.add({"flow.list",
         false,
         "flows",
         {
             {"top", ArgType::Positive, false, "how many"},
             {"since", ArgType::Unsigned, false, "after", "an event number"},
         },
         [&](const json&) {
           ++ran;
           return reply_ok();
         }});
  auto err = [&](const json& req) { return t.dispatch(req, true)["error"]; };
  json e = err({{"cmd", "class.set"}, {"args", {{"class", "logs"}}}});
  EXPECT_EQ(e["code"], "bad_request");
  EXPECT_EQ(e["message"], "class.set needs \"class\" and \"path\"");
  EXPECT_EQ(err({{"cmd", "class.set"}, {"args", {{"class", "logs"}, {"path", 1}}}})["message"],
            "class.set needs \"class\" and \"path\"");
  EXPECT_EQ(err({{"cmd", "flow.list"}, {"args", {{"top", 0}}}})["message"],
            "\"top\" must be a positive integer");
  EXPECT_EQ(err({{"cmd", "flow.list"}, {"args", {{"since", "x"}}}})["message"],
            "\"since\" must be an event number");
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(
      t.dispatch({{"cmd", "class.set"}, {"args", {{"class", "a"}, {"path", "b"}}}}, true)["ok"],
      true);
  EXPECT_EQ(t.dispatch({{"cmd", "flow.list"}, {"args", {{"top", 3u}, {"since", 0u}}}}, true)["ok"],
            true);
  EXPECT_EQ(ran, 2);
}

// A server on a private socket, its loop in a thread; `slow` takes 5 ms and
// `big` answers 1 MiB.
struct Server {
  std::string path =
      (std::filesystem::temp_directory_path() / ("dp-cs-" + std::to_string(::getpid()) + ".sock"))
          .string();
  EventLoop loop;
  CommandTable table;
  std::unique_ptr<ControlServer> server;
  std::atomic<int> timer_fires{0}, slow_done{0};
  std::thread thread;

  std::atomic<int> changes{0};

  explicit Server(SocketRoles roles = {}) {
    table.add({"set", true, "", {}, [this](const json&) {
                 ++changes;
                 return reply_ok();
               }});
    table.add({"slow", false, "", {}, [this](const json&) {
                 std::this_thread::sleep_for(5ms);
                 ++slow_done;
                 return reply_ok();
               }});
    table.add(
        {"big", false, "", {}, [](const json&) { return reply_ok(std::string(1 << 20, 'b')); }});
    table.add({"status", false, "", {}, [](const json&) { return reply_ok({{"node", "t"}}); }});
    auto s = ControlServer::listen(path, std::move(roles));
    EXPECT_TRUE(s) << s.error().what();
    server = std::move(*s);
    server->serve(loop, table);
    auto t = loop.add_timer([this] { ++timer_fires; });
    EXPECT_TRUE(t);
    EXPECT_TRUE(loop.set_interval(*t, 20ms));
    thread = std::thread([this] { loop.run(); });
  }
  ~Server() {
    (void)call(path, json{{"cmd", "status"}});  // wakes the loop to see stop()
    loop.stop();
    (void)call(path, json{{"cmd", "status"}}, 200);
    thread.join();
    server->close();
  }
  int connect_raw() const {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    return fd;
  }
};

TEST(ControlServer, AFloodOfSlowRequestsIsHandledAFewMillisecondsAtATime) {
  Server s;
  int fd = s.connect_raw();
  std::string flood;
  for (int i = 0; i < 200; ++i)
    flood += R"({"cmd":"slow"})"
             "\n";  // 1 s of work in one write
  ASSERT_EQ(::send(fd, flood.data(), flood.size(), 0), static_cast<ssize_t>(flood.size()));
  // meanwhile another client is answered, and the loop's timer keeps firing
  std::this_thread::sleep_for(100ms);
  auto r = call(s.path, json{{"cmd", "status"}}, 2000);
  ASSERT_TRUE(r) << r.error().what();
  EXPECT_EQ((*r)["data"]["node"], "t");
  EXPECT_LT(s.slow_done.load(), 200) << "answered while the flood was still being handled";
  for (int i = 0; i < 300 && s.slow_done < 200; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(s.slow_done.load(), 200);
  EXPECT_GE(s.timer_fires.load(), 10) << "the loop kept running its timer through the flood";
  ::close(fd);
}

TEST(ControlServer, AClientThatDoesNotReadBlocksNeitherTheLoopNorOthers) {
  Server s;
  int fd = s.connect_raw();
  std::string reqs;
  for (int i = 0; i < 20; ++i)
    reqs += R"({"cmd":"big"})"
            "\n";  // 20 MiB of replies, never read
  ASSERT_EQ(::send(fd, reqs.data(), reqs.size(), 0), static_cast<ssize_t>(reqs.size()));
  std::this_thread::sleep_for(200ms);
  int before = s.timer_fires;
  auto r = call(s.path, json{{"cmd", "status"}}, 2000);
  ASSERT_TRUE(r) << r.error().what();
  std::this_thread::sleep_for(200ms);
  EXPECT_GT(s.timer_fires.load(), before + 3) << "the loop runs on";
  ::close(fd);
}

TEST(ControlServer, DeepNestingAndOverlongLinesAreRefusedBeforeParsing) {
  Server s;
  std::string deep =
      R"({"cmd":"status","args":{"x":)" + std::string(10000, '[') + std::string(10000, ']') + "}}";
  int fd = s.connect_raw();
  deep += "\n";
  ASSERT_EQ(::send(fd, deep.data(), deep.size(), 0), static_cast<ssize_t>(deep.size()));
  char buf[4096];
  ssize_t n = ::recv(fd, buf, sizeof(buf) - 1, 0);
  ASSERT_GT(n, 0);
  json reply = json::parse(std::string(buf, static_cast<size_t>(n)), nullptr, false);
  EXPECT_EQ(reply["error"]["code"], "bad_request");
  EXPECT_NE(reply["error"]["message"].get<std::string>().find("nested"), std::string::npos);
  ::close(fd);
  // a line over 64 KiB is refused as soon as it is, and its connection closed
  fd = s.connect_raw();
  std::string huge(kMaxRequestBytes + 10, 'x');
  ASSERT_EQ(::send(fd, huge.data(), huge.size(), 0), static_cast<ssize_t>(huge.size()));
  n = ::recv(fd, buf, sizeof(buf) - 1, 0);
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buf, static_cast<size_t>(n)).find("too large"), std::string::npos);
  EXPECT_EQ(::recv(fd, buf, sizeof(buf), 0), 0) << "closed";
  ::close(fd);
}

TEST(ControlServer, ClientsAreCapped) {
  Server s;
  std::vector<int> fds;
  for (size_t i = 0; i < ControlServer::kMaxClients; ++i) fds.push_back(s.connect_raw());
  std::this_thread::sleep_for(100ms);
  int extra = s.connect_raw();
  char buf[512];
  ssize_t n = ::recv(extra, buf, sizeof(buf) - 1, 0);
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buf, static_cast<size_t>(n)).find("too many clients"), std::string::npos);
  ::close(extra);
  for (int fd : fds) ::close(fd);
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(call(s.path, json{{"cmd", "status"}}, 2000)) << "served again once clients left";
}

// A client in a child process that became `uid` with primary group `gid` and
// supplementary `groups`: it connects to `path` and sends `requests` one at a
// time over that one connection. The replies come back, or the connect's
// errno. (The child makes only system calls: the parent has threads.)
struct AsUser {
  int connect_errno = 0;
  std::vector<json> replies;
};
AsUser as_user(const std::string& path, uid_t uid, gid_t gid, std::vector<gid_t> groups,
               const std::vector<json>& requests) {
  std::vector<std::string> lines;
  for (const auto& r : requests) lines.push_back(r.dump() + "\n");
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    int out = pipe_fds[1];
    if (::setgroups(groups.size(), groups.data()) != 0 || ::setresgid(gid, gid, gid) != 0 ||
        ::setresuid(uid, uid, uid) != 0)
      ::_exit(2);
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      char e[32];
      int n = std::snprintf(e, sizeof(e), "E%d\n", errno);
      ::_exit(::write(out, e, static_cast<size_t>(n)) == n ? 0 : 3);
    }
    for (const auto& l : lines) {
      if (::send(fd, l.data(), l.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(l.size()))
        ::_exit(4);
      char buf[4096];
      for (bool done = false; !done;) {  // one reply: up to its newline
        ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) ::_exit(5);
        done = buf[n - 1] == '\n';
        if (::write(out, buf, static_cast<size_t>(n)) != n) ::_exit(6);
      }
    }
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof(buf))) > 0;)
    got.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the client failed: " << status;
  AsUser r;
  if (got.starts_with("E")) {
    r.connect_errno = std::atoi(got.c_str() + 1);
    return r;
  }
  for (size_t at = 0, nl; (nl = got.find('\n', at)) != std::string::npos; at = nl + 1)
    r.replies.push_back(json::parse(got.substr(at, nl - at), nullptr, false));
  return r;
}

// Two existing groups stand for the roles: staff administers, users reads.
// The clients are nobody (65534) in group nogroup, plus the group of their
// role, or none.
struct Roles : ::testing::Test {
  static constexpr uid_t kNobody = 65534;
  static constexpr gid_t kNogroup = 65534;
  gid_t admin = 0, read = 0;
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "skipped: needs root to become nobody";
    const ::group* g = ::getgrnam("staff");  // static storage: copied at once
    if (!g) GTEST_SKIP() << "skipped: needs the group staff";
    admin = g->gr_gid;
    g = ::getgrnam("users");
    if (!g) GTEST_SKIP() << "skipped: needs the group users";
    read = g->gr_gid;
    ASSERT_NE(admin, read);
  }
  static json status() { return {{"cmd", "status"}}; }
  static json set() { return {{"cmd", "set"}}; }
};

TEST_F(Roles, AReaderQueriesAndIsToldWhyAChangeIsRefused) {
  Server s(SocketRoles{"staff", "users", {}, {}});
  auto r = as_user(s.path, kNobody, kNogroup, {read}, {status(), set(), status()});
  ASSERT_EQ(r.connect_errno, 0) << std::strerror(r.connect_errno);
  ASSERT_EQ(r.replies.size(), 3u);
  EXPECT_EQ(r.replies[0]["data"]["node"], "t");
  EXPECT_EQ(r.replies[1]["error"]["code"], "permission_denied");
  EXPECT_EQ(r.replies[1]["error"]["message"],
            "set changes the node: it needs root or a member of group staff; this client may "
            "only query");
  EXPECT_EQ(r.replies[2]["data"]["node"], "t") << "the connection stays usable for queries";
  EXPECT_EQ(s.changes.load(), 0);
  // the read group as the primary group, no supplementary ones
  r = as_user(s.path, kNobody, read, {}, {status(), set()});
  ASSERT_EQ(r.replies.size(), 2u);
  EXPECT_EQ(r.replies[0]["data"]["node"], "t");
  EXPECT_EQ(r.replies[1]["error"]["code"], "permission_denied");
  EXPECT_EQ(s.changes.load(), 0);
}

TEST_F(Roles, AnAdminChangesThroughTheSocketsAcl) {
  Server s(SocketRoles{"staff", "users", {}, {}});
  // the file: root:users 0660, and staff admitted by an ACL entry
  struct stat st {};
  ASSERT_EQ(::stat(s.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, read);
  EXPECT_GT(::getxattr(s.path.c_str(), "system.posix_acl_access", nullptr, 0), 0);
  // a member of staff only, not of users: it connects through the ACL
  auto r = as_user(s.path, kNobody, kNogroup, {admin}, {set(), status()});
  ASSERT_EQ(r.connect_errno, 0) << std::strerror(r.connect_errno);
  ASSERT_EQ(r.replies.size(), 2u);
  EXPECT_EQ(r.replies[0]["ok"], true) << r.replies[0];
  EXPECT_EQ(r.replies[1]["data"]["node"], "t");
  EXPECT_EQ(s.changes.load(), 1);
}

TEST_F(Roles, SomeoneInNeitherGroupIsRefusedEverything) {
  Server s(SocketRoles{"staff", "users", {}, {}});
  auto r = as_user(s.path, kNobody, kNogroup, {}, {status()});
  EXPECT_EQ(r.connect_errno, EACCES) << "the socket file keeps them out";
  // and should the file let them in, the daemon refuses each request
  ASSERT_EQ(::chmod(s.path.c_str(), 0666), 0);
  r = as_user(s.path, kNobody, kNogroup, {}, {status(), set()});
  ASSERT_EQ(r.connect_errno, 0) << std::strerror(r.connect_errno);
  ASSERT_EQ(r.replies.size(), 2u);
  EXPECT_EQ(r.replies[0]["error"]["code"], "permission_denied");
  EXPECT_EQ(r.replies[0]["error"]["message"],
            "status needs root or a member of group users or staff");
  EXPECT_EQ(r.replies[1]["error"]["code"], "permission_denied");
  EXPECT_EQ(s.changes.load(), 0);
}

TEST_F(Roles, RootDoesEverything) {
  Server s(SocketRoles{"staff", "users", {}, {}});
  auto r = call(s.path, set());
  ASSERT_TRUE(r) << r.error().what();
  EXPECT_EQ((*r)["ok"], true);
  r = call(s.path, status());
  ASSERT_TRUE(r) << r.error().what();
  EXPECT_EQ((*r)["data"]["node"], "t");
  EXPECT_EQ(s.changes.load(), 1);
}

// Without --admin-group (the compatible default), the read group queries and
// only root changes; without either group, only root may connect.
TEST_F(Roles, WithoutAnAdminGroupOnlyRootChanges) {
  {
    Server s(SocketRoles{"", "users", {}, {}});
    auto r = as_user(s.path, kNobody, kNogroup, {read, admin}, {status(), set()});
    ASSERT_EQ(r.replies.size(), 2u);
    EXPECT_EQ(r.replies[0]["data"]["node"], "t");
    EXPECT_NE(r.replies[1]["error"]["message"].get<std::string>().find("needs root"),
              std::string::npos);
    EXPECT_EQ(s.changes.load(), 0);
  }
  Server s;
  auto r = as_user(s.path, kNobody, kNogroup, {read, admin}, {status()});
  EXPECT_EQ(r.connect_errno, EACCES);
}

}  // namespace
}  // namespace dp
