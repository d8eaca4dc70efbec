"""The Python package against a real `datahelix serve` agent on generated media.

Run by CTest with PYTHONPATH at the built package, DH_CLI the datahelix CLI and
DH_FFMPEG the ffmpeg tool. Exits 77 (skipped) where numpy is missing.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import numpy as np
except ImportError:
    print("numpy is not installed for %s: skipping the Python tests" % sys.executable)
    sys.exit(77)

import datahelix

CLI = os.environ.get("DH_CLI", "datahelix")
FFMPEG = os.environ.get("DH_FFMPEG", "ffmpeg")
N = [0]


def sock():
    N[0] += 1
    return "@dh-pytest-%d-%d" % (os.getpid(), N[0])


class Agent:
    """`datahelix serve` as a subprocess; stopped (and reaped) on exit."""

    def __init__(self, tmp, socket, *args):
        self.p = subprocess.Popen([CLI, "serve", "--manifest", os.path.join(tmp, "m.jsonl"),
                                   "--workers", "2", "--socket", socket] + list(args),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait(self, timeout=60):
        out, err = self.p.communicate(timeout=timeout)
        return self.p.returncode, out, err

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.p.poll() is None:
            self.p.kill()
        self.p.communicate()


RANK_SCRIPT = r"""
import json, sys, datahelix
sock, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seen = []
with datahelix.Loader(socket=sock, rank=rank, world_size=world) as loader:
    for b in loader:
        seen.append([b["step"], b["ids"]])
        loader.report_step(b["step"], 0.001)
print(json.dumps(seen))
"""


class LoaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="dhpy")
        for i in range(8):
            subprocess.run([FFMPEG, "-v", "error", "-y", "-nostdin", "-f", "lavfi", "-i",
                            "testsrc2=size=%dx72" % (96 + 16 * i), "-frames:v", "1",
                            os.path.join(cls.tmp, "i%d.jpg" % i)], check=True)
        subprocess.run([CLI, "index", cls.tmp, "-o", os.path.join(cls.tmp, "m.jsonl"), "-q"],
                       check=True, stdout=subprocess.DEVNULL)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def ranks(self, socket, world):
        procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, socket, str(r), str(world)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(world)]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, err)
            outs.append(json.loads(out))
        return outs

    def test_two_ranks_get_every_sample_of_each_epoch_once(self):
        s = sock()
        with Agent(self.tmp, s, "--ranks", "2", "--batch", "4", "--epochs", "3") as agent:
            outs = self.ranks(s, 2)
            rc, out, err = agent.wait()
        self.assertEqual(rc, 0, err)
        self.assertIn("delivered 24 + failed 0 = 24", out)
        per_epoch = {}
        for seen in outs:
            for step, ids in seen:
                per_epoch.setdefault(step // 2, []).extend(ids)
        self.assertEqual(sorted(per_epoch), [0, 1, 2])
        for ids in per_epoch.values():
            self.assertEqual(sorted(ids), ["i%d.jpg" % i for i in range(8)])

    def test_views_are_zero_copy_and_keep_their_memory(self):
        s = sock()
        with Agent(self.tmp, s, "--ranks", "1", "--batch", "2", "--steps", "8",
                   "--max-leases", "2"):
            c = datahelix.Client(s, 0, 1)
            raw = c.next()
            desc = raw.describe()
            whole = np.frombuffer(raw, dtype=np.uint8)
            it = desc["items"][0]
            view = whole[it["offset"]:it["offset"] + it["bytes"]].reshape(it["shape"])
            # zero copy: the array's memory is the batch's, in the agent's shared pool
            self.assertEqual(view.__array_interface__["data"][0], raw.address() + it["offset"])
            before = view.copy()
            self.assertFalse(raw.release())  # a view is alive: given back later
            del whole
            for _ in range(6):  # the agent keeps serving; our batch's memory is not reused
                b = c.next()
                self.assertIsNotNone(b)
                b.release()
                del b
            self.assertTrue(np.array_equal(view, before))
            self.assertFalse(raw.released)
            del view
            self.assertTrue(raw.released)  # the last view went: given back
            c.close()

    def test_torch_tensors_view_the_shared_memory(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed")
        s = sock()
        with Agent(self.tmp, s, "--ranks", "1", "--batch", "4", "--steps", "2"):
            with datahelix.Loader(socket=s, rank=0, world_size=1) as loader:
                for b in loader:
                    t = b["image"][0]
                    self.assertIsInstance(t, torch.Tensor)
                    self.assertEqual(t.dtype, torch.uint8)
                    self.assertEqual(tuple(t.shape), (224, 224, 3))
                    base = b["data"].data_ptr()
                    self.assertTrue(base <= t.data_ptr() < base + b["data"].numel())
                    self.assertEqual(b["status"], [0, 0, 0, 0])

    def test_a_wrong_world_size_is_refused_with_the_reason(self):
        s = sock()
        with Agent(self.tmp, s, "--ranks", "2", "--batch", "4", "--attach-timeout", "2") as agent:
            with self.assertRaises(datahelix.DataHelixError) as ctx:
                datahelix.Client(s, 0, 3, timeout_ms=10000)
            self.assertIn("world size 3", str(ctx.exception))
            self.assertIn("DH_EMISMATCH", str(ctx.exception))
            rc, out, err = agent.wait()
            self.assertNotEqual(rc, 0)
            self.assertIn("0 of 2 ranks attached", err)

    def test_a_dead_agent_is_an_error_not_a_hang(self):
        s = sock()
        with Agent(self.tmp, s, "--ranks", "1", "--batch", "4", "--steps", "0") as agent:
            c = datahelix.Client(s, 0, 1)
            c.next().release()
            agent.p.send_signal(signal.SIGKILL)
            agent.p.wait()
            t0 = time.monotonic()
            with self.assertRaises(datahelix.DataHelixError) as ctx:
                c.next(30000)
            self.assertLess(time.monotonic() - t0, 10)
            self.assertIn("DH_EPEER", str(ctx.exception))

    def test_resume_continues_the_uninterrupted_sequence(self):
        def run(steps, state=None):
            s = sock()
            with Agent(self.tmp, s, "--ranks", "1", "--batch", "4", "--steps", "0",
                       "--policy", "pool"):
                loader = datahelix.Loader(socket=s, rank=0, world_size=1)
                if state:
                    loader.load_state_dict(state)
                ids = []
                for k, b in enumerate(loader):
                    ids.append(b["ids"])
                    if k + 1 == steps:
                        break
                state = loader.state_dict()
                loader.close()
                return ids, state

        whole, _ = run(5)
        first, state = run(3)
        self.assertEqual((state["epoch"], state["step"]), (1, 1))
        rest, _ = run(2, state)
        self.assertEqual(first + rest, whole)
        bad = dict(state, world_size=4)
        with self.assertRaises(datahelix.DataHelixError):
            datahelix.Loader(socket=sock(), rank=0, world_size=1).load_state_dict(bad)


if __name__ == "__main__":
    unittest.main()
