# SPDX-License-Identifier: Apache-2.0
"""One rank of a two-rank PyTorch job whose NCCL traffic goes through
dualpath's net plugin (torch_nccl.sh starts both). all_to_all_single and
batched send/recv from 64 KiB to 64 MiB, every result checked; one JSON line
per size and operation on stdout (rank 0)."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def pattern(rank, size_bytes, n, device):
    # int32 words: who sent them, and where, so a misplaced byte shows
    words = size_bytes // 4
    base = torch.arange(words, dtype=torch.int32, device=device)
    return (base * 7 + rank * 1_000_003 + n) & 0x7FFFFFFF


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    assert world == 2, "two ranks"
    torch.cuda.set_device(int(os.environ.get("LOCAL_GPU", "0")))
    dev = torch.device("cuda")
    dist.init_process_group("nccl", rank=rank, world_size=world)
    peer = 1 - rank
    sizes = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
    rounds = int(os.environ.get("DP_TORCH_ROUNDS", "5"))
    ok = True
    for size in sizes:
        for op in ("all_to_all_single", "sendrecv"):
            times = []
            for n in range(rounds):
                if op == "all_to_all_single":
                    # half of the buffer to each rank
                    inp = pattern(rank, size, n, dev)
                    out = torch.empty_like(inp)
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    dist.all_to_all_single(out, inp)
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - t)
                    half = inp.numel() // 2
                    want = torch.cat([
                        pattern(0, size, n, dev)[rank * half:(rank + 1) * half],
                        pattern(1, size, n, dev)[rank * half:(rank + 1) * half]])
                    good = torch.equal(out[:2 * half], want)
                else:
                    send = pattern(rank, size, n, dev)
                    recv = torch.empty_like(send)
                    ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    for req in dist.batch_isend_irecv(ops):
                        req.wait()
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - t)
                    good = torch.equal(recv, pattern(peer, size, n, dev))
                if not good:
                    ok = False
                    print(f"rank {rank}: {op} of {size} bytes, round {n}: wrong data",
                          file=sys.stderr)
            times.sort()
            if rank == 0:
                print(json.dumps({"op": op, "bytes": size,
                                  "p50_ms": 1e3 * times[len(times) // 2],
                                  "max_ms": 1e3 * times[-1],
                                  "algbw_gbps": 8 * size / times[len(times) // 2] / 1e9}),
                      flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
