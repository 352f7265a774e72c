// SPDX-License-Identifier: Apache-2.0
// The control server over a real unix socket and event loop, without root:
// the command table's errors and privileges, nesting refused before parsing,
// and that no client can stall the loop: a flood of slow requests
// is handled a few milliseconds per pass while a timer keeps firing, and a
// client that never reads its replies neither blocks the loop nor another
// client.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
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

  Server() {
    table.add({"slow", false, "", {}, [this](const json&) {
                 std::this_thread::sleep_for(5ms);
                 ++slow_done;
                 return reply_ok();
               }});
    table.add(
        {"big", false, "", {}, [](const json&) { return reply_ok(std::string(1 << 20, 'b')); }});
    table.add({"status", false, "", {}, [](const json&) { return reply_ok({{"node", "t"}}); }});
    auto s = ControlServer::listen(path, "");
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

}  // namespace
}  // namespace dp
