"""Delivery cost of a served batch in Python: from asking for the next batch to
holding usable torch tensors that view the agent's shared memory, and the
tensor bytes copied on the way (bench/RESULTS.md).

    /usr/bin/python3 bench/bench_serve_latency.py BUILD_DIR [BATCHES]

Generates 64 small images, starts `datahelix serve` (1 rank, a memory budget
that lets the agent prepare ahead), takes BATCHES batches of 8 samples after
a warm-up, with a 5 ms "training step" (DH_BENCH_STEP_S) before each request so that the agent
prepares ahead (as it does under a real step), and prints the median and p95
of (a) the raw request (Client.next) and (b) request + Loader's dict of
tensors, plus the tensor bytes copied (each tensor's address checked to lie
in the batch's shared memory). This is the delivery path's own cost.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/release")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
sys.path.insert(0, os.path.join(build, "python"))
import datahelix  # noqa: E402
import torch  # noqa: E402

cli = os.path.join(build, "datahelix")
tmp = tempfile.mkdtemp(prefix="dhlat")
for i in range(64):
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-nostdin", "-f", "lavfi", "-i",
                    "testsrc2=size=%dx96" % (128 + 8 * (i % 8)), "-frames:v", "1",
                    os.path.join(tmp, "i%02d.jpg" % i)], check=True)
subprocess.run([cli, "index", tmp, "-o", os.path.join(tmp, "m.jsonl"), "-q"], check=True,
               stdout=subprocess.DEVNULL)
sock = "@dh-latency-%d" % os.getpid()
agent = subprocess.Popen([cli, "serve", "--manifest", os.path.join(tmp, "m.jsonl"), "--ranks",
                          "1", "--workers", os.environ.get("DH_BENCH_WORKERS", "2"), "--batch", "8", "--steps", "0", "--socket", sock,
                          "--memory-budget", "200000000"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
loader = datahelix.Loader(socket=sock, rank=0, world_size=1)
it = iter(loader)  # attaches
client = loader._client
step_s = float(os.environ.get("DH_BENCH_STEP_S", "0.005"))
copied = 0
times_raw, times_dict = [], []
for k in range(n + 200):
    time.sleep(step_s)  # a training step: the agent prepares ahead meanwhile
    # What the Loader's iterator does (_Batches.__next__), timed in its two parts.
    t0 = time.perf_counter()
    raw = client.next()
    t1 = time.perf_counter()
    b = loader._as_dict(raw)
    t2 = time.perf_counter()
    base = b["data"].data_ptr()
    for t in b["image"]:
        if not (base <= t.data_ptr() < base + b["data"].numel()):
            copied += t.numel() * t.element_size()
    if k >= 200:
        times_raw.append(t1 - t0)
        times_dict.append(t2 - t0)
    del b, t, raw  # the last view gone: the batch goes back to the agent
loader.close()
agent.terminate()
agent.wait()
shutil.rmtree(tmp, ignore_errors=True)


def us(xs, p):
    xs = sorted(xs)
    return 1e6 * xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


print("batches %d of 8 images (224x224x3 uint8, %.2f MiB each)" % (n, 8 * 224 * 224 * 3 / 2**20))
print("Client.next (request -> Batch):        median %.0f us, p95 %.0f us" %
      (us(times_raw, 50), us(times_raw, 95)))
print("Loader (request -> dict of tensors):   median %.0f us, p95 %.0f us" %
      (us(times_dict, 50), us(times_dict, 95)))
print("tensor bytes copied: %d" % copied)
