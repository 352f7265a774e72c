// SPDX-License-Identifier: Apache-2.0
// Cluster descriptions (dualpath-cluster(5)): the worked fleet in policies/
// renders to the goldens in tests/golden/cluster/ byte for byte, and each
// mistake is refused with the description's file and line and the node.
// DP_UPDATE_GOLDENS=1 rewrites the goldens from the renderer (review the
// git diff before committing them).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "dualpath/core/cluster.h"
#include "dualpath/core/policy.h"

namespace {

namespace fs = std::filesystem;
const std::string kExample = std::string(DP_POLICY_DIR) + "/example-cluster.toml";
const fs::path kGoldens = fs::path(DP_SOURCE_DIR) / "tests/golden/cluster";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const dp::RenderedNode* node(const dp::ClusterRender& r, const std::string& name) {
  for (auto& n : r.nodes)
    if (n.name == name) return &n;
  return nullptr;
}

dp::Policy policy_of(const dp::RenderedNode& n) {
  auto load = dp::parse_policy(n.text, n.name + ".toml");
  EXPECT_TRUE(load.ok()) << (load.errors.empty() ? "" : load.errors.front().str());
  return load.ok() ? *load.policy : dp::Policy{};
}

// A small description, with `extra` appended (its nodes, or a mistake).
std::string small(const std::string& extra, const std::string& topology = "separate") {
  return "[cluster]\nname = \"c1\"\ntopology = \"" + topology +
         "\"\n"
         "[[path]]\nname = \"roce\"\ninterface = \"eth2\"\nnetwork = \"10.128.0.0/16\"\n"
         "gateway = \"10.128.0.1\"\ncapacity = \"100Gbit\"\ntable = 110\nfwmark = 0x110\n"
         "[[path]]\nname = \"eth\"\ninterface = \"eth0\"\nnetwork = \"10.20.0.0/16\"\n"
         "gateway = \"10.20.0.1\"\ncapacity = \"25Gbit\"\ntable = 111\nfwmark = 0x111\n"
         "[[class]]\nname = \"bulk\"\nkind = \"elastic\"\nprefer = \"roce\"\n"
         "ports = [\"tcp:52000-52999\"]\n" +
         extra;
}

// Every error's text, one per line; nothing may be rendered beside them.
std::string only_error(const dp::ClusterRender& r) {
  EXPECT_FALSE(r.errors.empty());
  EXPECT_TRUE(r.nodes.empty()) << "nothing is rendered when a node has an error";
  std::string all;
  for (auto& e : r.errors) all += e.str() + "\n";
  return all;
}

TEST(Cluster, TheWorkedFleetRendersItsGoldens) {
  auto r = dp::load_cluster_file(kExample);
  ASSERT_TRUE(r.ok()) << r.errors.front().str();
  EXPECT_EQ(r.cluster, "moe-west");
  EXPECT_EQ(r.groups, (std::vector<std::string>{"prefill", "decode"}));
  ASSERT_EQ(r.nodes.size(), 7u);
  bool update = std::getenv("DP_UPDATE_GOLDENS") != nullptr;
  std::set<std::string> names, files;
  for (auto& n : r.nodes) {
    names.insert(n.name + ".toml");
    fs::path golden = kGoldens / (n.name + ".toml");
    if (update) {
      fs::create_directories(kGoldens);
      std::ofstream(golden, std::ios::binary) << n.text;
    }
    EXPECT_EQ(n.text, slurp(golden)) << n.name << ": the rendering differs from " << golden;
  }
  for (auto& e : fs::directory_iterator(kGoldens)) files.insert(e.path().filename().string());
  EXPECT_EQ(files, names) << "a golden for each node, and none for a node the fleet lacks";
}

TEST(Cluster, RenderingIsReproducibleAndEachPolicyIsValid) {
  auto text = slurp(kExample);
  auto a = dp::render_cluster(text, kExample), b = dp::render_cluster(text, kExample);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    EXPECT_EQ(a.nodes[i].text, b.nodes[i].text);
    auto p = policy_of(a.nodes[i]);
    EXPECT_EQ(p.node, a.nodes[i].name);
    EXPECT_EQ(p.hash, a.nodes[i].hash) << "the hash dualpathd will report";
    EXPECT_EQ(p.cluster, "moe-west");
    EXPECT_EQ(p.group, a.nodes[i].group);
    EXPECT_EQ(p.group_hash, a.nodes[i].group_hash);
  }
}

