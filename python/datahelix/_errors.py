"""DataHelix's exceptions. Every error the binding or the Loader raises is a DataHelixError
(a RuntimeError) carrying the C library's code: e.code (negative int), e.name ("DH_EPEER")
and e.message (the sentence); e.args is (code, name, message). Three kinds a training loop
may want to tell apart have their own subclass:

    DataHelixTimeout   DH_ETIMEDOUT  nothing came in time (the agent, the other ranks)
    PeerLost           DH_EPEER      the agent, or another rank, died or left
    Mismatch           DH_EMISMATCH  trainer and agent disagree (world size, manifest,
                                     spec, a saved state, an epoch)

The C extension builds its exceptions with make(); nothing here knows the codes' values
(they are the C library's: datahelix.error_code(name))."""


class DataHelixError(RuntimeError):
    """An error of DataHelix: .code, .name, .message (args: (code, name, message))."""

    @property
    def code(self):
        return self.args[0] if self.args else 0

    @property
    def name(self):
        return self.args[1] if len(self.args) > 1 else ""

    @property
    def message(self):
        return self.args[2] if len(self.args) > 2 else ""

    def __str__(self):
        if len(self.args) == 3:
            return "%s: %s" % (self.args[1], self.args[2])
        return super().__str__()


class DataHelixTimeout(DataHelixError):
    """DH_ETIMEDOUT: nothing came in time (a batch, the other ranks' attach)."""


class PeerLost(DataHelixError):
    """DH_EPEER: the agent or another rank died, disconnected or left before the end."""


class Mismatch(DataHelixError):
    """DH_EMISMATCH: the trainer and the agent disagree (what the sentence names)."""


_BY_NAME = {"DH_ETIMEDOUT": DataHelixTimeout, "DH_EPEER": PeerLost, "DH_EMISMATCH": Mismatch}

# Tracebacks name them as the docs do, datahelix.Mismatch (a user's trial read
# datahelix._errors.Mismatch and looked for it).
for _cls in (DataHelixError, DataHelixTimeout, PeerLost, Mismatch):
    _cls.__module__ = "datahelix"


def make(code, name, message):
    """The exception for an error of the C library: its subclass when it has one."""
    return _BY_NAME.get(name, DataHelixError)(code, name, message)
