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
#include "dualpath/core/cluster_stages.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/policy_toml.h"

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
  // a description whose TOML has a mistake is still one: its reader names the mistake
  const std::string twice = "[cluster]\nname = \"c1\"\n[scheduler]\n[scheduler]\n";
  EXPECT_TRUE(dp::is_cluster_description(twice));
  auto broken = dp::render_cluster(twice, "c.toml", std::nullopt);
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.errors.front().line, 4) << broken.errors.front().str();
  EXPECT_NE(broken.errors.front().str().find("scheduler"), std::string::npos)
      << broken.errors.front().str();
  EXPECT_FALSE(dp::is_cluster_description("[clusters]\nx = [\n"));
  auto r = dp::render_cluster(small(""), "c.toml");
  EXPECT_NE(only_error(r).find("the description has no [[node]] entries"), std::string::npos);
}

// --- render --node is as safe as --all; hostnames ---

TEST(Cluster, OneNodeIsRefusedForAnErrorAnywhereInTheDescription) {
  // a misspelt key in another group's section: policy check and --all refuse it
  auto text = small(
      "[[group]]\nname = \"a\"\n[[group]]\nname = \"b\"\n[group.scheduler]\nload_treshold = 0.5\n"
      "[[node]]\nname = \"n1\"\nhost = 1\ngroup = \"a\"\n"
      "[[node]]\nname = \"n2\"\nhost = 2\ngroup = \"b\"\n");
  auto all = dp::render_cluster(text, "c.toml");
  auto one = dp::render_cluster(text, "c.toml", std::string("n1"));
  auto e = only_error(one);
  EXPECT_NE(e.find("c.toml:30:17: error: node n2: unknown key \"load_treshold\" in [scheduler]"),
            std::string::npos)
      << e;
  EXPECT_EQ(e, only_error(all)) << "the same errors as every node's rendering";
}

TEST(Cluster, AnInvalidNodeIsReportedWithItsValueNotAsMissing) {
  auto text = small(
      "[[node]]\nname = \"n1\"\nhost = 1\n"
      "[[node]]\nname = \"ip-10-0-1-23.ec2.internal\"\nhost = 2\n");
  for (auto& only : {std::optional<std::string>{}, std::optional<std::string>{"n1"},
                     std::optional<std::string>{"ip-10-0-1-23.ec2.internal"}}) {
    auto e = only_error(dp::render_cluster(text, "c.toml", only));
    EXPECT_NE(e.find("c.toml:29:8: error: node name \"ip-10-0-1-23.ec2.internal\" must be 1-31 "
                     "characters of a-z, 0-9, '-' or '_': give the node a short name, and this "
                     "one as its \"hostname\""),
              std::string::npos)
        << e;
    EXPECT_EQ(e.find("not in the description"), std::string::npos) << e;
  }
}