TEST(Cluster, GroupsAndNodesOverrideTheSharedSettings) {
  auto r = dp::load_cluster_file(kExample);
  ASSERT_TRUE(r.ok());
  auto prefill = policy_of(*node(r, "prefill-001"));
  auto decode = policy_of(*node(r, "decode-001"));
  auto decode3 = policy_of(*node(r, "decode-003"));
  auto decode4 = policy_of(*node(r, "decode-004"));
  // addresses: the network plus the host number, on both rails
  EXPECT_EQ(prefill.path("roce")->source->str(), "10.128.0.11");
  EXPECT_EQ(prefill.path("eth")->source->str(), "10.20.0.11");
  EXPECT_EQ(prefill.path("roce")->routes.front().str(), "10.128.0.0/16");
  EXPECT_EQ(prefill.metrics.listen, "10.20.0.11:9464") << "{source.eth} in [metrics] listen";
  // the group's overrides: a key of a path, a scheduler key, a class of its own
  EXPECT_EQ(prefill.path("roce")->capacity_bps, 400000000000ull);
  EXPECT_EQ(decode.path("roce")->capacity_bps, 200000000000ull);
  EXPECT_DOUBLE_EQ(prefill.scheduler.load_threshold, 0.50);
  EXPECT_DOUBLE_EQ(decode.scheduler.load_threshold, 0.60);
  EXPECT_NE(prefill.klass("kv-transfer"), nullptr);
  EXPECT_EQ(decode.klass("kv-transfer"), nullptr);
  EXPECT_TRUE(decode.klass("expert-dispatch")->pinned);
  EXPECT_FALSE(prefill.klass("expert-dispatch")->pinned);
  // a node's own override, and addresses written out
  EXPECT_EQ(decode3.path("eth")->interface, "eth1");
  EXPECT_EQ(decode.path("eth")->interface, "eth0");
  EXPECT_EQ(decode4.path("roce")->source->str(), "10.128.1.4");
  EXPECT_EQ(decode.peers.size(), 1u) << "decode-004, numbered apart, is in the others' peer table";
  EXPECT_TRUE(decode4.peers.empty());
  // the group hash is the group's settings: the same on every node of a group
  // (a node's own override is not in it), different between groups
  EXPECT_EQ(node(r, "decode-001")->group_hash, node(r, "decode-003")->group_hash);
  EXPECT_EQ(node(r, "decode-001")->group_hash, node(r, "decode-004")->group_hash);
  EXPECT_EQ(node(r, "prefill-001")->group_hash, node(r, "prefill-002")->group_hash);
  EXPECT_NE(node(r, "prefill-001")->group_hash, node(r, "decode-001")->group_hash);
  EXPECT_NE(node(r, "decode-001")->hash, node(r, "decode-002")->hash);
}

TEST(Cluster, OneNodeOrARefusalWithTheNearestName) {
  auto one = dp::load_cluster_file(kExample, std::string("decode-002"));
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one.nodes.size(), 1u);
  EXPECT_EQ(one.nodes.front().name, "decode-002");
  auto none = dp::load_cluster_file(kExample, std::string("decode-02"));
  EXPECT_NE(only_error(none).find("node decode-02 is not in the description; did you mean "
                                  "\"decode-002\"?"),
            std::string::npos)
      << only_error(none);
}

