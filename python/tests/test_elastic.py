"""torchrun's elastic restart against `datahelix serve --on-rank-exit wait`: a 2-rank gloo
job whose rank 1 kills itself in its first attempt; torchrun (--max_restarts 1) stops the
other rank and starts both again; the agent waits, and the restarted ranks (presenting no
state) go on from the last step both had completed. Every sample of every epoch is
trained exactly once. Prints the time from the death to the restarted job's first batch.
Skipped (77) without torch."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import torch  # noqa: F401
except ImportError:
    print("torch is not installed for %s: skipping the elastic test" % sys.executable)
    sys.exit(77)

CLI = os.environ.get("DH_CLI", "datahelix")
FFMPEG = os.environ.get("DH_FFMPEG", "ffmpeg")
TORCHRUN_311 = ["--redirects", "1", "--tee", "1"]  # see test_ddp_example.py

# One rank of the job: logs each step it completed (after the all-reduce) as JSON lines.
WORKER = r"""
import json, os, signal, sys, time
import torch, torch.distributed as dist
import datahelix
out, epochs = sys.argv[1], int(sys.argv[2])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
dist.init_process_group("gloo")
rank = dist.get_rank()
log = open(os.path.join(out, "a%d-r%d.jsonl" % (attempt, rank)), "w")
with datahelix.Loader() as loader:          # RANK, WORLD_SIZE from torchrun; DH_SOCKET
    first = True
    for epoch in range(loader.epoch, epochs):
        loader.set_epoch(epoch)
        for b in loader:
            if first and attempt:
                log.write(json.dumps({"first_batch": time.time()}) + "\n")
            first = False
            t = torch.ones(1)
            dist.all_reduce(t)                   # the step's barrier
            log.write(json.dumps({"step": b["step"], "epoch": b["epoch"], "ids": b["ids"]})
                      + "\n")
            log.flush()
            loader.report_step(b["step"], 0.01)
            del b
            if attempt == 0 and rank == 1 and epoch == 1:
                log.write(json.dumps({"died": time.time()}) + "\n")
                log.close()
                os.kill(os.getpid(), signal.SIGKILL)
log.close()
dist.barrier()
dist.destroy_process_group()
"""


class ElasticTest(unittest.TestCase):
    def test_torchrun_restart_trains_every_sample_of_every_epoch_once(self):
        tmp = tempfile.mkdtemp(prefix="dhelastic")
        self.addCleanup(shutil.rmtree, tmp, True)
        for i in range(12):
            subprocess.run([FFMPEG, "-v", "error", "-y", "-nostdin", "-f", "lavfi", "-i",
                            "testsrc2=size=%dx64" % (64 + 8 * i), "-frames:v", "1",
                            os.path.join(tmp, "i%02d.jpg" % i)], check=True)
        manifest = os.path.join(tmp, "m.jsonl")
        subprocess.run([CLI, "index", tmp, "-o", manifest, "-q"], check=True,
                       stdout=subprocess.DEVNULL)
        script = os.path.join(tmp, "worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        sock = "@dh-elastic-%d" % os.getpid()
        agent = subprocess.Popen([CLI, "serve", "--manifest", manifest, "--ranks", "2",
                                  "--workers", "2", "--batch", "4", "--epochs", "3",
                                  "--socket", sock, "--on-rank-exit", "wait",
                                  "--attach-timeout", "120"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        env = dict(os.environ, DH_SOCKET=sock)
        run = subprocess.run([sys.executable, "-m", "torch.distributed.run"] + TORCHRUN_311 +
                             os.environ.get("DH_TORCHRUN_ARGS", "").split() +
                             ["--nproc_per_node", "2", "--max_restarts", "1",
                              "--master_port", str(29500 + os.getpid() % 1000), script, tmp,
                              "3"], capture_output=True, text=True, env=env, timeout=300,
                             cwd=tmp)
        if run.returncode:
            agent.kill()
        a_out, a_err = agent.communicate(timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout[-3000:] + run.stderr[-3000:] + a_err)
        self.assertEqual(agent.returncode, 0, a_err)
        self.assertIn("waiting", a_err)
        self.assertIn("rank 1", a_err)
        # Each step's samples from the last attempt that completed it: 3 epochs of 3 steps,
        # every epoch's 12 samples exactly once.
        steps, died, first = {}, None, None
        for attempt in (0, 1):
            for path in sorted(glob.glob(os.path.join(tmp, "a%d-r*.jsonl" % attempt))):
                rank = path[-7]
                with open(path) as f:
                    records = [json.loads(line) for line in f]
                for rec in records:
                    if "step" in rec:
                        steps[(rec["step"], rank)] = (rec["epoch"], rec["ids"])
                    died = rec.get("died", died)
                    first = first if first else rec.get("first_batch")
        self.assertEqual(sorted({s for s, _ in steps}), list(range(9)))
        for epoch in range(3):
            ids = sorted(i for (s, r), (e, b) in steps.items() if e == epoch for i in b)
            self.assertEqual(ids, ["i%02d.jpg" % i for i in range(12)], "epoch %d" % epoch)
        self.assertIsNotNone(died)
        self.assertIsNotNone(first)
        print("elastic: %.2f s from the rank's death to the restarted job's first batch"
              % (first - died))


if __name__ == "__main__":
    unittest.main()
