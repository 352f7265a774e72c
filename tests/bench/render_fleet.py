# SPDX-License-Identifier: Apache-2.0
# How `dpctl policy render --all` grows with the fleet: descriptions of 250,
# 500, 1,000 and 2,000 nodes (tests/bench/cluster_fleet.py: the worked
# fleet's sections, every 10th node with its addresses written out, so in
# every other node's peer table, and each with a dotted hostname), each
# rendered into an empty directory, then once more (nothing to write).
# Prints the wall and CPU time and the peak resident memory of each run
# (on a busy machine the wall time waits for the CPU and the disk; the CPU
# time does not). Not a test: nothing here passes or fails.
#
#   python3 tests/bench/render_fleet.py [--dpctl BUILD/tools/dpctl/dpctl] [--nodes 250,500]
#                                       [--written 10]
import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

here = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(here))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from cluster_fleet import fleet  # noqa: E402


def run(cmd: list[str]) -> tuple[float, float, int]:
    """Wall and CPU (user + system) seconds and peak RSS (KiB) of one command,
    which must succeed."""
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    elapsed = time.monotonic() - start
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.read().decode()}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def main() -> None:
    ap = argparse.ArgumentParser()
    build = os.environ.get("DP_BUILD", str(here.parent.parent / "build"))
    ap.add_argument("--dpctl", default=f"{build}/tools/dpctl/dpctl")
    ap.add_argument("--nodes", default="250,500,1000,2000")
    ap.add_argument("--written", type=int, default=10)
    a = ap.parse_args()
    print(f"dpctl policy render --all ({a.dpctl}); every {a.written}th node written out")
    print(f"{'nodes':>6} {'peers/node':>10} {'render s':>9} {'cpu s':>6} {'again s':>8} "
          f"{'cpu s':>6} {'peak MiB':>9} {'output MiB':>10}")
    with tempfile.TemporaryDirectory(prefix="dp-render-fleet-") as tmp:
        for n in (int(x) for x in a.nodes.split(",")):
            desc = pathlib.Path(tmp, f"fleet-{n}.toml")
            desc.write_text(fleet(n, a.written, hostnames=True))
            out = pathlib.Path(tmp, f"nodes-{n}")
            cmd = [a.dpctl, "policy", "render", str(desc), "--all", str(out)]
            first, cpu, rss = run(cmd)
            again, cpu2, rss2 = run(cmd)
            size = sum(f.stat().st_size for f in out.iterdir())
            peers = n // a.written if a.written else 0
            print(f"{n:>6} {peers:>10} {first:>9.2f} {cpu:>6.2f} {again:>8.2f} {cpu2:>6.2f} "
                  f"{max(rss, rss2) / 1024:>9.1f} {size / 2**20:>10.1f}", flush=True)


if __name__ == "__main__":
    main()
