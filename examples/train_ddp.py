"""A real PyTorch data-parallel training loop fed by `datahelix serve` (or, for
comparison, by the PyTorch DataLoader with PyAV decoding).

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
waiting costs a GPU job; --emulate-ms-per-sample X sleeps X ms per sample
instead, the same for both loaders. --loader torch feeds the same loop from
torch.utils.data.DataLoader + DistributedSampler (num_workers W/R, prefetch
factor 2, persistent workers), decoding with PyAV to the same frames, size
and crop, for a side-by-side run:

    /usr/bin/python3 examples/train_ddp.py --ranks 2 --loader torch \
        --manifest data/k/manifest.jsonl --workers 2 --batch 8 --epochs 2

Ranks are started here with torch.multiprocessing; under torchrun, pass
--torchrun (ranks read the launcher's environment). On Debian 12 (torch 1.13,
Python 3.11) torchrun's default "--redirects 0 --tee 0" fails to parse, so
give it "--redirects 1 --tee 1":

    /usr/bin/python3 -m torch.distributed.run --redirects 1 --tee 1 \
        --nproc_per_node 2 examples/train_ddp.py --torchrun --emulate

Several nodes under torchrun: one agent per node (mpirun), each trainer's
Loader() attaches to its node's agent; two nodes of two ranks on one host
(on separate hosts the default socket needs no DH_SOCKET):

    mpirun -np 2 datahelix serve --manifest data/k/manifest.jsonl \
        --workload kinetics-clips --ranks 4 --workers 2 --batch 8 --epochs 2 \
        --socket @dh-%n &
    for n in 0 1; do DH_SOCKET=@dh-$n /usr/bin/python3 -m torch.distributed.run \
        --redirects 1 --tee 1 --nnodes 2 --node_rank $n --nproc_per_node 2 \
        --master_addr 127.0.0.1 --master_port 29500 examples/train_ddp.py \
        --torchrun --emulate & done; wait

The same with torch.multiprocessing (here two agents on one host, hence the
per-node socket names):

    mpirun -np 2 datahelix serve --manifest data/k/manifest.jsonl \
        --workload kinetics-clips --ranks 4 --workers 2 --batch 8 --epochs 2 \
        --socket @dh-%n &
    /usr/bin/python3 examples/train_ddp.py --ranks 4 --ranks-per-node 2 \
        --socket @dh-%n --emulate

--objective caption trains a small video-text model instead: a contrastive
(CLIP-style) loss between each clip's embedding and its caption's (a bag of
hashed caption words), on data with captions: WebDataset shards (their .txt
members) or a manifest with "text"; the DataLoader side reads each shard
member by its byte range, as a map-style Dataset over an index does:

    datahelix gen --workload webvid-caption --out data/w --samples 96 --format wds
    datahelix serve --manifest data/w/manifest.jsonl --workload webvid-caption \
        --ranks 2 --workers 2 --batch 8 --epochs 2 &
    /usr/bin/python3 examples/train_ddp.py --ranks 2 --objective caption

Rank 0 prints one JSON line: throughput, per-rank input wait percentiles, and
the share of step time spent waiting for input, and the CPU the trainer
processes used (in cores: process CPU seconds over the run's span).
"""
import argparse
import io
import json
import os
import sys
import tempfile
import time
import zlib

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


class CaptionNet(nn.Module):
    """A small video-text model: clips through TinyVideoNet's stem to an embedding,
    captions as a bag of hashed words to another; a contrastive (CLIP-style) loss pulls
    each clip towards its own caption and away from the batch's others."""

    def __init__(self, dim=32, buckets=4096):
        super().__init__()
        self.video = TinyVideoNet(classes=dim)
        self.text = nn.EmbeddingBag(buckets, dim, mode="mean")
        self.buckets = buckets

    def tokens(self, texts):
        """Hashed lowercase words (crc32: the same in every process) as EmbeddingBag input."""
        ids, offsets = [], []
        for t in texts:
            offsets.append(len(ids))
            ids += [zlib.crc32(w.encode()) % self.buckets for w in t.lower().split()] or [0]
        return torch.tensor(ids), torch.tensor(offsets)

    def forward(self, x, texts):
        v = nn.functional.normalize(self.video(x), dim=1)
        t = nn.functional.normalize(self.text(*self.tokens(texts)), dim=1)
        logits = v @ t.t() / 0.07
        target = torch.arange(len(texts))
        return (nn.functional.cross_entropy(logits, target) +
                nn.functional.cross_entropy(logits.t(), target)) / 2


