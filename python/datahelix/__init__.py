"""DataHelix for PyTorch trainers: batches served by the node's `datahelix serve`
agent, viewing its shared memory (nothing is copied).

    loader = datahelix.Loader()          # RANK and WORLD_SIZE from torchrun
    for epoch in range(start_epoch, epochs):
        loader.set_epoch(epoch)          # checked against the agent's order
        for batch in loader:             # one epoch of this rank's batches
            ...
            loader.report_step(batch["step"], seconds)

Each batch dict holds, per modality ("video", "image", "audio"), a list of
tensors viewing the shared memory (one per media item, shaped as the
preprocessing spec says; uint8 pixels, float32 audio; empty when the batch
holds no item of that modality: every key is in every batch), plus "step" (the global
step, counted from the start of training, also after a resume; "global_step"
is the same number), "epoch", "epoch_step" (the step within its epoch), "ids",
"samples", "tokens", "status" (0, or the negative error code of a sample that
failed: its tensors are zeros; datahelix.error_name(code) gives its name and
sentence), "text" (each sample's text, a str, or None: the
manifest's "text", a shard's .txt member), "label" (an int64 tensor of each
sample's label, datahelix.NO_LABEL where it has none: "label", a shard's .cls),
"meta" (each sample's meta object as a dict, or None: the manifest's "meta", a
shard's .json member; parsed when first read), "draws" (per modality, per item in
batch["items"][type]'s order, what the spec's random augmentation drew: the crop
rectangle, the flip, the clip's or audio window's start and length, a video's sampled
frame indices; _Draws below), "item_sample" (per modality, the
position in the batch of each of its tensors' sample: batch["video"][j] belongs
to the sample batch["ids"][k], batch["text"][k], k = batch["item_sample"]
["video"][j]; a sample without video, or with two, makes the lists differ), "pad" (True for a duplicate that
fills up an epoch's last batch when the agent keeps it: --keep-last), "data"
(the whole batch as one uint8 view) and
"emulated_compute_s" (the batch's modelled compute time, for emulating an
accelerator on a CPU-only machine).
The batch's memory goes back to the agent when the last tensor viewing it is
garbage-collected, or on batch["release"]() once no view is left.
"""
import collections.abc
import json
import os
import sys
import time
import threading
import warnings

from ._datahelix import Client, default_socket, error_code, error_name
from ._errors import DataHelixError, DataHelixTimeout, Mismatch, PeerLost, make as _error

try:
    import torch
except ImportError:  # numpy arrays instead
    torch = None
try:
    import numpy as np
except ImportError as e:  # a user's `python3` was another interpreter than Debian's
    raise ImportError("datahelix needs numpy, which this interpreter (%s) lacks: run the one "
                      "your numpy and torch are installed for (Debian's python3-numpy and "
                      "python3-torch: /usr/bin/python3)" % sys.executable) from e

__all__ = ["Loader", "Client", "DataHelixError", "DataHelixTimeout", "PeerLost", "Mismatch",
           "default_socket", "error_name", "error_code", "NO_LABEL"]

# batch["label"] of a sample without a label (the manifest's "label", a shard's .cls).
NO_LABEL = -(1 << 63)



def _fail(name, message):
    """The DataHelixError (or subclass) of the C library's error `name`, with a sentence."""
    return _error(error_code(name), name, message)



class _Metas(collections.abc.Sequence):
    """batch["meta"]: each sample's meta object (a dict) or None, parsed from its JSON text
    when first read (a video2dataset .json holds kilobytes of ffprobe output that most loops
    never look at)."""

    __slots__ = ("_texts", "_parsed")

    def __init__(self, texts):
        self._texts = texts
        self._parsed = [None] * len(texts)

    def __len__(self):
        return len(self._texts)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        text = self._texts[k]
        if text is None:
            return None
        if self._parsed[k] is None:
            self._parsed[k] = json.loads(text)
        return self._parsed[k]

    def __repr__(self):
        return repr(list(self))


