"""A real PyTorch data-parallel training loop fed by `datahelix serve`.

Each rank is its own process (torch.distributed, gloo on CPU): it attaches to
the node's agent, takes its batch of each step as tensors viewing the agent's
shared memory, trains a small video model on it, reports its measured step
time back (the agent's deadlines follow it) and meets the other ranks in the
gradient all-reduce, as in any synchronous job.

    datahelix gen --workload kinetics-clips --out data/k --samples 128
    datahelix serve --manifest data/k/manifest.jsonl --workload kinetics-clips \
        --ranks 2 --workers 2 --batch 8 --epochs 2 &
    /usr/bin/python3 examples/train_ddp.py --ranks 2 --emulate

--emulate sleeps each batch's modelled accelerator time (sent by the agent)
after the real forward/backward, so that a CPU-only machine shows what input
waiting costs a GPU job. Ranks are started here with torch.multiprocessing;
under torchrun, run it with --torchrun and the launcher's environment.
Rank 0 prints one JSON line: throughput, per-rank input wait percentiles, and
the share of step time spent waiting for input.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.environ.get("DH_PYTHONPATH", ""))
import datahelix  # noqa: E402


class TinyVideoNet(nn.Module):
    """Conv3d stem, global pooling, linear head: small enough for 2 CPU cores."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 8, (1, 7, 7), stride=(1, 4, 4)), nn.ReLU(),
                                  nn.Conv3d(8, 16, 3, stride=2), nn.ReLU(),
                                  nn.AdaptiveAvgPool3d(1))
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(self.stem(x).flatten(1))


def clips(batch):
    """The batch's visual items as one float tensor (N, 3, T, H, W): the only copy is this
    conversion to the model's dtype, which any loader pays."""
    items = batch.get("video") or [t.unsqueeze(0) for t in batch.get("image", [])]
    if not items:
        return None
    shape = items[0].shape
    same = [t for t in items if t.shape == shape]  # any-res batches: the common shape
    x = torch.stack(same).float().div_(255.0)       # N, T, H, W, 3
    return x.permute(0, 4, 1, 2, 3).contiguous()


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p / 100.0 * len(xs) + 0.5)) - 1))] if xs else 0.0


def train(rank, world, args):
    if args.torchrun:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    else:  # a rendezvous file, not a TCP port: nothing to collide with
        dist.init_process_group("gloo", init_method="file://" + args.rendezvous, rank=rank,
                                world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.parallel.DistributedDataParallel(TinyVideoNet())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    waits, steps, samples = [], 0, 0
    t_start = time.monotonic()
    with datahelix.Loader(socket=args.socket, rank=rank, world_size=world) as loader:
        it = iter(loader)
        while True:
            t0 = time.monotonic()
            batch = next(it, None)
            t1 = time.monotonic()
            # every rank must agree to go on (a rank at the end stops them all)
            more = torch.tensor([0 if batch is None else 1])
            dist.all_reduce(more, op=dist.ReduceOp.MIN)
            if not more.item():
                break
            waits.append(t1 - t0)
            x = clips(batch)
            labels = torch.tensor([hash(i) % 10 for i in batch["ids"]][:x.shape[0]])
            loss = loss_fn(model(x), labels)
            opt.zero_grad()
            loss.backward()  # DDP's all-reduce: the step's barrier
            opt.step()
            if args.emulate:
                time.sleep(max(0.0, batch["emulated_compute_s"]))
            loader.report_step(batch["step"], time.monotonic() - t1)
            samples += len(batch["ids"])
            steps += 1
            del batch, x  # the views go: the batch's memory returns to the agent
    elapsed = time.monotonic() - t_start
    gathered = [None] * world
    dist.all_gather_object(gathered, {"waits": waits, "samples": samples, "steps": steps,
                                      "elapsed": elapsed})
    if rank == 0:
        all_waits = [w for g in gathered for w in g["waits"][1:]]  # step 0 is pipeline fill
        total = sum(g["samples"] for g in gathered)
        span = max(g["elapsed"] for g in gathered)
        print(json.dumps({
            "loader": "datahelix", "ranks": world, "steps": steps, "samples": total,
            "throughput_sps": total / span if span > 0 else 0.0,
            "wait_p50_ms": 1e3 * percentile(all_waits, 50),
            "wait_p95_ms": 1e3 * percentile(all_waits, 95),
            "wait_p99_ms": 1e3 * percentile(all_waits, 99),
            "input_wait_frac": sum(sum(g["waits"]) for g in gathered) / (world * span)
            if span > 0 else 0.0}), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--socket", default=None, help="the agent's socket (default: from DH_JOB)")
    ap.add_argument("--emulate", action="store_true",
                    help="sleep each batch's modelled accelerator time")
    ap.add_argument("--torchrun", action="store_true",
                    help="ranks were started by torchrun (read RANK / WORLD_SIZE)")
    args = ap.parse_args()
    if args.torchrun:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    with tempfile.TemporaryDirectory(prefix="dhddp") as tmp:
        args.rendezvous = os.path.join(tmp, "rendezvous")
        torch.multiprocessing.spawn(train, args=(args.ranks, args), nprocs=args.ranks)


if __name__ == "__main__":
    main()
