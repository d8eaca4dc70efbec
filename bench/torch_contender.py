#!/usr/bin/python3
"""torch_contender.py - the PyTorch DataLoader as `datahelix bench --mode real` runs it.

usage: torch_contender.py TASK.json OUT.txt

`datahelix bench` writes TASK.json: the run's shape (ranks R, CPU workers W,
global batch G, steps, seed), the spec's resize modes, and per sample in
manifest order its media (absolute path, the frames our spec samples, output
size, tiles, audio parameters) and the emulated accelerator seconds our
ranks sleep for it. This script runs what a PyTorch user runs today: one
process per rank (torch.distributed, gloo), each with a DataLoader over a
DistributedSampler (shuffle, drop_last; num_workers = max(1, W // R),
prefetch_factor 2, persistent workers) whose Dataset decodes with PyAV on
the worker processes, the batches pickled through the DataLoader's queues.
Each rank asks for its batch, "computes" for its samples' emulated seconds
(sleeping, as an accelerator leaves the CPU free), meets the others in an
all-reduce and pays the step's fixed cost: our emulated ranks' loop.

With "pipeline": "wds" in TASK.json (the `wds` contender, over WebDataset tar
shards), each rank runs what a WebDataset user runs instead (the `webdataset`
package itself cannot be installed here, so this is a short pipeline faithful
to its documented defaults): an IterableDataset that lists the shards,
shuffles them per epoch with a seed every rank shares, keeps this rank's
(split_by_node) and then this worker's (split_by_worker) share, streams each
tar with Python's tarfile, groups adjacent members by key (the path up to the
first dot of its base name, suffixes lowercased), decodes the media members
from their bytes with PyAV, keeps the caption (.txt) as a str, passes samples
through a shuffle buffer (1000, started at 100, as .shuffle(1000) does),
batches G/R samples in the worker (.batched) and goes round its shards again
when they end (an endless stream: .repeat(), as DDP users do so that ranks do
not run out at different times). The DataLoader gets batch_size=None.
A media item of a shard read by the map-style contender is read from its
offset (a seek and a read of its bytes), as a Dataset over an index would.

OUT.txt gets one line per (step, rank) and per sample with raw timings
(CLOCK_MONOTONIC seconds since the common start); datahelix turns them into
the same metrics as its own runs (dh_result_from_steps):
    batch STEP RANK ASKED READY COMPUTE
    sample STEP RANK INDEX START WALL CPU OK
    end MAKESPAN
A sample that cannot be decoded is reported on stderr with its id, path and
reason, counted failed (OK 0), and the run goes on.
Exit status: 0; 2 usage; 3 torch, PyAV or numpy missing (the message says
which Debian package installs it); 1 any other failure.
"""
import io
import json
import math
import os
import random
import re
import sys
import tarfile
import tempfile
import time
import traceback


def need_modules():
    missing = []
    for mod, pkg in (("numpy", "python3-numpy"), ("torch", "python3-torch"), ("av", "python3-av")):
        try:
            __import__(mod)
        except Exception as e:  # ImportError, or a broken install
            missing.append("%s (%s: %s)" % (pkg, mod, e))
    return missing


# ------------------------------------------------------------------ decoding

def frame_rgb(frame, out_w, out_h, mode):
    """One decoded picture as uint8 H x W x 3 of the spec's output size: "crop" (and
    "bucket", whose bucket is the output size) scales to cover out_w x out_h and takes the
    centre; any other mode scales to it."""
    if mode in ("crop", "bucket"):
        scale = max(out_w / frame.width, out_h / frame.height)
        sw = max(out_w, int(round(frame.width * scale)))
        sh = max(out_h, int(round(frame.height * scale)))
        rgb = frame.to_ndarray(format="rgb24", width=sw, height=sh)
        x0, y0 = (sw - out_w) // 2, (sh - out_h) // 2
        return rgb[y0:y0 + out_h, x0:x0 + out_w]
    return frame.to_ndarray(format="rgb24", width=out_w, height=out_h)


def source(m):
    """What PyAV opens for media item m: its path, or its bytes when it is a member of a
    shard (read from its offset; the wds pipeline puts the bytes it streamed in "data")."""
    if "data" in m:
        return io.BytesIO(m["data"])
    if m.get("offset"):
        with open(m["path"], "rb") as f:
            f.seek(m["offset"])
            return io.BytesIO(f.read(m["bytes"]))
    return m["path"]