TEST(Cluster, HostnamesAreMatchedByRenderAndWrittenInThePolicy) {
  auto text = small(
      "[[node]]\nname = \"n1\"\nhostname = \"ip-10-128-0-1.ec2.internal\"\nhost = 1\n"
      "[[node]]\nname = \"n2\"\nhost = 2\n");
  auto all = dp::render_cluster(text, "c.toml");
  ASSERT_TRUE(all.ok()) << all.errors.front().str();
  EXPECT_EQ(all.nodes[0].hostname, "ip-10-128-0-1.ec2.internal");
  EXPECT_EQ(all.nodes[0].text.rfind("# dualpath policy of node n1 (hostname "
                                    "ip-10-128-0-1.ec2.internal, cluster \"c1\"),\n",
                                    0),
            0u)
      << all.nodes[0].text;
  EXPECT_EQ(all.nodes[1].hostname, "");
  auto by_host = dp::render_cluster(text, "c.toml", std::string("ip-10-128-0-1.ec2.internal"));
  ASSERT_TRUE(by_host.ok()) << by_host.errors.front().str();
  ASSERT_EQ(by_host.nodes.size(), 1u);
  EXPECT_EQ(by_host.nodes[0].text, all.nodes[0].text);
  auto near =
      only_error(dp::render_cluster(text, "c.toml", std::string("ip-10-128-0-2.ec2.internal")));
  EXPECT_NE(near.find("is not in the description; did you mean \"ip-10-128-0-1.ec2.internal\"?"),
            std::string::npos)
      << near;
  // 253 characters at most, labels of 63, no capitals, not twice
  std::string label(63, 'a'), longest = label + "." + label + "." + label + "." + label;
  longest.resize(253);
  EXPECT_TRUE(
      dp::render_cluster(
          small("[[node]]\nname = \"n1\"\nhost = 1\nhostname = \"" + longest + "\"\n"), "c.toml")
          .ok());
  struct Case {
    std::string hostname, want;
  };
  for (auto& c : std::vector<Case>{
           {longest + "a", ":28:12: error: node n1: hostname \"" + longest + "a\" must be"},
           {"IP-10.example", "hostname \"IP-10.example\" must be a host's name as DNS has it"},
           {label + "a.example", "must be a host's name"},
           {"n2", ":30:8: error: node name \"n2\" is node n1's hostname"}}) {
    auto e = only_error(
        dp::render_cluster(small("[[node]]\nname = \"n1\"\nhost = 1\nhostname = \"" + c.hostname +
                                 "\"\n[[node]]\nname = \"n2\"\n"
                                 "host = 2\n"),
                           "c.toml"));
    EXPECT_NE(e.find(c.want), std::string::npos) << "got: " << e << "\nwant: " << c.want;
  }
}

TEST(Cluster, EachNodeAloneRendersAsInTheFleet) {
  auto text = slurp(kExample);
  auto all = dp::render_cluster(text, kExample);
  ASSERT_TRUE(all.ok());
  for (auto it = all.nodes.rbegin(); it != all.nodes.rend(); ++it) {
    auto one = dp::render_cluster(text, kExample, it->name);
    ASSERT_TRUE(one.ok());
    ASSERT_EQ(one.nodes.size(), 1u);
    EXPECT_EQ(one.nodes[0].text, it->text) << it->name;
    EXPECT_EQ(one.nodes[0].group_hash, it->group_hash) << it->name;
  }
}

// --- the stages (dualpath/core/cluster_stages.h) ---

struct Parsed {
  toml::table root;
  dp::cluster::Diags d{"c.toml", {}, {}};
  explicit Parsed(const std::string& text) {
    std::vector<dp::Diagnostic> errors;
    auto r = dp::cluster::parse_description(text, "c.toml", errors);
    EXPECT_TRUE(r.has_value()) << (errors.empty() ? "" : errors.front().str());
    if (r) root = std::move(*r);
  }
  std::string errors() const {
    std::string all;
    for (auto& e : d.list) all += e.str() + "\n";
    return all;
  }
};

