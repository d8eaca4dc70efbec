"""examples/train_ddp.py end to end: a served workload of real H.264 clips, two
torch.distributed (gloo) ranks training on it. Skipped (77) without torch."""
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
    print("torch is not installed for %s: skipping the DDP example test" % sys.executable)
    sys.exit(77)

CLI = os.environ.get("DH_CLI", "datahelix")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class DdpExampleTest(unittest.TestCase):
    def test_two_ranks_train_on_a_served_workload(self):
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
        out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "train_ddp.py"),
                              "--ranks", "2", "--socket", sock],
                             capture_output=True, text=True, env=env, timeout=240)
        if out.returncode:
            agent.kill()
        a_out, a_err = agent.communicate(timeout=90)
        self.assertEqual(out.returncode, 0, out.stderr + a_err)
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertEqual(summary["samples"], 48)  # 24 samples, G = 4: 6 steps an epoch, 2 epochs
        self.assertEqual(summary["steps"], 12)
        self.assertEqual(agent.returncode, 0, a_err)
        self.assertIn("delivered 48 + failed 0 = 48", a_out)


if __name__ == "__main__":
    unittest.main()