def decode_video(av, np, m, mode):
    """The sampled frames (ascending indices), decoded from the start as PyAV users read a
    clip, stopping after the last one needed; a short file repeats its last frame."""
    want = m["frames"]
    wanted, last, out = set(want), want[-1], []
    with av.open(source(m)) as c:
        stream = c.streams.video[0]
        stream.codec_context.thread_count = 1
        for k, frame in enumerate(c.decode(stream)):
            if k in wanted:
                out.append(frame_rgb(frame, m["out_w"], m["out_h"], mode))
            if k >= last:
                break
    if not out:
        raise ValueError("no frame decoded")
    while len(out) < len(want):
        out.append(out[-1])
    return np.stack(out)


def decode_image(av, np, m, mode):
    """One picture at the output size, or any-res tiles: the base view of the whole image
    (when the spec has one), then the image scaled to cols x rows tiles and cut."""
    with av.open(source(m)) as c:
        frame = next(c.decode(video=0))
    cols, rows, size_w, size_h = m.get("tile_cols", 0), m.get("tile_rows", 0), m["out_w"], m["out_h"]
    if cols * rows == 0:
        return frame_rgb(frame, size_w, size_h, mode)
    grid = frame.to_ndarray(format="rgb24", width=cols * size_w, height=rows * size_h)
    out = [frame.to_ndarray(format="rgb24", width=size_w, height=size_h)] if m.get("base_tile") else []
    for r in range(rows):
        for q in range(cols):
            out.append(grid[r * size_h:(r + 1) * size_h, q * size_w:(q + 1) * size_w])
    return np.stack(out)


_MEL = {}