TEST(ClusterStages, ParseAndShape) {
  std::vector<dp::Diagnostic> errors;
  EXPECT_FALSE(dp::cluster::parse_description("[cluster]\nname = \n", "c.toml", errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].line, 2);
  Parsed p(small(""));
  auto s = dp::cluster::check_shape(p.d, p.root);
  EXPECT_TRUE(p.d.list.empty()) << p.errors();
  EXPECT_TRUE(s.has_cluster);
  EXPECT_EQ(s.cluster, "c1");
  EXPECT_EQ(s.topology, dp::Topology::Separate);
  EXPECT_EQ(s.path_names(), (std::vector<std::string>{"roce", "eth"}));
  EXPECT_EQ(s.path("eth")->net4->str(), "10.20.0.0/16");
  EXPECT_FALSE(s.path("eth")->net6);
  EXPECT_EQ(s.path("nosuch"), nullptr);
  Parsed bad(
      "[cluster]\nname = \"C\"\n[[path]]\nname = \"r\"\nnetwork = \"10.0.0.1/24\"\n"
      "[scheduler]\nmode = \"adaptive\"\n[sheduler]\n");
  auto s2 = dp::cluster::check_shape(bad.d, bad.root);
  EXPECT_EQ(s2.cluster, "");
  EXPECT_FALSE(s2.path("r")->net4) << "host bits set";
  auto e = bad.errors();
  EXPECT_NE(e.find("c.toml:2:8: error: cluster name \"C\""), std::string::npos) << e;
  EXPECT_NE(e.find("c.toml:5:11: error: network of path \"r\" must be an IPv4 network"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("unknown key \"sheduler\" in the top level of a cluster description; did you "
                   "mean \"scheduler\"?"),
            std::string::npos)
      << e;
}

TEST(ClusterStages, ResolveGroupsAndReadNodes) {
  Parsed p(
      small("[[group]]\nname = \"a\"\n[[group]]\nname = \"b\"\nschedular = 1\n"
            "[[node]]\nname = \"n1\"\ngroup = \"a\"\nhost = 7\n"
            "[[node]]\nname = \"n2\"\nhostname = \"n2.example\"\naddresses = {}\n"
            "[[node]]\nname = \"N3\"\n"));
  auto s = dp::cluster::check_shape(p.d, p.root);
  auto groups = dp::cluster::resolve_groups(p.d, p.root, s);
  EXPECT_EQ(groups, (std::vector<std::string>{"a", "b"}));
  auto nodes = dp::cluster::read_nodes(p.d, p.root, s, groups);
  ASSERT_EQ(nodes.size(), 3u) << "an entry with an invalid name too";
  EXPECT_EQ(nodes[0].group, "a");
  EXPECT_EQ(nodes[0].host, 7);
  EXPECT_FALSE(nodes[0].broken);
  EXPECT_EQ(nodes[1].hostname, "n2.example");
  EXPECT_FALSE(nodes[1].host);
  EXPECT_TRUE(nodes[2].broken);
  EXPECT_EQ(nodes[2].name, "");
  EXPECT_EQ(dp::cluster::find_node(nodes, "n2.example"), &nodes[1]);
  EXPECT_EQ(dp::cluster::find_node(nodes, "n1"), &nodes[0]);
  EXPECT_EQ(dp::cluster::find_node(nodes, "N3"), nullptr);
  auto e = p.errors();
  EXPECT_NE(e.find("c.toml:29:13: error: unknown key \"schedular\" in group \"b\"; did you mean "
                   "\"scheduler\"?"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("c.toml:39:8: error: node name \"N3\" must be"), std::string::npos) << e;
  EXPECT_TRUE(dp::cluster::valid_hostname("ip-10-0-1-23.ec2.internal"));
  EXPECT_TRUE(dp::cluster::valid_hostname("a"));
  for (auto* bad : {"", "a..b", ".a", "a.", "-a.b", "a-.b", "a_b.c", "A.b"})
    EXPECT_FALSE(dp::cluster::valid_hostname(bad)) << bad;
}

TEST(ClusterStages, AddressNodes) {
  auto net = *dp::Prefix::parse("10.128.0.0/16");
  EXPECT_EQ(dp::cluster::host_address(net, 300)->str(), "10.128.1.44");
  EXPECT_FALSE(dp::cluster::host_address(net, 65535)) << "the broadcast address";
  EXPECT_FALSE(dp::cluster::host_address(net, 0));
  EXPECT_EQ(dp::cluster::host_address(*dp::Prefix::parse("fd00::/64"), 65536)->str(), "fd00::1:0");
  EXPECT_EQ(dp::cluster::host_part(net, *dp::IpAddr::parse("10.128.1.44")), 300u);
  Parsed p(
      small("[[node]]\nname = \"n1\"\nhost = 5\naddresses = { eth = \"10.20.9.9\" }\n"
            "[[node]]\nname = \"n2\"\naddresses = { roce = [\"10.129.0.1\", \"fd00::1\"], "
            "et = \"10.20.0.1\" }\n"));
  auto s = dp::cluster::check_shape(p.d, p.root);
  auto nodes = dp::cluster::read_nodes(p.d, p.root, s, {});
  auto w1 = dp::cluster::written_addresses(p.d, nodes[0], s);
  auto a1 = dp::cluster::address_node(p.d, nodes[0], w1, s);
  ASSERT_EQ(a1.size(), 2u);
  EXPECT_EQ(a1[0].path, "roce");
  EXPECT_EQ(a1[0].v4->str(), "10.128.0.5") << "from the host number";
  EXPECT_EQ(a1[1].v4->str(), "10.20.9.9") << "written out";
  EXPECT_TRUE(p.d.list.empty()) << p.errors();
  auto w2 = dp::cluster::written_addresses(p.d, nodes[1], s);
  auto a2 = dp::cluster::address_node(p.d, nodes[1], w2, s);
  EXPECT_EQ(a2[0].v6->str(), "fd00::1");
  EXPECT_FALSE(a2[1].v4) << "no host number, nothing written";
  auto e = p.errors();
  EXPECT_NE(e.find("error: node n2: addresses: no path \"et\" in the description; did you mean "
                   "\"eth\"?"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("c.toml:31:23: error: node n2: 10.129.0.1 is not in path \"roce\"'s network"),
            std::string::npos)
      << e;
}

TEST(ClusterStages, PeerTable) {
  Parsed p(
      small("[[node]]\nname = \"n1\"\nhost = 1\n"
            "[[node]]\nname = \"n2\"\naddresses = { eth = \"10.20.9.9\", roce = "
            "[\"10.128.9.9\", \"fd00::9\"] }\n"
            "[[node]]\nname = \"n3\"\naddresses = { roce = \"10.128.7.7\" }\n"));
  auto s = dp::cluster::check_shape(p.d, p.root);
  auto nodes = dp::cluster::read_nodes(p.d, p.root, s, {});
  std::vector<dp::cluster::WrittenAddresses> written;
  for (auto& n : nodes) written.push_back(dp::cluster::written_addresses(p.d, n, s));
  auto peers = dp::cluster::peer_table(nodes, written, s);
  ASSERT_EQ(peers.size(), 2u) << "nodes numbered by host are found by it, not by a table";
  EXPECT_EQ(peers[0].name, "n2");
  ASSERT_EQ(peers[0].by_path.size(), 2u);
  EXPECT_EQ(peers[0].by_path[0].first, "roce") << "in the description's path order";
  EXPECT_EQ(peers[0].by_path[0].second.size(), 2u);
  auto of_n2 = dp::cluster::peer_entries(peers, "n2");
  ASSERT_EQ(of_n2.size(), 1u) << "a node is not its own peer";
  EXPECT_EQ(dp::render_toml_value(of_n2[0]),
            "{ addresses = { roce = '10.128.7.7' }, name = 'n3' }");
  EXPECT_EQ(dp::cluster::peer_entries(peers, "n1").size(), 2u);
  // as text, made once: each node's policy ends with every peer's but its own
  auto texts = dp::cluster::peer_texts(dp::cluster::peer_entries(peers, ""));
  ASSERT_EQ(texts.size(), 2u);
  EXPECT_EQ(dp::cluster::peer_tail(texts, "n2"),
            "\n[[peer]]\nname = 'n3'\naddresses = { roce = '10.128.7.7' }\n");
  EXPECT_EQ(dp::cluster::peer_tail(texts, "n1"), texts[0].text + texts[1].text);
}

TEST(ClusterStages, Placeholders) {
  dp::cluster::NodeEntry n;
  n.name = "n1";
  n.host = 7;
  auto vars = dp::cluster::node_vars(n, "c1", {{"eth", dp::IpAddr::parse("10.20.0.7"), {}}});
  EXPECT_EQ(vars.at("source.eth"), "10.20.0.7");
  EXPECT_EQ(vars.at("host"), "7");
  std::string problem;
  EXPECT_EQ(dp::cluster::substitute("{{{node}}}-{cluster}:{host}", vars, problem), "{n1}-c1:7");
  EXPECT_FALSE(dp::cluster::substitute("{source.et}", vars, problem));
  EXPECT_NE(problem.find("unknown placeholder {source.et}; did you mean {source.eth}?"),
            std::string::npos)
      << problem;
  EXPECT_FALSE(dp::cluster::substitute("{source6.eth}", vars, problem));
  EXPECT_EQ(problem, "placeholder {source6.eth} has no value for this node");
  EXPECT_FALSE(dp::cluster::substitute("{group}", vars, problem)) << "in no group";
  EXPECT_FALSE(dp::cluster::substitute("a{b", vars, problem));
  EXPECT_NE(problem.find("unclosed"), std::string::npos);
}

// A node's policy is assembled by moving values out of the one parse, and
// they go back: the next node finds the description as it was, each value
// with its line.
TEST(ClusterStages, AssemblyGivesTheDescriptionBack) {
  Parsed p(
      small("[metrics]\nlisten = \"{source.eth}:9464\"\n"
            "[[group]]\nname = \"g\"\n[group.metrics]\nlisten = \"{source.roce}:1\"\n"
            "[[group.path]]\nname = \"roce\"\ncapacity = \"1Gbit\"\n"
            "[[group.class]]\nname = \"new\"\nkind = \"elastic\"\nprefer = \"eth\"\n"
            "[[node]]\nname = \"n1\"\nhost = 3\ngroup = \"g\"\n[[node.class]]\n"
            "name = \"bulk\"\nprefer = \"eth\"\n"));
  std::ostringstream before;
  before << p.root;
  auto line_of = [&](const char* path) { return p.root.at_path(path).node()->source().begin.line; };
  auto listen_line = line_of("metrics.listen"), prefer_line = line_of("class[0].prefer");
  auto s = dp::cluster::check_shape(p.d, p.root);
  auto groups = dp::cluster::resolve_groups(p.d, p.root, s);
  auto nodes = dp::cluster::read_nodes(p.d, p.root, s, groups);
  ASSERT_TRUE(p.d.list.empty()) << p.errors();
  std::string text;
  {
    dp::cluster::Assembly a;
    dp::cluster::assemble_shared(a, p.root, s, nodes[0]);
    dp::cluster::apply_overrides(a, *nodes[0].table);
    auto addrs = dp::cluster::address_node(p.d, nodes[0], {}, s);
    dp::cluster::write_addresses(a, addrs, s);
    dp::cluster::substitute_all(a, dp::cluster::node_vars(nodes[0], "c1", addrs), p.d, "n1");
    ASSERT_TRUE(p.d.list.empty()) << p.errors();
    text = dp::cluster::emit_policy(a.policy, "");
    EXPECT_EQ(a.policy.at_path("class[0].prefer").node()->source().begin.line, 44u)
        << "the node's override keeps its line";
  }
  EXPECT_NE(text.find("[metrics]\nlisten = '10.128.0.3:1'\n"), std::string::npos) << text;
  EXPECT_NE(text.find("name = 'roce'\ncapacity = '1Gbit'\nfwmark = 0x110\ngateway = "
                      "'10.128.0.1'\ninterface = 'eth2'\nroutes = ['10.128.0.0/16']\nsource = "
                      "'10.128.0.3'\ntable = 110\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("name = 'new'"), std::string::npos) << text;
  std::ostringstream after;
  after << p.root;
  EXPECT_EQ(after.str(), before.str());
  EXPECT_EQ(line_of("metrics.listen"), listen_line);
  EXPECT_EQ(line_of("class[0].prefer"), prefer_line);
  EXPECT_EQ(line_of("group[0].class[0].kind"), 36u);
}

TEST(ClusterStages, CheckAndWriteANode) {
  Parsed p(
      small("[scheduler]\nmode = \"adaptiv\"\n[[node]]\nname = \"n1\"\nhost = 3\n"
            "hostname = \"n1.example\"\n"));
  auto s = dp::cluster::check_shape(p.d, p.root);
  auto nodes = dp::cluster::read_nodes(p.d, p.root, s, {});
  {
    dp::cluster::Assembly a;
    dp::cluster::assemble_shared(a, p.root, s, nodes[0]);
    dp::cluster::check_node_policy(p.d, a.policy, nodes[0]);
  }
  auto e = p.errors();
  EXPECT_NE(e.find("c.toml:26:8: error: node n1: "), std::string::npos) << e;
  EXPECT_NE(e.find("adaptiv"), std::string::npos) << e;
  p.d.list.clear();
  p.root.get_as<toml::table>("scheduler")->insert_or_assign("mode", "adaptive");
  dp::cluster::Assembly b;
  dp::cluster::assemble_shared(b, p.root, s, nodes[0]);
  dp::cluster::write_addresses(b, dp::cluster::address_node(p.d, nodes[0], {}, s), s);
  dp::cluster::check_node_policy(p.d, b.policy, nodes[0]);
  EXPECT_TRUE(p.d.list.empty()) << p.errors();
  auto r = dp::cluster::write_node(p.d, b.policy, nodes[0], {"c1", "0123456789abcdef", "", false});
  ASSERT_TRUE(r) << p.errors();
  EXPECT_EQ(r->hostname, "n1.example");
  EXPECT_EQ(r->hash, dp::content_hash(r->text));
  EXPECT_EQ(r->text.rfind("# dualpath policy of node n1 (hostname n1.example, cluster \"c1\"),\n"
                          "# rendered by dpctl policy render from c.toml.\n",
                          0),
            0u)
      << r->text;
}

TEST(ClusterStages, GroupErrors) {
  std::vector<dp::Diagnostic> list = {{"c.toml", 9, 1, "node a: x"}, {"c.toml", 3, 2, "y"},
                                      {"c.toml", 9, 1, "node b: x"}, {"c.toml", 9, 1, "node c: x"},
                                      {"c.toml", 9, 1, "node d: x"}, {"c.toml", 3, 2, "y"},
                                      {"c.toml", 5, 1, "node a: z"}};
  auto out = dp::cluster::group_errors(list, {"a", "", "b", "c", "d", "", "a"});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].str(), "c.toml:3:2: error: y") << "in line order, once";
  EXPECT_EQ(out[1].str(), "c.toml:5:1: error: node a: z");
  EXPECT_EQ(out[2].str(), "c.toml:9:1: error: nodes a, b, c and 1 more: x");
}

}  // namespace

namespace {

// Values of the wrong shape where the render walks entries: refused with
// their lines, never followed.
TEST(Cluster, EntriesOfTheWrongShapeAreRefused) {
  for (auto* text : {"class = [1, 2]\n[cluster]\nname = \"c\"\n[[node]]\nname = \"n\"\n",
                     "path = [3]\n[cluster]\nname = \"c\"\n[[node]]\nname = \"n\"\nhost = 1\n",
                     "[cluster]\nname = \"c\"\n[[group]]\nname = \"g\"\npath = [1]\nclass = \"x\"\n"
                     "[[node]]\nname = \"n\"\ngroup = \"g\"\n"}) {
    auto r = dp::render_cluster(text, "c.toml");
    auto e = only_error(r);
    EXPECT_EQ(e.rfind("c.toml:", 0), 0u) << e;
  }
}

}  // namespace
