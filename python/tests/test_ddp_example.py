"""examples/train_ddp.py end to end: a served workload of real H.264 clips, two
torch.distributed (gloo) ranks training on it, started by torch.multiprocessing
and by torchrun. Skipped (77) without torch."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import torch  # noqa: F401
except ImportError:
    print("torch is not installed for %s: skipping the DDP example test" % sys.executable)
    sys.exit(77)

CLI = os.environ.get("DH_CLI", "datahelix")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "train_ddp.py")


# Debian 12's torch 1.13 on Python 3.11: torchrun's default "--redirects 0 --tee 0" does not
# parse (Python 3.11 no longer lists the 0-valued member of an IntFlag, so Std.from_str("0")
# gives None and the launcher dies before starting a rank); 1 (stdout) parses.
TORCHRUN_311 = ["--redirects", "1", "--tee", "1"]


def two_agents(tmp, sock):
    """mpirun -np 2 datahelix serve: 4 ranks, 2 a node, G = 4, 2 epochs of tmp's manifest."""
    mpirun = ["mpirun", "--oversubscribe", "--mca", "btl_vader_single_copy_mechanism",
              "none"] + (["--allow-run-as-root"] if os.getuid() == 0 else [])
    return subprocess.Popen(mpirun + ["-np", "2", CLI, "serve", "--manifest",
                                      os.path.join(tmp, "manifest.jsonl"), "--workload",
                                      "kinetics-clips", "--ranks", "4", "--workers", "2",
                                      "--batch", "4", "--epochs", "2", "--socket", sock,
                                      "--attach-timeout", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class DdpExampleTest(unittest.TestCase):
    def train(self, launcher):
        """24 generated clips served to 2 ranks, G = 4, 2 epochs, started by `launcher`
        (a function of the socket and the run's temp dir returning the command)."""
        tmp = tempfile.mkdtemp(prefix="dhddp")
        self.addCleanup(shutil.rmtree, tmp, True)
        subprocess.run([CLI, "gen", "--workload", "kinetics-clips", "--out", tmp, "--samples",
                        "24"], check=True, stdout=subprocess.DEVNULL)
        sock = "@dh-ddp-%d" % os.getpid()
        agent = subprocess.Popen([CLI, "serve", "--manifest", os.path.join(tmp, "manifest.jsonl"),
                                  "--workload", "kinetics-clips", "--ranks", "2", "--workers",
                                  "2", "--batch", "4", "--epochs", "2", "--socket", sock,
                                  "--attach-timeout", "60"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        env = dict(os.environ, DH_PYTHONPATH=os.environ.get("PYTHONPATH", ""))
        out = subprocess.run(launcher(sock, tmp), capture_output=True, text=True, env=env,
                             timeout=240, cwd=tmp)
        if out.returncode:
            agent.kill()
        a_out, a_err = agent.communicate(timeout=90)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr + a_err)
        line = [x for x in out.stdout.splitlines() if '"loader"' in x][-1]
        summary = json.loads(line[line.index("{"):])  # torchrun prefixes "[default0]:"
        self.assertEqual(summary["samples"], 48)  # 24 samples, G = 4: 6 steps an epoch, 2 epochs
        self.assertEqual(summary["steps"], 12)
        self.assertEqual(agent.returncode, 0, a_err)
        self.assertIn("delivered 48 + failed 0 = 48", a_out)

    def test_two_nodes_under_mpirun(self):
        """Two agents (mpirun -np 2 datahelix serve), each serving its node's 2 of 4 gloo
        ranks; node 0 reports the whole run."""
        if not shutil.which("mpirun"):
            self.skipTest("mpirun is not installed (apt-get install openmpi-bin)")
        tmp = tempfile.mkdtemp(prefix="dhddp")
        self.addCleanup(shutil.rmtree, tmp, True)
        subprocess.run([CLI, "gen", "--workload", "kinetics-clips", "--out", tmp, "--samples",
                        "24"], check=True, stdout=subprocess.DEVNULL)
        sock = "@dh-ddp-%d-%%n" % os.getpid()
        agents = two_agents(tmp, sock)
        import datahelix
        refused = None  # rank 3 is node 1's: node 0's agent refuses it, with the reason
        for _ in range(100):
            try:
                datahelix.Client(sock.replace("%n", "0"), 3, 4, timeout_ms=10000)
            except datahelix.DataHelixError as e:
                refused = str(e)
                if "belongs to node" in refused:
                    break
                time.sleep(0.1)  # not listening yet
        self.assertIn("rank 3 belongs to node 1; this agent is node 0 and serves ranks 0..1",
                      refused)
        env = dict(os.environ, DH_PYTHONPATH=os.environ.get("PYTHONPATH", ""))
        out = subprocess.run([sys.executable, EXAMPLE, "--ranks", "4", "--ranks-per-node", "2",
                              "--socket", sock], capture_output=True, text=True, env=env,
                             timeout=300, cwd=tmp)
        if out.returncode:
            agents.kill()
        a_out, a_err = agents.communicate(timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr + a_err)
        summary = json.loads([x for x in out.stdout.splitlines() if '"loader"' in x][-1])
        self.assertEqual(summary["samples"], 48)
        self.assertEqual(agents.returncode, 0, a_err)
        self.assertIn("R=4 W=2 on 2 nodes", a_out)
        self.assertIn("delivered 48 + failed 0 = 48", a_out)
        self.assertEqual(a_out.count("makespan"), 2)  # one result (two lines name it), node 0's
        for rank in range(4):  # every rank attached to its own node's agent
            self.assertIn("rank %d attached" % rank, a_err)

    def test_two_nodes_of_two_torchrun_ranks_with_loader_defaults(self):
        """mpirun -np 2 datahelix serve, and one torchrun per node (--nnodes 2 --node_rank k)
        whose ranks call Loader() with no argument: global RANK / WORLD_SIZE, the node's
        agent from DH_SOCKET. Both epochs trained (32 samples), both agents exit 0 with node
        0's accounting of the whole run (the mpirun tests check exactly-once by CRC)."""
        if not shutil.which("mpirun"):
            self.skipTest("mpirun is not installed (apt-get install openmpi-bin)")
        tmp = tempfile.mkdtemp(prefix="dhddp")
        self.addCleanup(shutil.rmtree, tmp, True)
        subprocess.run([CLI, "gen", "--workload", "kinetics-clips", "--out", tmp, "--samples",
                        "16"], check=True, stdout=subprocess.DEVNULL)
        sock = "@dh-2x2-%d-%%n" % os.getpid()
        agents = two_agents(tmp, sock)
        port = str(29500 + (os.getpid() + 7) % 1000)
        nodes = []
        for n in range(2):
            env = dict(os.environ, DH_PYTHONPATH=os.environ.get("PYTHONPATH", ""),
                       DH_SOCKET=sock.replace("%n", str(n)))
            nodes.append(subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run"] + TORCHRUN_311 +
                ["--log_dir", os.path.join(tmp, "logs%d" % n), "--nnodes", "2", "--node_rank",
                 str(n), "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                 "--master_port", port, EXAMPLE, "--torchrun", "--no-model"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp))
        outs = [p.communicate(timeout=300) for p in nodes]
        if any(p.returncode for p in nodes):
            agents.kill()
        a_out, a_err = agents.communicate(timeout=120)
        for p, (out, err) in zip(nodes, outs):
            self.assertEqual(p.returncode, 0, out[-2000:] + err[-2000:] + a_err)
        line = [x for out, _ in outs for x in out.splitlines() if '"loader"' in x][-1]
        summary = json.loads(line[line.index("{"):])
        self.assertEqual(summary["samples"], 32)  # 16 samples, G = 4: 4 steps an epoch, 2 epochs
        self.assertEqual(agents.returncode, 0, a_err)
        self.assertIn("delivered 32 + failed 0 = 32", a_out)
        for rank in range(4):
            self.assertIn("rank %d attached" % rank, a_err)

    def test_two_ranks_train_on_a_served_workload(self):
        self.train(lambda sock, tmp: [sys.executable, EXAMPLE, "--ranks", "2", "--socket", sock])

    def test_ranks_started_by_torchrun(self):
        self.train(lambda sock, tmp: [sys.executable, "-m", "torch.distributed.run"] +
                   TORCHRUN_311 + ["--log_dir", os.path.join(tmp, "logs"), "--nproc_per_node",
                                   "2", EXAMPLE, "--torchrun", "--socket", sock])


    def test_a_video_caption_model_trains_on_shards_by_both_loaders(self):
        """--objective caption on WebDataset shards (gen --format wds): fed by serve (the
        captions in the batch), then by the DataLoader reading each member by its byte
        range; both train every sample of 2 epochs and report a finite contrastive loss.
        Captions missing (a manifest without text) stop the job, named."""
        tmp = tempfile.mkdtemp(prefix="dhddp")
        self.addCleanup(shutil.rmtree, tmp, True)
        subprocess.run([CLI, "gen", "--workload", "webvid-caption", "--out", tmp, "--samples",
                        "16", "--format", "wds", "--per-shard", "4"], check=True,
                       stdout=subprocess.DEVNULL)
        manifest = os.path.join(tmp, "manifest.jsonl")
        env = dict(os.environ, DH_PYTHONPATH=os.environ.get("PYTHONPATH", ""))

        def serve(m):
            sock = "@dh-cap-%d" % os.getpid()
            return sock, subprocess.Popen(
                [CLI, "serve", "--manifest", m, "--workload", "webvid-caption", "--ranks",
                 "2", "--workers", "2", "--batch", "4", "--epochs", "2", "--socket", sock,
                 "--attach-timeout", "60"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        sock, agent = serve(manifest)
        runs = [subprocess.run([sys.executable, EXAMPLE, "--ranks", "2", "--socket", sock,
                                "--objective", "caption"], capture_output=True, text=True,
                               env=env, timeout=240, cwd=tmp)]
        a_out, a_err = agent.communicate(timeout=90)
        self.assertEqual(runs[0].returncode, 0, runs[0].stdout + runs[0].stderr)
        self.assertIn("delivered 32 + failed 0 = 32", a_out, a_err)
        runs.append(subprocess.run([sys.executable, EXAMPLE, "--ranks", "2", "--loader",
                                    "torch", "--manifest", manifest, "--frames", "8",
                                    "--batch", "4", "--objective", "caption"],
                                   capture_output=True, text=True, env=env, timeout=240,
                                   cwd=tmp))
        for out, loader in zip(runs, ("datahelix", "torch")):
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            summary = json.loads([x for x in out.stdout.splitlines() if '"loader"' in x][-1])
            self.assertEqual((summary["loader"], summary["samples"], summary["objective"]),
                             (loader, 32, "caption"))
            self.assertTrue(0 < summary["loss_first"] < 100 and 0 < summary["loss_last"] < 100)
        # the same clips without their captions: the job stops, naming a sample
        bare = os.path.join(tmp, "bare.jsonl")
        with open(manifest) as f, open(bare, "w") as g:
            for line in f:
                row = json.loads(line)
                row.pop("text")
                g.write(json.dumps(row) + "\n")
        sock, agent = serve(bare)
        out = subprocess.run([sys.executable, EXAMPLE, "--ranks", "2", "--socket", sock,
                              "--objective", "caption"], capture_output=True, text=True,
                             env=env, timeout=240, cwd=tmp)
        agent.kill()
        agent.communicate(timeout=60)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("--objective caption: sample shards/0000", out.stderr)
        self.assertIn("has no caption", out.stderr)


if __name__ == "__main__":
    unittest.main()