TEST(Cluster, QosIsASharedSectionAGroupMayOverride) {
  auto r = dp::render_cluster(small("[qos]\nack_skb_priority = 7\n"
                                    "[[group]]\nname = \"g\"\n[group.qos]\nack_dscp = \"CS6\"\n"
                                    "[[node]]\nname = \"n1\"\nhost = 11\n"
                                    "[[node]]\nname = \"n2\"\nhost = 12\ngroup = \"g\"\n"),
                              "c.toml");
  ASSERT_TRUE(r.ok()) << r.errors.front().str();
  auto n1 = policy_of(*node(r, "n1")), n2 = policy_of(*node(r, "n2"));
  EXPECT_EQ(n1.qos.ack_skb_priority, 7u);
  EXPECT_FALSE(n1.qos.ack_dscp.has_value());
  EXPECT_EQ(n2.qos.ack_skb_priority, 7u) << "the group's [qos] adds to the shared one";
  EXPECT_EQ(n2.qos.ack_dscp, 48);
}

TEST(Cluster, IPv6NetworksAndHostNumbers) {
  auto text = small("[[node]]\nname = \"n1\"\nhost = 300\n");
  text.replace(
      text.find("network = \"10.20.0.0/16\""), 24,
      "network = \"10.20.0.0/16\"\nnetwork6 = \"fd00:20::/64\"\ngateway6 = \"fd00:20::1\"");
  auto r = dp::render_cluster(text, "c.toml");
  ASSERT_TRUE(r.ok()) << r.errors.front().str();
  auto p = policy_of(r.nodes.front());
  EXPECT_EQ(p.path("roce")->source->str(), "10.128.1.44");  // 300 = 1 * 256 + 44
  EXPECT_EQ(p.path("eth")->source6->str(), "fd00:20::12c");
  EXPECT_EQ(p.path("eth")->routes.size(), 2u);
}

TEST(Cluster, MistakesNameTheLineAndTheNode) {
  struct Case {
    std::string extra, want;
  };
  std::vector<Case> cases = {
      {"[[node]]\nname = \"n1\"\ngroup = \"gpu\"\nhost = 1\n[[group]]\nname = \"gpus\"\n",
       ":27:9: error: node n1: no group \"gpu\" in the description; did you mean \"gpus\"?"},
      {"[[node]]\nname = \"n1\"\nhost = 70000\n",
       ":27:8: error: node n1: host 70000 does not fit path \"roce\"'s network 10.128.0.0/16"},
      {"[[node]]\nname = \"n1\"\naddresses = { roce = \"10.129.0.5\", eth = \"10.20.0.5\" }\n",
       "error: node n1: 10.129.0.5 is not in path \"roce\"'s network 10.128.0.0/16"},
      {"[[node]]\nname = \"n1\"\nhost = 1\n[[node.path]]\nname = \"rocee\"\ncapacity = \"1Gbit\"\n",
       "error: node n1: node \"n1\" overrides path \"rocee\", which the description does not "
       "have; did you mean \"roce\"?"},
      {"[[node]]\nname = \"n1\"\nhost = 1\n[[node.class]]\nname = \"bulk\"\nprefer = \"rocee\"\n",
       ":30:10: error: node n1: class \"bulk\" prefers path \"rocee\""},
      {"[metrics]\nlisten = \"{source.et}:9464\"\n[[node]]\nname = \"n1\"\nhost = 1\n",
       ":26:10: error: node n1: \"{source.et}:9464\": unknown placeholder {source.et}; did you "
       "mean {source.eth}?"},
      {"[node]\nname = \"n1\"\n",
       ":25:1: error: [node] is a policy section: in a cluster description the nodes are "
       "[[node]] entries"},
      {"[[node]]\nname = \"n1\"\nhost = 1\n[[node]]\nname = \"n1\"\nhost = 2\n",
       ":29:8: error: duplicate node \"n1\""},
      {"[[node]]\nname = \"n1\"\nhost = 1\nhots = 2\n",
       ":28:8: error: node n1: unknown key \"hots\" in node \"n1\""},
  };
  for (auto& c : cases) {
    auto r = dp::render_cluster(small(c.extra), "c.toml");
    auto e = only_error(r);
    EXPECT_NE(e.find(c.want), std::string::npos) << "got: " << e << "\nwant: " << c.want;
    EXPECT_EQ(e.rfind("c.toml:", 0), 0u) << e;
    EXPECT_EQ(e.find(c.want), e.rfind(c.want)) << "reported once: " << e;
  }
  // a path's source is a node's own
  auto src = small("[[node]]\nname = \"n1\"\nhost = 1\n");
  src.insert(src.find("capacity = \"100Gbit\""), "source = \"10.128.0.9\"\n");
  EXPECT_NE(only_error(dp::render_cluster(src, "c.toml")).find("\"source\" is a node's own"),
            std::string::npos);
}

