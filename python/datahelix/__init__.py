"""DataHelix for PyTorch trainers: batches served by the node's `datahelix serve`
agent, viewing its shared memory (nothing is copied).

    loader = datahelix.Loader()          # RANK/LOCAL_RANK and WORLD_SIZE from torchrun
    for batch in loader:                 # a dict of tensors (numpy arrays without torch)
        ...
        loader.report_step(batch["step"], seconds)

Each batch dict holds, per modality present ("video", "image", "audio"), a list
of tensors viewing the shared memory (one per media item, shaped as the
preprocessing spec says; uint8 pixels, float32 audio), plus "step", "ids",
"samples", "tokens", "status" (0, or the negative error code of a sample that
failed: its tensors are zeros), "data" (the whole batch as one uint8 view) and
"emulated_compute_s" (the batch's modelled compute time, for emulating an
accelerator on a CPU-only machine).
The batch's memory goes back to the agent when the last tensor viewing it is
garbage-collected, or on batch["release"]() once no view is left.
"""
import os

from ._datahelix import Client, DataHelixError, default_socket

try:
    import torch
except ImportError:  # numpy arrays instead
    torch = None
import numpy as np

__all__ = ["Loader", "Client", "DataHelixError", "default_socket"]

def _views(raw, items):
    """Per-item views of the batch buffer `raw` (a Batch: buffer protocol); items as
    Batch.layout() gives them. Returns the whole batch as one uint8 array and a dict
    type -> list of arrays (tensors with torch)."""
    whole = np.frombuffer(raw, dtype=np.uint8)  # holds `raw` alive while it lives
    out = {}
    for typ, off, nbytes, is_f32, shape in items:
        arr = whole[off:off + nbytes]
        if is_f32:
            arr = arr.view(np.float32)
        arr = arr.reshape(shape)
        if torch is not None:
            arr = torch.from_numpy(arr)  # shares the memory; keeps the array (and raw) alive
        lst = out.get(typ)
        if lst is None:
            out[typ] = [arr]
        else:
            lst.append(arr)
    return whole, out


class _Batches:
    """The iterator: unlike a generator it keeps no reference to the batch it returned, so
    a batch goes back to the agent as soon as the caller drops it (while its step runs),
    not at the next request."""

    def __init__(self, loader, client):
        self._loader, self._client = loader, client

    def __iter__(self):
        return self

    def __next__(self):
        raw = self._client.next()
        if raw is None:
            raise StopIteration
        return self._loader._as_dict(raw)


class Loader:
    """Iterates this rank's batches from the node's agent.

    socket: the agent's socket (default: datahelix.default_socket(), from $DH_JOB).
    rank / world_size: this process's rank among the node's ranks and their count
    (default: LOCAL_RANK or RANK, LOCAL_WORLD_SIZE or WORLD_SIZE).
    """

    def __init__(self, socket=None, rank=None, world_size=None, global_batch=0,
                 manifest_hash=0, spec_hash=0, timeout_ms=60000):
        env = os.environ
        self.socket = socket or default_socket(env.get("DH_JOB"))
        self.rank = int(rank if rank is not None else env.get("LOCAL_RANK", env.get("RANK", 0)))
        self.world_size = int(world_size if world_size is not None else
                              env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", 1)))
        self._opts = dict(global_batch=global_batch, manifest_hash=manifest_hash,
                          spec_hash=spec_hash, timeout_ms=timeout_ms)
        self._resume = None
        self._client = None
        self._epoch_hint = None

    # -- lifecycle -----------------------------------------------------------
    def _connect(self):
        if self._client is None:
            kw = dict(self._opts)
            if self._resume is not None:
                kw.update(resume_epoch=self._resume["epoch"], resume_step=self._resume["step"])
            self._client = Client(self.socket, self.rank, self.world_size, **kw)
        return self._client

    def close(self):
        """Detaches; tensors still alive stay valid (the mapping stays until they die)."""
        if self._client is not None:
            self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- iteration -----------------------------------------------------------
    def __iter__(self):
        return _Batches(self, self._connect())

    def _as_dict(self, raw):
        step, items, samples, ids, tokens, status, emulated = raw.layout()
        whole, batch = _views(raw, items)
        batch.update(step=step, ids=ids, samples=samples, tokens=tokens, status=status,
                     emulated_compute_s=emulated,
                     data=torch.from_numpy(whole) if torch is not None else whole,
                     release=raw.release)
        return batch

    def report_step(self, step, seconds):
        """The compute time this rank measured for a step: feeds the agent's deadlines."""
        self._connect().report_step(int(step), float(seconds))

    # -- epochs and resume -----------------------------------------------------
    def set_epoch(self, epoch):
        """Kept for DistributedSampler-style loops: the agent's order already moves from
        epoch to epoch by itself (a pure function of seed and epoch), so this only checks."""
        self._epoch_hint = int(epoch)

    def state_dict(self):
        """Where a resumed run continues after this rank's last batch."""
        if self._client is None:
            return dict(self._resume or {"epoch": 0, "step": 0})
        return self._client.state()

    def load_state_dict(self, state):
        """Resume at a saved state (before iterating); the agent refuses a state from
        another world size or global batch, or ranks that disagree."""
        if self._client is not None:
            raise DataHelixError(-22, "DH_EINVAL", "load_state_dict must come before iterating")
        if state.get("world_size", self.world_size) != self.world_size:
            raise DataHelixError(-10009, "DH_EMISMATCH",
                                 "the state is from world size %d, this job has %d"
                                 % (state["world_size"], self.world_size))
        if state.get("global_batch") and self._opts["global_batch"] and \
                state["global_batch"] != self._opts["global_batch"]:
            raise DataHelixError(-10009, "DH_EMISMATCH",
                                 "the state is from global batch %d, this job has %d"
                                 % (state["global_batch"], self._opts["global_batch"]))
        self._resume = {"epoch": int(state["epoch"]), "step": int(state["step"])}