MODALITIES = ("video", "image", "audio")  # a batch's keys for them: each in every batch


class _Draws(collections.abc.Mapping):
    """batch["draws"]: type -> per item (in batch["items"][type]'s order) what the spec's
    random augmentation drew for it, as a dict built when first read. Video and image:
    "crop" (x, y, w, h in source pixels: the rectangle scaled to the output) and "flip"
    (mirrored left to right); video also "start_s" and "span_s" (the clip the frames come
    from, seconds), "first_frame", "frame_span" and "frames" (the source frame indices
    sampled); audio: "start_s" and "span_s" (the window).
    Without random keys each is the plain draw (centred clip, the resize's own crop, no
    flip). docs/SPEC.md, "Random augmentation"."""

    __slots__ = ("_items", "_raw", "_built")

    def __init__(self, items, raw):
        self._items, self._raw, self._built = items, raw, {}

    def _build(self, typ):
        out = []
        for (t, _off, _n, _f32, shape, _k), d in zip(self._items, self._raw):
            if t != typ:
                continue
            first, span, start, length, crop, flip = d
            if typ == "audio":
                entry = {"start_s": start, "span_s": length}
            else:
                entry = {"crop": crop, "flip": flip}
            if typ == "video":
                count = shape[0]  # frame k is the centre of the k-th of count equal parts
                entry.update(start_s=start, span_s=length, first_frame=first, frame_span=span,
                             frames=[first + (2 * k + 1) * span // (2 * count)
                                     for k in range(count)])
            out.append(entry)
        return out

    def __getitem__(self, typ):
        if typ not in self._built:
            if typ not in self:
                raise KeyError(typ)
            self._built[typ] = self._build(typ)
        return self._built[typ]

    def __iter__(self):
        return iter(dict.fromkeys(MODALITIES + tuple(t for t, *_ in self._items)))

    def __len__(self):
        return len(list(iter(self)))

    def __contains__(self, typ):
        return typ in MODALITIES or any(t == typ for t, *_ in self._items)

    def __repr__(self):
        return repr(dict(self))


