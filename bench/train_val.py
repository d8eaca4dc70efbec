"""A 2-rank training loop (torch.multiprocessing, gloo all-reduce as each step's barrier,
MS milliseconds of emulated accelerator time per sample) fed by `datahelix serve`, with an
optional validation pass after every training epoch (--no-shuffle --keep-last) fed by a
second agent, or by a stream of the training agent (VAL_SOCKET the same, STREAM its name).
Rank 0 prints one JSON line: training samples/s over the training loops only, and each
validation pass's seconds.

    usage: train_val.py TRAIN_SOCKET VAL_SOCKET|- EPOCHS MS [STREAM]
"""
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import datahelix


def rank_main(rank, world, args, rendezvous):
    train_sock, val_sock, epochs, ms, stream = args
    dist.init_process_group("gloo", init_method="file://" + rendezvous, rank=rank,
                            world_size=world)
    train = datahelix.Loader(socket=train_sock, rank=rank, world_size=world)
    val = datahelix.Loader(socket=val_sock, rank=rank, world_size=world, stream=stream) \
        if val_sock != "-" else None
    if val is not None:
        len(val)  # attach now: the validation agent (or stream) prefetches its first pass
    t_train, n_train, passes = 0.0, 0, []
    for epoch in range(epochs):
        train.set_epoch(epoch)
        t0 = time.monotonic()
        for b in train:
            time.sleep(ms * 1e-3 * len(b["ids"]))
            dist.all_reduce(torch.ones(1))
            train.report_step(b["step"], ms * 1e-3 * len(b["ids"]))
            n_train += len(b["ids"])
            del b
        t_train += time.monotonic() - t0
        if val is not None:
            t0 = time.monotonic()
            for b in val:  # forward only: a third of a training step's time
                time.sleep(ms * 1e-3 * len(b["ids"]) / 3)
                dist.all_reduce(torch.ones(1))
                del b
            passes.append(time.monotonic() - t0)
    train.close()
    if val is not None:
        val.close()
    out = [None] * world
    dist.all_gather_object(out, {"n": n_train, "t": t_train, "passes": passes})
    if rank == 0:
        print(json.dumps({"train_sps": sum(o["n"] for o in out) / max(o["t"] for o in out),
                          "val_pass_s": [max(o["passes"][k] for o in out)
                                         for k in range(len(passes))]}), flush=True)
    dist.destroy_process_group()


def main():
    args = (sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
            sys.argv[5] if len(sys.argv) > 5 else None)
    with tempfile.TemporaryDirectory(prefix="dhtv") as tmp:
        torch.multiprocessing.spawn(rank_main, args=(2, args, os.path.join(tmp, "rdv")),
                                    nprocs=2)


if __name__ == "__main__":
    main()
