# SPDX-License-Identifier: Apache-2.0
# One rank of a torch.distributed gloo job for tests/bench/gloo-failover.sh:
# a TCP-store rendezvous, then all_to_all_single of MIB MiB per rank until
# SECONDS have passed (both ranks agree on when to stop). Prints the number
# of iterations and the longest time between the end of one and the next.
#
#   python3 gloo_job.py RANK MASTER_ADDR SECONDS [MIB]
import datetime
import sys
import time

import torch
import torch.distributed as dist

rank, master, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
mib = float(sys.argv[4]) if len(sys.argv) > 4 else 4
dist.init_process_group("gloo", init_method=f"tcp://{master}:29500", rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=60))
n = int(mib * 1024 * 1024 / 4)
x = torch.full((n,), float(rank + 1))
out = torch.empty(n)
iterations, longest = 0, 0.0
end = time.time() + seconds
last = time.time()
while True:
    go = torch.tensor([1.0 if time.time() < end else 0.0])
    dist.all_reduce(go, op=dist.ReduceOp.MIN)  # both ranks stop at the same iteration
    if go.item() == 0:
        break
    dist.all_to_all_single(out, x)
    if out[0].item() != 1.0 or out[-1].item() != 2.0:
        sys.exit(f"rank {rank}: all_to_all returned wrong data")
    iterations += 1
    now = time.time()
    longest, last = max(longest, now - last), now
print(f"rank {rank} iterations {iterations} longest_ms {longest * 1000:.0f}", flush=True)
dist.destroy_process_group()
