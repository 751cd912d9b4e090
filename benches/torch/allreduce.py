"""PyTorch reference for cueflow's all-reduce (examples/06_multi_gpu.rs, benches/cuda/multi.cu).

One process per GPU, as `torch.distributed` runs NCCL: `all_reduce` (sum, float32, in place)
of 1 MiB up to `--max-mib` MiB, measured the way 06_multi_gpu and multi.cu measure:

  steady   `warmup` untimed calls, then `reps` batches of `iters` calls between CUDA events
           recorded on the process's stream; a batch takes as long as its slowest rank; the
           result is the median batch time / iters (host enqueue included where it is the bound,
           as in nccl-tests). `host_us` is the median host time per call spent enqueueing.
  device   the same batch enqueued behind a gate (a host function that waits until every call
           is enqueued), so the events time the device's work alone.

Run:    NCCL_NVLS_ENABLE=0 python3 benches/torch/allreduce.py [--max-mib M] [--iters I]
Output: RESULT torch op=allreduce bytes=B us=.. gbps=.. busbw=.. host_us=.. dev_us=..
"""

import argparse
import os
import statistics
import tempfile
import threading
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def measure(body, stream, args, gate_first):
    for _ in range(args.warmup):
        body()
    torch.cuda.synchronize()
    times, host = [], []
    for _ in range(args.reps):
        release = threading.Event()
        if gate_first:
            # The gate: a host function on this stream that returns once every call is queued.
            _gate(stream, release)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(stream)
        t0 = time.perf_counter()
        for _ in range(args.iters):
            body()
        host.append((time.perf_counter() - t0) * 1e6 / args.iters)
        b.record(stream)
        release.set()
        b.synchronize()
        ms = torch.tensor([a.elapsed_time(b)], device="cuda")
        dist.all_reduce(ms, op=dist.ReduceOp.MAX)
        times.append(ms.item() * 1e3 / args.iters)
    return statistics.median(times), statistics.median(host)


def _gate(stream, release):
    # torch has no public host-function API: a spinning kernel would do, but a host function
    # through ctypes (cudaLaunchHostFunc) is what 06_multi_gpu and multi.cu use.
    import ctypes

    cudart = _cudart()
    cb_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

    def wait(_):
        release.wait()

    cb = cb_type(wait)
    _gate.keep.append(cb)  # the callback must outlive the call
    rc = cudart.cudaLaunchHostFunc(ctypes.c_void_p(stream.cuda_stream), cb, None)
    assert rc == 0, f"cudaLaunchHostFunc failed: {rc}"


_gate.keep = []


def _cudart():
    import ctypes
    import glob

    if not hasattr(_cudart, "lib"):
        names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
        found = []
        for base in {os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(torch.__file__))}:
            found += glob.glob(os.path.join(base, "**", "libcudart.so*"), recursive=True)
        for n in found + names:
            try:
                _cudart.lib = ctypes.CDLL(n)
                break
            except OSError:
                continue
        else:
            raise RuntimeError("libcudart not found")
    return _cudart.lib


def rank_main(rank, world, init_file, args):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    stream = torch.cuda.current_stream()
    size = 1 << 20
    while size <= args.max_mib << 20:
        n = size // 4
        x = torch.ones(n, dtype=torch.float32, device="cuda")
        steady, host = measure(lambda: dist.all_reduce(x), stream, args, gate_first=False)
        device, _ = measure(lambda: dist.all_reduce(x), stream, args, gate_first=True)
        x.fill_(rank + 1.0)
        dist.all_reduce(x)
        want = world * (world + 1) / 2
        assert bool((x == want).all()), f"all-reduce of {size} bytes is wrong on rank {rank}"
        if rank == 0:
            gbps = size / (steady * 1e3)
            busbw = gbps * 2 * (world - 1) / world
            print(f"RESULT torch op=allreduce bytes={size} us={steady:.2f} gbps={gbps:.2f} "
                  f"busbw={busbw:.2f} host_us={host:.2f} dev_us={device:.2f}", flush=True)
        size *= 4
    if rank == 0:
        print(f"torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}; "
              "all-reduce verified at every size", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-mib", type=int, default=1024)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    assert os.environ.get("NCCL_NVLS_ENABLE") == "0", "set NCCL_NVLS_ENABLE=0 (no NVLink multicast)"
    world = torch.cuda.device_count()
    assert world >= 2, f"needs two GPUs, found {world}"
    world = 2
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(rank_main, args=(world, os.path.join(d, "init"), args), nprocs=world)


if __name__ == "__main__":
    main()
