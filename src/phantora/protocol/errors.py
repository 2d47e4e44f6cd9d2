"""Why the coordinator rejects a rank's records: raised by the engine, passed on by the transport's server as
the run's failure (docs/launcher.md). Both sides import them from here, so the transport needs no engine code."""


class ProtocolError(ValueError):
    """A rank sent something the record protocol forbids (time going back, records while blocked)."""


class CollectiveMismatchError(ValueError):
    """The members of one collective disagree about what it is (op, size, root, membership)."""


class DeadlockError(RuntimeError):
    """Nothing can ever progress: ranks wait for collectives some member never issues."""