def _stacked(whole, entries):
    """One [N, ...] view of a type's N items (entries: (off, nbytes, is_f32, shape)), when
    they share shape and dtype and lie at equal distances in the batch (the agent lays a
    type's items out together): strided over `whole`, nothing copied. None otherwise."""
    off0, nbytes, is_f32, shape = entries[0]
    step = entries[1][0] - off0 if len(entries) > 1 else nbytes
    size = 4 if is_f32 else 1
    if step < nbytes or step % size or off0 % size:
        return None
    for i, (off, n, f32, shp) in enumerate(entries):
        if off != off0 + i * step or n != nbytes or f32 != is_f32 or shp != shape:
            return None
    span = whole[off0:off0 + (len(entries) - 1) * step + nbytes]
    if is_f32:
        span = span.view(np.float32)
    inner = span[:nbytes // size].reshape(shape).strides  # one item's, as its own view has
    return np.lib.stride_tricks.as_strided(span, shape=(len(entries),) + tuple(shape),
                                           strides=(step,) + inner, writeable=False)


def _views(raw, items, collate_samples=None):
    """Per-item views of the batch buffer `raw` (a Batch: buffer protocol); items as
    Batch.layout() gives them. Returns the whole batch as one uint8 array (tensor) and a dict
    type -> list of arrays (tensors with torch), with "item_sample": type -> the position
    of each of those tensors' sample in the batch, and "items": type -> that list again.
    collate_samples (the batch's B, or None: no collation): a type whose N items have one
    shape and dtype (the agent lays a type's items out together, so they then lie at equal
    distances) is one [N, ...] view instead of the list; item_sample says whose each is.

    The batch's memory is mapped read-only in this process (no trainer can write into
    another rank's batch): numpy views say so; torch's cannot, and its warning about that
    is silenced here. A tensor to change in place: t.clone()."""
    whole = np.frombuffer(raw, dtype=np.uint8)  # holds `raw` alive while it lives
    out = {typ: [] for typ in MODALITIES}  # every modality's key, in every batch
    owner = {typ: [] for typ in MODALITIES}
    where = {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for typ, off, nbytes, is_f32, shape, k in items:
            owner.setdefault(typ, []).append(k)
            where.setdefault(typ, []).append((off, nbytes, is_f32, tuple(shape)))
            arr = whole[off:off + nbytes]
            if is_f32:
                arr = arr.view(np.float32)
            arr = arr.reshape(shape)
            if torch is not None:
                arr = torch.from_numpy(arr)  # shares the memory; keeps the array alive
            out.setdefault(typ, []).append(arr)
        per_item = dict(out)
        for typ in list(where) if collate_samples else []:
            st = _stacked(whole, where[typ])  # None when ragged (shapes differ)
            if st is not None:
                out[typ] = torch.from_numpy(st) if torch is not None else st
        data = torch.from_numpy(whole) if torch is not None else whole
    out["item_sample"] = owner
    out["items"] = per_item
    return data, out


def _env_int(env, *names, default):
    for name in names:
        if env.get(name) not in (None, ""):
            return int(env[name])
    return default


class _Batches:
    """The iterator of one epoch (or of the whole run when endless): unlike a generator it
    keeps no reference to the batch it returned, so a batch goes back to the agent as soon
    as the caller drops it (while its step runs), not at the next request."""

    def __init__(self, loader, client, until):
        self._loader, self._client, self._until = loader, client, until
        self._start = loader._taken
        # one thread iterates a Loader: the first that takes a batch of this loop (an
        # iterator made in one thread and handed to a prefetching thread is that thread's)
        self._thread = None

    def unfinished(self):
        """True when this epoch's iterator took batches, but not all of them."""
        taken = self._loader._taken
        return self._until is not None and self._start < taken < self._until and \
            not self._loader._ended

    def __iter__(self):
        return self

    def __next__(self):
        loader = self._loader
        me = threading.current_thread()
        if self._thread is None:
            self._thread = me
        if me is not self._thread:
            raise _fail("DH_EBUSY", "this loop over the Loader belongs to thread %r: one "
                        "thread iterates a Loader (another thread's batches would be skipped "
                        "or taken out of order)" % self._thread.name)
        if self._until is not None and loader._taken >= self._until:
            self._last_step_done()
            raise StopIteration
        raw = self._client.next()
        if raw is None:
            loader._ended = True
            self._last_step_done()
            raise StopIteration
        loader._taken = raw.step - loader._run["step_base"] + 1
        self._last = (raw.step, time.monotonic())
        return loader._as_dict(raw)

    def _last_step_done(self):
        """The loop ended: its last batch's step is over, though the loop variable still
        holds the batch (until `del` or the next loop) through an evaluation or a
        checkpoint. Its compute time is told to the agent now, as the caller would, so that
        the hold is not taken for compute (a validation pass's model error read 48,000%)."""
        last, self._last = getattr(self, "_last", None), None
        if last is None or self._loader._reported == last[0]:
            return
        try:
            self._client.report_step(last[0], time.monotonic() - last[1])
        except DataHelixError:
            pass  # the agent is gone or the run over: nothing to tell


class Loader:
    """Iterates this rank's batches from its node's agent, one epoch per `for` loop.

    socket: the agent's socket (default: $DH_SOCKET, else datahelix.default_socket() from
    $DH_JOB); `%n` in it is this rank's node (GROUP_RANK as torchrun sets it, else rank //
    LOCAL_WORLD_SIZE), as the agents' `serve --socket NAME%n` names theirs.
    rank / world_size: this process's global rank and the job's world size (default: RANK
    and WORLD_SIZE as torchrun sets them, else LOCAL_RANK and LOCAL_WORLD_SIZE, else 0 and 1);
    on several nodes each agent serves its node's ranks and names them when a rank comes to
    the wrong one.
    endless: iterate the whole run at once instead of one epoch per loop.
    stream: which of the agent's streams to take (`datahelix serve ... --stream val ...`;
    default: its first, the one its options before any --stream describe). Each Loader of a
    stream is its own attach: a training script holds one per stream (say "train" and
    "val"), and every rank must hold the same ones.
    timeout_ms: how long one batch may take. attach_timeout_ms: how long to wait for every
    rank to attach (default: as long as the agent waits, see its --attach-timeout).
    collate: batch[type] is one [N, ...] tensor of a type's N items when they have one shape
    (fixed sizes, crops), viewing the shared memory (strided: nothing copied); N is the
    batch's B when every sample has one such item, and batch["item_sample"][type][j] is the
    sample of item j either way (a mixed dataset: samples without an image, or with two). A
    type whose shapes differ stays the list of per-item tensors; batch["items"][type] is
    always that list. collate="strict": the same, but a type whose shapes differ raises
    ValueError naming them instead of coming back as a list (fps sampling, a video shorter
    than its clip, audio lengths).
    """

    def __init__(self, socket=None, rank=None, world_size=None, global_batch=0,
                 manifest_hash=0, spec_hash=0, timeout_ms=60000, attach_timeout_ms=0,
                 endless=False, stream=None, collate=False):
        env = os.environ
        self.socket = socket or env.get("DH_SOCKET") or default_socket(env.get("DH_JOB"))
        self.rank = int(rank) if rank is not None else \
            _env_int(env, "RANK", "LOCAL_RANK", default=0)
        self.world_size = int(world_size) if world_size is not None else \
            _env_int(env, "WORLD_SIZE", "LOCAL_WORLD_SIZE", default=1)
        if "%n" in self.socket:  # the agents' `--socket NAME%n`: this rank's node
            node = _env_int(env, "GROUP_RANK", default=None)
            per = _env_int(env, "LOCAL_WORLD_SIZE", default=None)
            if node is None and per is None:
                raise ValueError("socket %r names a node (%%n), but neither GROUP_RANK nor "
                                 "LOCAL_WORLD_SIZE says which (torchrun sets both): give the "
                                 "socket of this rank's node" % self.socket)
            self.socket = self.socket.replace("%n", str(node if node is not None
                                                        else self.rank // per))
        self.endless = bool(endless)
        self.stream = stream
        if collate not in (False, True, "strict"):
            raise ValueError("collate: expected False, True or \"strict\", got %r" % (collate,))
        self.collate = collate
        self._opts = dict(global_batch=global_batch, manifest_hash=manifest_hash,
                          spec_hash=spec_hash, timeout_ms=timeout_ms,
                          attach_timeout_ms=attach_timeout_ms, stream=stream)
        self._resume = None
        self._client = None
        self._run = None
        self._taken = 0      # batches of the agent's run this rank took
        self._ended = False  # the agent said the run is over
        self._reported = None  # the last step whose compute time the caller reported
        self._iter = None    # the last epoch iterator handed out
        self._warned_skip = False  # a loop left early was told of (once)

    # -- lifecycle -----------------------------------------------------------
    def _connect(self):
        if self._client is None:
            kw = dict(self._opts)
            r = self._resume
            if r is not None:
                kw.update(resume_epoch=r["epoch"], resume_step=r["step"])
                if r.get("seed") is not None:
                    kw["resume_seed"] = int(r["seed"])
                if r.get("global_batch"):
                    kw["resume_global_batch"] = int(r["global_batch"])
                if r.get("shift"):
                    kw["resume_shift"] = int(r["shift"])
                if r.get("global_step") is not None:
                    kw["resume_global_step"] = int(r["global_step"])
                if r.get("order"):
                    kw["resume_order"] = r["order"]
                # The state's manifest and spec must be the agent's, unless the caller
                # names its own.
                for key in ("manifest_hash", "spec_hash"):
                    if not kw[key] and r.get(key):
                        kw[key] = int(r[key])
            client = Client(self.socket, self.rank, self.world_size, **kw)
            run = client.run()
            if run["max_leases"] < 2:
                why = ("the agent lets a rank hold %d batch at once (--max-leases %d), but "
                       "`for batch in loader` holds its batch while it takes the next: serve "
                       "with --max-leases 2 or more" % (run["max_leases"], run["max_leases"]))
                client.abort("DH_ELIMIT: " + why)
                raise _fail("DH_ELIMIT", why)
            self._client, self._run = client, run
        return self._client

    def close(self):
        """Detaches; tensors still alive stay valid (the mapping stays until they die).
        Leaving before the agent's run is over ends the job for every rank: the agent names
        this rank to the others and exits non-zero (an endless run excepted)."""
        if self._client is not None:
            self._client.close()

    def __enter__(self):
        return self

    def abort(self, why=None):
        """Leaves as a failed rank: the agent treats this rank as dead (it stops the run, or
        waits for the job to restart with --on-rank-exit wait), not as one that finished, and
        prints `why` (at most 200 characters, ASCII). Leaving the `with` block on an exception
        does this, with the exception's type and message as why (not on sys.exit(0), which
        closes as the block's end does)."""
        if self._client is not None:
            self._client.abort(why)

    def __exit__(self, exc_type, exc, tb):
        # sys.exit(0) (or exit()) is a process ending on purpose, as after a checkpoint: it
        # leaves (a user's trial saw "rank 1 failed ..., its trainer says: SystemExit: 0")
        if exc_type is None or (issubclass(exc_type, SystemExit) and exc.code in (None, 0)):
            self.close()
        else:
            text = str(exc).splitlines()[0] if str(exc) else ""
            self.abort(f"{exc_type.__name__}: {text}" if text else exc_type.__name__)
        return False

    # -- what the agent runs ---------------------------------------------------
    @property
    def steps_per_epoch(self):
        """Global batches in an epoch (the incomplete tail dropped); attaches if needed."""
        self._connect()
        return self._run["steps_per_epoch"]

    @property
    def global_batch(self):
        """The agent's global batch G (its --batch): samples a step over every rank; a rank's
        own batch may hold fewer or more (helix deals them by cost); attaches if needed."""
        self._connect()
        return self._run["global_batch"]

    @property
    def order(self):
        """The agent's sample order (its --order): "uniform" or "stratified"; a saved state
        resumes only with its own; attaches if needed."""
        self._connect()
        return self._run["order"]

    def _position(self, taken):
        """(epoch, step within it) of the run's batch number `taken` (the library's reading:
        the run's first epoch may start part-way after a resume)."""
        return self._client.position(self._run["step_base"] + taken)

    def _next_loop(self):
        """Where the next `for` loop starts (in batches of the agent's run): here, or past the
        rest of an epoch a loop left early (break, an exception), which it skips."""
        it = self._iter
        return it._until if it is not None and it.unfinished() else self._taken

    @property
    def epoch(self):
        """The epoch the next loop iterates; attaches if needed."""
        self._connect()
        return self._position(self._next_loop())[0]

    @property
    def epochs(self):
        """The epoch the agent's job ends before (its --epochs, counted from the start of
        training, also after a resume: `for epoch in range(loader.epoch, loader.epochs)`), or
        None when it is endless (--steps 0) or ends part-way into an epoch (--steps N);
        attaches if needed."""
        self._connect()
        steps = self._run["steps"]
        if steps <= 0:
            return None
        epoch, step = self._position(steps - 1)
        return epoch + 1 if step == self._run["steps_per_epoch"] - 1 else None

    def __len__(self):
        """Batches of this rank in one epoch (each rank takes one batch per global step). The
        first epoch after a resume yields fewer: the rest of it. Attaches if needed, so call
        load_state_dict before."""
        return self.steps_per_epoch

    # -- iteration -----------------------------------------------------------
    def __iter__(self):
        it = self._iter
        busy = it is not None and (it.unfinished() or (it._until is None and not self._ended))
        if busy and it._thread is not None and it._thread is not threading.current_thread() \
                and it._thread.is_alive():
            raise _fail("DH_EBUSY", "thread %r is still iterating this Loader: one thread "
                        "iterates a Loader (a loop started here would skip the rest of its "
                        "epoch)" % it._thread.name)
        client = self._connect()
        if self.endless:
            self._iter = _Batches(self, client, None)
            return self._iter
        self._skip_left_epoch(client)
        self._check_not_over(self.epoch)
        epoch_step = self._position(self._taken)[1]
        # this epoch's last batch: its rest from here
        self._iter = _Batches(self, client,
                              self._taken + self._run["steps_per_epoch"] - epoch_step)
        return self._iter

    def _skip_left_epoch(self, client):
        """A loop left early (break, an exception) leaves the rest of its epoch unread: as a
        DataLoader's new iterator starts a new epoch, the next loop starts at the next one.
        The skipped batches are taken and given straight back (every rank skips alike)."""
        it, self._iter = self._iter, None
        first = self._taken
        while it is not None and it.unfinished():
            raw = client.next()
            if raw is None:
                self._ended = True
                break
            self._taken = raw.step - self._run["step_base"] + 1
            raw.release()
        if self._taken > first and self.world_size > 1 and not self._warned_skip:
            # Every rank must skip alike; one that does alone trains on other steps than
            # the others (user trial 3 of issue 22: silent, or blamed on another rank).
            # Told once per Loader: ranks that all leave at the same step do it on purpose.
            self._warned_skip = True
            base = self._run["step_base"]
            epoch = self._position(first)[0]
            warnings.warn(
                "datahelix: rank %d left its loop over epoch %d early; the next loop starts "
                "epoch %d, skipping steps %d..%d (unless every rank leaves its loop at the same "
                "step, the ranks now train on different steps; said once per Loader)"
                % (self.rank, epoch, epoch + 1, base + first, base + self._taken - 1),
                RuntimeWarning, stacklevel=3)

    def _check_not_over(self, epoch):
        """Raises when the agent's job has no batch left (for `epoch`)."""
        run = self._run
        end = run["steps"] if run["steps"] >= 0 else None  # batches of the agent's run
        if self._ended or (end is not None and self._taken >= end):
            raise _fail(
                "DH_EINVAL",
                "the agent's job%s ends at step %d: no batch is left for epoch %d; start the "
                "agent with more --epochs or --steps%s (or stop iterating)"
                % (" (stream %s)" % self.stream if self.stream else "",
                   run["step_base"] + self._taken, epoch,
                   " after --stream %s" % self.stream if self.stream else ""))

    def _as_dict(self, raw):
        step, items, samples, ids, tokens, status, emulated, pad = raw.layout()
        texts, labels, metas = raw.texts()
        draws = _Draws(items, raw.draws())
        whole, batch = _views(raw, items, len(samples) if self.collate else None)
        if self.collate == "strict":
            for typ, tensors in batch["items"].items():
                if tensors and batch[typ] is tensors:  # still the list (of some items)
                    shapes = sorted({(tuple(t.shape), str(t.dtype)) for t in tensors})
                    why = ("differ in shape: %s%s" % ([s for s, _ in shapes[:3]],
                                                      " ..." if len(shapes) > 3 else "")
                           if len(shapes) > 1 else
                           "are not evenly spaced in the batch's memory (samples it gave to "
                           "another node left holes)")
                    raise ValueError("collate=\"strict\": batch %d's %s items %s"
                                     % (step, typ, why))
        epoch, epoch_step = self._position(step - self._run["step_base"])
        label = np.array([NO_LABEL if v is None else v for v in labels], dtype=np.int64)
        batch.update(step=step, global_step=step, epoch=epoch, epoch_step=epoch_step,
                     ids=ids, samples=samples, tokens=tokens, status=status, pad=pad,
                     text=texts, label=torch.from_numpy(label) if torch is not None else label,
                     meta=_Metas(metas), draws=draws,
                     emulated_compute_s=emulated,
                     data=whole,
                     release=raw.release)
        return batch

    def report_step(self, step, seconds):
        """The compute time this rank measured for a step (batch["step"]): feeds the
        agent's deadlines."""
        client = self._connect()
        self._reported = int(step)
        try:
            client.report_step(int(step), float(seconds))
        except PeerLost:
            try:  # the agent closed the connection: its last word says why, if it said one
                client.next(0)
            except DataHelixError as why:
                raise _error(why.code, why.name, "cannot report step %d: %s"
                             % (step, why.message)) from None
            raise

    # -- epochs and resume -----------------------------------------------------
    def set_epoch(self, epoch):
        """Says which epoch the next loop iterates, as with DistributedSampler. The agent's
        order is a pure function of (manifest, seed, epoch), so this checks that this rank
        is where the caller thinks: a different epoch (a loop that does not match the agent's
        job, or a state not restored) is refused with both numbers. Attaches if needed."""
        epoch = int(epoch)
        self._connect()
        self._check_not_over(epoch)
        at, in_epoch = self._position(self._next_loop())  # (self.epoch's reading)
        if epoch != at:
            # after a restored state the loop is where the state says (a user trial read "step
            # 8, of epoch 1" as a step past a 5-step epoch, and was told to restore it again)
            hint = ("it resumed there from the saved state: loop over range(loader.epoch, "
                    "loader.epochs)" if self._resume is not None else
                    "restore the saved state with load_state_dict before iterating, or loop "
                    "over the epochs the agent serves")
            raise _fail(
                "DH_EMISMATCH",
                "set_epoch(%d), but this rank's next loop is epoch %d from its step %d (global "
                "step %d; %d steps an epoch): %s" % (
                    epoch, at, in_epoch, self._run["step_base"] + self._next_loop(),
                    self._run["steps_per_epoch"], hint))

    def state_dict(self):
        """Where a resumed job continues after this rank's last batch: epoch, step (within
        that epoch; batch["step"] is the global step, here global_step), and the shift of an
        epoch resumed at another global batch; with what it must match: manifest_hash,
        spec_hash, seed, order (the agent's --order); global_batch says how to read step;
        world_size is informative."""
        if self._client is None:
            return dict(self._resume or {"epoch": 0, "step": 0})
        return self._client.state()

    def load_state_dict(self, state):
        """Resume at a saved state (before iterating). The agent refuses a state from another
        manifest, spec, seed or --order, or ranks that disagree; the world size and the global
        batch may change: the job goes on at the first sample the saved one had not
        consumed."""
        if self._client is not None:
            raise _fail("DH_EINVAL", "load_state_dict must come before iterating (or len, "
                        "set_epoch)")
        try:
            resume = {"epoch": int(state["epoch"]), "step": int(state["step"])}
        except (KeyError, TypeError, ValueError):
            raise _fail("DH_EINVAL", "not a DataHelix state (it needs 'epoch' and 'step'): "
                        "%r" % (state,)) from None
        for key in ("manifest_hash", "spec_hash", "seed", "global_batch", "world_size",
                    "shift", "global_step"):
            if state.get(key) is not None:
                resume[key] = int(state[key])
        # A state saved before states said their order says none: it is the uniform order's
        # (the only one then), which an agent of --order stratified refuses.
        order = state.get("order") or "uniform"
        if order not in ("uniform", "stratified"):
            raise _fail("DH_EINVAL", "not a DataHelix state: its order is %r (uniform or "
                        "stratified)" % (order,))
        resume["order"] = order
        self._resume = resume
