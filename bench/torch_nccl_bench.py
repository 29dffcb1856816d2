#!/usr/bin/env python3
"""The reference for bench/nccl_collectives_bench.cc: the same collectives and
sizes through torch.distributed (NCCL backend), one process per GPU, each call
followed by torch.cuda.synchronize() as ours returns after the GPU finished.
Prints the same lines: "op bytes ms busbw_GBps".
"""
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WARMUP, TIMED = 3, 20
SIZES_MIB = [1, 4, 16, 64, 256]


def time_calls(call):
    for _ in range(WARMUP):
        call()
        torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(TIMED):
        call()
        torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / TIMED


def rank_main(rank, size, port):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group('nccl', rank=rank, world_size=size,
                            device_id=torch.device('cuda', rank))
    lines = []
    n = float(size)
    for mib in SIZES_MIB:
        count = mib * (1 << 20) // 4
        whole = torch.zeros(count, device='cuda')
        part = torch.zeros(count // size, device='cuda')
        nbytes = count * 4
        for op, call, factor in [
            ('all-reduce', lambda: dist.all_reduce(whole), 2 * (n - 1) / n),
            ('all-gather', lambda: dist.all_gather_into_tensor(whole, part),
             (n - 1) / n),
            ('reduce-scatter',
             lambda: dist.reduce_scatter_tensor(part, whole), (n - 1) / n),
        ]:
            ms = time_calls(call)
            lines.append(f'{op} {nbytes} {ms:.3f} '
                         f'{nbytes / (ms * 1e-3) * factor / 1e9:.1f}')
    if rank == 0:
        print('\n'.join(lines), flush=True)
    dist.destroy_process_group()


if __name__ == '__main__':
    size = torch.cuda.device_count()
    mp.spawn(rank_main, args=(size, 29517), nprocs=size)