class PyAVClips(torch.utils.data.Dataset):
    """The manifest's videos as a PyTorch user would read them: PyAV decodes each file (or
    shard member, read by its byte range) on one thread from its start to its last needed
    frame, keeps `frames` uniformly spaced frames, scales them to cover size x size and
    crops the centre (the kinetics-clips and webvid-caption specs). Returns (uint8 T x H x
    W x 3 tensor, sample id, caption or "")."""

    def __init__(self, manifest, frames=16, size=224):
        self.dir = os.path.dirname(os.path.abspath(manifest))
        with open(manifest) as f:
            self.rows = [json.loads(line) for line in f if line.strip()]
        self.frames, self.size = frames, size

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        import av
        import numpy as np
        row = self.rows[i]
        media = row["media"][0]
        n = int(media.get("frames") or 1)
        want = sorted({min(n - 1, int((k + 0.5) * n / self.frames)) for k in range(self.frames)})
        w, h = media["width"], media["height"]
        scale = self.size / min(w, h)
        sw, sh = max(self.size, round(w * scale)), max(self.size, round(h * scale))
        x0, y0 = (sw - self.size) // 2, (sh - self.size) // 2
        out, src = [], os.path.join(self.dir, media["path"])
        if media.get("offset"):  # a shard's member: its bytes
            with open(src, "rb") as f:
                f.seek(media["offset"])
                src = io.BytesIO(f.read(media["bytes"]))
        with av.open(src) as c:
            c.streams.video[0].thread_type = "SLICE"
            c.streams.video[0].codec_context.thread_count = 1
            for k, frame in enumerate(c.decode(video=0)):
                if k in want:
                    rgb = frame.to_ndarray(format="rgb24", width=sw, height=sh)
                    out.append(rgb[y0:y0 + self.size, x0:x0 + self.size])
                if k >= want[-1]:
                    break
        while len(out) < self.frames:  # a short file: repeat its last frame
            out.append(out[-1])
        return torch.from_numpy(np.stack(out[:self.frames])), row["id"], row.get("text", "")


def torch_batches(args, rank, world):
    """DataLoader + DistributedSampler batches, as dicts shaped like datahelix's."""
    ds = PyAVClips(args.manifest, frames=args.frames)
    sampler = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=world, rank=rank, shuffle=True, seed=1, drop_last=True)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch // world, sampler=sampler,
                                     num_workers=max(1, args.workers // world),
                                     prefetch_factor=2, persistent_workers=True,
                                     drop_last=True)
    step = 0
    for epoch in range(2 if args.epochs is None else args.epochs):
        sampler.set_epoch(epoch)
        for clips_, ids, texts in dl:
            yield {"video": list(clips_), "ids": list(ids), "text": list(texts), "step": step,
                   "emulated_compute_s": 0.0}
            step += 1


def served_batches(loader, epochs):
    """datahelix batches, one epoch per loop as with any PyTorch loader: set_epoch checks
    that the agent's order is at that epoch (a resumed job starts at loader.epoch, in the
    middle of an epoch when the state was saved there). `yield from` keeps no reference to
    a batch, so each goes back to the agent as soon as the loop body drops it."""
    if epochs is None:  # the agent's job says how long (its --epochs)
        epochs = loader.epochs
        if epochs is None:
            raise SystemExit("the agent runs endless or by --steps: give --epochs N here")
    for epoch in range(loader.epoch, epochs):
        loader.set_epoch(epoch)
        yield from loader


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