// Nodes numbered differently on each rail (written-out addresses) are in
// every other node's peer table, which placement uses instead of the host
// part.
TEST(Cluster, WrittenAddressesBecomeTheOtherNodesPeerTable) {
  auto r = dp::render_cluster(
      small(
          "[[node]]\nname = \"n1\"\nhost = 1\n"
          "[[node]]\nname = \"n2\"\naddresses = { roce = \"10.128.5.5\", eth = \"10.20.9.9\" }\n"
          "[[node]]\nname = \"n3\"\naddresses = { roce = \"10.128.7.1\", eth = \"10.20.3.2\" }\n"),
      "c.toml");
  ASSERT_TRUE(r.ok()) << r.errors.front().str();
  auto n1 = policy_of(*node(r, "n1")), n2 = policy_of(*node(r, "n2"));
  ASSERT_EQ(n1.peers.size(), 2u);
  EXPECT_EQ(n1.peers[0].name, "n2");
  EXPECT_EQ(n1.peers[0].addr4[1]->str(), "10.20.9.9");
  size_t on = 9;
  auto* pe = n1.peer_of(*dp::IpAddr::parse("10.128.7.1"), &on);
  ASSERT_NE(pe, nullptr);
  EXPECT_EQ(pe->name, "n3");
  EXPECT_EQ(on, 0u);
  ASSERT_EQ(n2.peers.size(), 1u) << "a node is not its own peer";
  EXPECT_EQ(n2.peers[0].name, "n3");
  EXPECT_EQ(n2.path("eth")->source->str(), "10.20.9.9");
}

TEST(Cluster, AnErrorSharedByManyNodesIsReportedOnce) {
  auto r = dp::render_cluster(small("[scheduler]\nload_treshold = 0.5\n"
                                    "[[node]]\nname = \"n1\"\nhost = 1\n"
                                    "[[node]]\nname = \"n2\"\nhost = 2\n"
                                    "[[node]]\nname = \"n3\"\nhost = 3\n"
                                    "[[node]]\nname = \"n4\"\nhost = 4\n"),
                              "c.toml");
  auto e = only_error(r);
  EXPECT_NE(e.find("c.toml:26:1: error: nodes n1, n2, n3 and 1 more: unknown key "
                   "\"load_treshold\" in [scheduler]; did you mean \"load_threshold\"?"),
            std::string::npos)
      << e;
}

TEST(Cluster, APolicyIsNotADescription) {
  EXPECT_TRUE(dp::is_cluster_description(slurp(kExample)));
  EXPECT_FALSE(dp::is_cluster_description(slurp(std::string(DP_POLICY_DIR) + "/lab-a.toml")));
  EXPECT_FALSE(dp::is_cluster_description("this is = not [toml"));
  auto r = dp::render_cluster(small(""), "c.toml");
  EXPECT_NE(only_error(r).find("the description has no [[node]] entries"), std::string::npos);
}

}  // namespace
