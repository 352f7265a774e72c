# SPDX-License-Identifier: Apache-2.0
# A cluster description (dualpath-cluster(5)) of NODES nodes for
# tests/bench/render-fleet.sh: the worked fleet's shared sections, rails,
# classes and groups (policies/example-cluster.toml), half prefill and half
# decode nodes numbered by host, every WRITTEN-th node with its addresses
# written out (so in every other node's peer table), and with --hostnames a
# dotted hostname on each node, as an inventory has them.
#
#   python3 cluster_fleet.py NODES [--written 10] [--hostnames] > fleet.toml
import argparse
import sys

SHARED = """[cluster]
name = "fleet"
topology = "separate"
default_class = "logs"

[scheduler]
mode = "adaptive"
load_threshold = 0.60
cooldown = "200ms"

[health]
bfd = true
interval = "300ms"
multiplier = 3
holddown = "5m"

[metrics]
listen = "{source.eth}:9464"

[[path]]
name = "roce"
interface = "eth2"
network = "10.128.0.0/16"
gateway = "10.128.0.1"
capacity = "200Gbit"
table = 110
fwmark = 0x110

[[path]]
name = "eth"
interface = "eth0"
network = "10.20.0.0/16"
gateway = "10.20.0.1"
capacity = "50Gbit"
table = 111
fwmark = 0x111

[[class]]
name = "expert-dispatch"
kind = "latency_sensitive"
priority = 6
prefer = "roce"
ports = ["tcp:50000-50999", "udp:50000-50999"]
dscp = "AF41"

[[class]]
name = "expert-combine"
kind = "elastic"
priority = 5
prefer = "roce"
ports = ["tcp:51000-51999"]

[[class]]
name = "param-sync"
kind = "elastic"
priority = 3
prefer = "eth"
ports = ["tcp:52000-52999"]

[[class]]
name = "logs"
kind = "elastic"
priority = 1
prefer = "eth"
mark = 0x54
ports = ["tcp:54000-54099", "udp:514"]

[[group]]
name = "prefill"
[group.scheduler]
load_threshold = 0.50
[[group.path]]
name = "roce"
capacity = "400Gbit"
[[group.class]]
name = "kv-transfer"
kind = "elastic"
priority = 4
prefer = "roce"
ports = ["tcp:55000-55999"]

[[group]]
name = "decode"
[[group.class]]
name = "expert-dispatch"
pinned = true
"""


def fleet(nodes: int, written: int = 10, hostnames: bool = False) -> str:
    out = [SHARED]
    for i in range(nodes):
        group = "prefill" if i % 2 == 0 else "decode"
        host = 10 + i
        lines = [f'\n[[node]]\nname = "{group}-{i:05d}"\ngroup = "{group}"']
        if hostnames:
            lines.append(f'hostname = "ip-10-20-{host >> 8}-{host & 255}.ec2.internal"')
        if written and i % written == written - 1:
            # numbered apart on the backend rail: 10.128.128.0 and up
            r = 128 * 256 + i
            lines.append(f'addresses = {{ roce = "10.128.{r >> 8}.{r & 255}", '
                         f'eth = "10.20.{host >> 8}.{host & 255}" }}')
        else:
            lines.append(f"host = {host}")
        out.append("\n".join(lines) + "\n")
    return "".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("nodes", type=int)
    ap.add_argument("--written", type=int, default=10,
                    help="every Nth node has its addresses written out (0: none)")
    ap.add_argument("--hostnames", action="store_true")
    a = ap.parse_args()
    if not 1 <= a.nodes <= 30000:
        sys.exit("NODES must be 1-30000")
    sys.stdout.write(fleet(a.nodes, a.written, a.hostnames))


if __name__ == "__main__":
    main()