def mean_quarter(per_rank, which):
    """The mean loss over the first (which 0) or last (-1) quarter of each rank's steps."""
    xs = []
    for ls in per_rank:
        q = max(1, len(ls) // 4)
        xs += ls[:q] if which == 0 else ls[-q:]
    return sum(xs) / len(xs) if xs else 0.0


def train(rank, world, args):
    if args.torchrun:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    else:  # a rendezvous file, not a TCP port: nothing to collide with
        dist.init_process_group("gloo", init_method="file://" + args.rendezvous, rank=rank,
                                world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    caption = args.objective == "caption"
    model = nn.parallel.DistributedDataParallel(CaptionNet() if caption else TinyVideoNet())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    waits, steps, samples, losses = [], 0, 0, []
    t_start, cpu_start = time.monotonic(), time.process_time()
    served = args.loader == "datahelix"
    sock = args.socket
    if sock and "%n" in sock:  # this rank's node's agent
        sock = sock.replace("%n", str(rank // (args.ranks_per_node or world)))
    # Under torchrun, Loader() alone reads RANK / WORLD_SIZE and the agent's socket from
    # DH_SOCKET (else DH_JOB's default); ranks of torch.multiprocessing name theirs.
    if not served:
        loader = None
    elif args.torchrun and not sock:
        loader = datahelix.Loader()
    else:
        loader = datahelix.Loader(socket=sock, rank=rank, world_size=world)
    it = served_batches(loader, args.epochs) if served else torch_batches(args, rank, world)
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
        x = None
        if args.no_model:  # emulated ranks only: the all-reduce above is the barrier
            pass
        else:
            x = clips(batch)
            if caption:
                texts = batch["text"]
                if any(t is None for t in texts):
                    raise SystemExit("--objective caption: sample %s has no caption (index "
                                     "shards with .txt members, or give the manifest \"text\")"
                                     % batch["ids"][texts.index(None)])
                loss = model(x, texts[:x.shape[0]])
            else:
                labels = torch.tensor([hash(i) % 10 for i in batch["ids"]][:x.shape[0]])
                loss = loss_fn(model(x), labels)
            losses.append(loss.item())
            opt.zero_grad()
            loss.backward()  # DDP's all-reduce: the step's barrier
            opt.step()
        if args.emulate:
            time.sleep(max(0.0, batch["emulated_compute_s"]))
        if args.emulate_ms_per_sample > 0:
            time.sleep(args.emulate_ms_per_sample * 1e-3 * len(batch["ids"]))
        if served:
            loader.report_step(batch["step"], time.monotonic() - t1)
        samples += len(batch["ids"])
        steps += 1
        del batch, x  # the views go: the batch's memory returns to the agent
    if served:
        loader.close()
    elapsed = time.monotonic() - t_start
    cpu = time.process_time() - cpu_start  # this process, all its threads (gloo's included)
    gathered = [None] * world
    dist.all_gather_object(gathered, {"waits": waits, "samples": samples, "steps": steps,
                                      "elapsed": elapsed, "cpu": cpu, "losses": losses})
    if rank == 0:
        all_waits = [w for g in gathered for w in g["waits"][1:]]  # step 0 is pipeline fill
        total = sum(g["samples"] for g in gathered)
        span = max(g["elapsed"] for g in gathered)
        print(json.dumps({
            "loader": args.loader, "ranks": world, "steps": steps, "samples": total,
            "throughput_sps": total / span if span > 0 else 0.0,
            "wait_p50_ms": 1e3 * percentile(all_waits, 50),
            "wait_p95_ms": 1e3 * percentile(all_waits, 95),
            "wait_p99_ms": 1e3 * percentile(all_waits, 99),
            "input_wait_frac": sum(sum(g["waits"]) for g in gathered) / (world * span)
            if span > 0 else 0.0,
            "trainer_cpu_frac": sum(g["cpu"] for g in gathered) / span if span > 0 else 0.0,
            "objective": args.objective,
            # the loss over each rank's first and last quarter of steps (0: no model)
            "loss_first": mean_quarter([g["losses"] for g in gathered], 0),
            "loss_last": mean_quarter([g["losses"] for g in gathered], -1)}),
              flush=True)
    del model, opt  # DDP's reducer goes before its process group does
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--socket", default=None, help="the agent's socket (default: from DH_JOB); "
                    "%%n becomes the rank's node (rank // --ranks-per-node) when agents of "
                    "several nodes share a host")
    ap.add_argument("--ranks-per-node", type=int, default=0,
                    help="ranks each node's agent serves (several nodes under mpirun)")
    ap.add_argument("--emulate", action="store_true",
                    help="sleep each batch's modelled accelerator time (datahelix only)")
    ap.add_argument("--emulate-ms-per-sample", type=float, default=0.0,
                    help="sleep this many ms per sample of a batch (both loaders)")
    ap.add_argument("--loader", choices=["datahelix", "torch"], default="datahelix")
    ap.add_argument("--objective", choices=["classify", "caption"], default="classify",
                    help="classify: a 10-way video classifier; caption: a contrastive "
                    "video-caption model (needs captions)")
    ap.add_argument("--frames", type=int, default=16,
                    help="torch loader: frames per clip, as the agent's spec (kinetics-clips "
                    "16, webvid-caption 8)")
    ap.add_argument("--no-model", action="store_true",
                    help="no forward/backward: ranks only sleep (with --emulate) and meet")
    ap.add_argument("--manifest", help="torch loader: the manifest to read")
    ap.add_argument("--workers", type=int, default=2, help="torch loader: CPU workers in all")
    ap.add_argument("--batch", type=int, default=8, help="torch loader: the global batch")
    ap.add_argument("--epochs", type=int, default=None,
                    help="epochs of the job (default: datahelix, the agent's --epochs; the "
                         "torch loader, 2)")
    ap.add_argument("--torchrun", action="store_true",
                    help="ranks were started by torchrun (read RANK / WORLD_SIZE)")
    args = ap.parse_args()
    if args.loader == "torch" and not args.manifest:
        ap.error("--loader torch needs --manifest")
    if args.torchrun:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    with tempfile.TemporaryDirectory(prefix="dhddp") as tmp:
        args.rendezvous = os.path.join(tmp, "rendezvous")
        torch.multiprocessing.spawn(train, args=(args.ranks, args), nprocs=args.ranks)


if __name__ == "__main__":
    main()