def mel_filters(np, sr, n_fft, bins):
    key = (sr, n_fft, bins)
    if key not in _MEL:
        hz = lambda mel: 700.0 * (10 ** (mel / 2595.0) - 1)  # noqa: E731
        mel = lambda f: 2595.0 * math.log10(1 + f / 700.0)  # noqa: E731
        pts = [hz(mel(sr / 2) * k / (bins + 1)) for k in range(bins + 2)]
        freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
        fb = np.zeros((bins, n_fft // 2 + 1), dtype=np.float32)
        for b in range(bins):
            lo, mid, hi = pts[b], pts[b + 1], pts[b + 2]
            up = (freqs - lo) / max(mid - lo, 1e-9)
            down = (hi - freqs) / max(hi - mid, 1e-9)
            fb[b] = np.maximum(0, np.minimum(up, down))
        _MEL[key] = fb
    return _MEL[key]


def decode_audio(av, np, m, mode):
    """Resampled to the spec's rate (mono float), then a log-mel spectrogram of mel_bins x
    frames (25 ms Hann windows every 1/mel_fps s), trimmed or padded to our frame count."""
    sr, bins, fps, frames = m["sample_rate"], m["mel_bins"], m["mel_fps"], m["mel_frames"]
    chunks = []
    with av.open(source(m)) as c:
        res = av.AudioResampler(format="flt", layout="mono", rate=sr)
        for frame in c.decode(audio=0):
            for o in res.resample(frame):
                chunks.append(o.to_ndarray().reshape(-1))
        for o in res.resample(None):
            chunks.append(o.to_ndarray().reshape(-1))
    wave = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    hop, n_fft = max(1, sr // fps), int(sr * 0.025)
    wave = np.pad(wave, (0, max(0, frames * hop + n_fft - len(wave))))
    idx = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    spec = np.abs(np.fft.rfft(wave[idx] * np.hanning(n_fft), axis=1)) ** 2
    return np.log(mel_filters(np, sr, n_fft, bins) @ spec.T + 1e-6).astype(np.float32)


class SpecDataset:
    """Map-style dataset over the task's samples: item i is decoded by PyAV on a worker
    process and returned with its timings; a sample that fails is reported and marked."""

    def __init__(self, task):
        self.samples = task["samples"]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return decode_sample(self.samples[i], i, time.monotonic(), time.thread_time())


def decode_sample(s, i, start, cpu0, data=None):
    """Sample s (index i) decoded on a worker, with its timings from (start, cpu0); data:
    its media members' bytes (the wds pipeline), else read from the files."""
    import av
    import numpy as np
    import torch
    out, ok = [], 1
    try:
        for j, m in enumerate(s["media"]):
            if data is not None:
                m = dict(m, data=data[j])
            fn = {"video": decode_video, "image": decode_image, "audio": decode_audio}[m["type"]]
            out.append(torch.from_numpy(fn(av, np, m, m.get("resize", "native"))))
    except Exception as e:  # any bad file: named, counted, the run goes on
        print("torch contender: sample %s (%s): %s" % (s["id"], m["path"], e),
              file=sys.stderr, flush=True)
        out, ok = [], 0
    return {"index": i, "start": start, "wall": time.monotonic() - start,
            "cpu": time.thread_time() - cpu0, "ok": ok, "tensors": out}


def collate(items):
    """Items' tensors stacked per media slot where their shapes agree (as default_collate
    does), else kept as a list (any-res images, clips of several sizes)."""
    import torch
    slots = []
    for k in range(max((len(it["tensors"]) for it in items), default=0)):
        ts = [it["tensors"][k] for it in items if len(it["tensors"]) > k]
        same = all(t.shape == ts[0].shape for t in ts)
        slots.append(torch.stack(ts) if same else ts)
    meta = [{key: it[key] for key in ("index", "start", "wall", "cpu", "ok")} for it in items]
    return {"meta": meta, "media": slots, "text": [it.get("text") for it in items]}


# --------------------------------------------------------- the WebDataset way

_KEY = re.compile(r"^((?:.*/|)[^./]+)[.]([^/]*)$")  # webdataset's base_plus_ext


def tar_groups(path):
    """(key, {suffix: bytes}) per sample of the tar at path, streamed as webdataset's
    tarfile_to_samples reads it: adjacent members with one key form a sample."""
    key, group = None, {}
    with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r|*") as t:
        for info in t:
            if not info.isreg():
                continue
            m = _KEY.match(info.name)
            if not m:
                continue
            k, suffix = m.group(1), m.group(2).lower()
            if k != key and group:
                yield key, group
                group = {}
            key = k
            group[suffix] = t.extractfile(info).read()
    if group:
        yield key, group


class ShardStream:
    """The IterableDataset: shards shuffled per epoch (one seed for every rank), this rank's
    share, this worker's share of it, samples streamed and decoded, a shuffle buffer, batches
    of G/R made in the worker; endless (going round the shards again)."""

    def __init__(self, task, rank):
        self.task, self.rank = task, rank
        self.shards = sorted({m["path"] for s in task["samples"] for m in s["media"]})
        self.index = {}  # (shard, member) of a sample's first media item -> sample index
        for i, s in enumerate(task["samples"]):
            if s["media"]:
                self.index[(s["media"][0]["path"], s["media"][0]["member"])] = i

    def samples(self, wid, nw):
        """Raw samples (index, {suffix: bytes}, key) of this worker's shards, endlessly."""
        task, epoch = self.task, 0
        while True:
            shards = list(self.shards)
            random.Random(task["seed"] + epoch).shuffle(shards)  # detshuffle: same on all
            mine = shards[self.rank::task["ranks"]][wid::nw]    # split_by_node, _by_worker
            if not mine:
                return  # this worker has no shard (more workers than shards): it ends
            for shard in mine:
                for key, group in tar_groups(shard):
                    first = next((k for k in group if k.rsplit(".", 1)[-1] in _MEDIA), None)
                    i = self.index.get((shard, "%s.%s" % (key, first))) if first else None
                    if i is not None:  # else not a sample of the manifest (index left it out)
                        yield i, group, key
            epoch += 1

    def shuffled(self, wid, nw, rng):
        """.shuffle(1000, initial=100) as webdataset does it, on raw samples (before
        decoding, as its pipelines put it): the buffer grows to 1000, each sample out is a
        random one of it."""
        it, buf, startup = self.samples(wid, nw), [], True
        for sample in it:
            if len(buf) < 1000:
                nxt = next(it, None)
                if nxt is not None:
                    buf.append(nxt)
            if buf:
                k = rng.randrange(len(buf))
                sample, buf[k] = buf[k], sample
            if startup and len(buf) < 100:
                buf.append(sample)
                continue
            startup = False
            yield sample
        rng.shuffle(buf)
        yield from buf

    def __iter__(self):
        import torch
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        rng = random.Random((self.task["seed"] * 1000003 + self.rank) * 1009 + wid)
        per_rank, batch = self.task["global_batch"] // self.task["ranks"], []
        for i, group, key in self.shuffled(wid, nw, rng):
            s = self.task["samples"][i]
            data = [group.get(m["member"][len(key) + 1:].lower()) for m in s["media"]]
            item = decode_sample(s, i, time.monotonic(), time.thread_time(), data)
            txt = group.get("txt")
            item["text"] = txt.decode("utf-8") if txt is not None else None
            batch.append(item)
            if len(batch) == per_rank:  # .batched(G / R)
                yield collate(batch)
                batch = []


_MEDIA = {"mp4", "webm", "mkv", "avi", "mov", "jpg", "jpeg", "png", "webp", "wav", "flac",
          "mp3", "m4a", "ogg"}


# ------------------------------------------------------------------- ranks

# DataLoader workers are forked, as under torchrun (each rank a fresh process whose
# multiprocessing default on Linux is fork); ranks started here by torch.multiprocessing's
# spawn would otherwise pass "spawn" on to them, and each worker would start a new
# interpreter and import torch (seconds on 2 cores) - a cost users of torchrun do not pay.

def batches_map(task, rank):
    """The map-style pipeline's batches, epoch after epoch: DistributedSampler + DataLoader."""
    import torch
    R, W, G = task["ranks"], task["workers"], task["global_batch"]
    ds = SpecDataset(task)
    sampler = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=R, rank=rank, shuffle=True, seed=task["seed"], drop_last=True)
    dl = torch.utils.data.DataLoader(ds, batch_size=G // R, sampler=sampler,
                                     num_workers=max(1, W // R), prefetch_factor=2,
                                     persistent_workers=True, collate_fn=collate, drop_last=True,
                                     multiprocessing_context="fork")
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        n = 0
        for batch in dl:
            n += 1
            yield batch
        if n == 0:
            raise RuntimeError("the sampler gave rank %d no batch (too few samples)" % rank)
        epoch += 1


def batches_wds(task, rank):
    """The WebDataset-style pipeline's batches (made in the workers), endless."""
    import torch

    class Stream(ShardStream, torch.utils.data.IterableDataset):
        """ShardStream as the IterableDataset the DataLoader needs (torch is imported here,
        after the check that it is installed)."""

    ds = Stream(task, rank)
    if len(ds.shards) < task["ranks"]:
        raise RuntimeError("%d shards for %d ranks: split_by_node leaves rank %d without "
                           "data" % (len(ds.shards), task["ranks"], rank))
    dl = torch.utils.data.DataLoader(ds, batch_size=None,
                                     num_workers=max(1, task["workers"] // task["ranks"]),
                                     prefetch_factor=2, persistent_workers=True,
                                     multiprocessing_context="fork")
    for batch in dl:
        yield batch
    raise RuntimeError("rank %d's stream ended" % rank)


def rank_main(rank, task, rdv):
    import av  # imported before the workers fork, as a dataset module would
    av.logging.set_level(av.logging.ERROR)  # not FFmpeg's per-JPEG pixel-format warnings
    import numpy  # noqa: F401
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    R = task["ranks"]
    dist.init_process_group("gloo", init_method="file://" + rdv, rank=rank, world_size=R)
    make = batches_wds if task.get("pipeline") == "wds" else batches_map
    gpu, c0, steps = task["gpu_s"], task["step_fixed_s"], task["steps"]
    flag = torch.zeros(1)
    it = make(task, rank)
    dist.barrier()
    t0 = torch.tensor([time.monotonic()], dtype=torch.float64)
    dist.all_reduce(t0, op=dist.ReduceOp.MAX)  # one start for every rank
    t0 = t0.item()
    lines = []
    for step in range(steps):
        asked = time.monotonic()
        batch = next(it)
        ready = time.monotonic()
        compute = sum(gpu[m["index"]] for m in batch["meta"])
        time.sleep(compute)
        dist.all_reduce(flag)  # the step's collective: everyone waits for the slowest
        time.sleep(c0)
        lines.append("batch %d %d %.9f %.9f %.9f" % (step, rank, asked - t0, ready - t0,
                                                     compute))
        for m in batch["meta"]:
            lines.append("sample %d %d %d %.9f %.9f %.9f %d" % (
                step, rank, m["index"], m["start"] - t0, m["wall"], m["cpu"], m["ok"]))
        del batch
    end = time.monotonic() - t0
    dist.barrier()
    with open("%s.rank%d" % (rdv, rank), "w") as f:
        f.write("\n".join(lines) + "\nend %.9f\n" % end)
    dist.destroy_process_group()


def main(argv):
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    missing = need_modules()
    if missing:
        print("torch contender needs " + ", ".join(missing), file=sys.stderr)
        return 3
    import torch.multiprocessing as mp
    with open(argv[1]) as f:
        task = json.load(f)
    with tempfile.TemporaryDirectory(prefix="dh-torch-") as tmp:
        rdv = os.path.join(tmp, "rdv")
        mp.spawn(rank_main, args=(task, rdv), nprocs=task["ranks"], join=True)
        ends, body = [], []
        for r in range(task["ranks"]):
            with open("%s.rank%d" % (rdv, r)) as f:
                for line in f:
                    if line.startswith("end "):
                        ends.append(float(line.split()[1]))
                    elif line.strip():
                        body.append(line.rstrip("\n"))
    tmp_out = argv[2] + ".tmp"
    with open(tmp_out, "w") as f:
        f.write("\n".join(body) + "\nend %.9f\n" % max(ends))
    os.replace(tmp_out, argv[2])
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
