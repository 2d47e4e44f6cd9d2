"""A transport that keeps what a rank's session sends and answers every request at once, for tests of a
`Session` with no coordinator."""

from __future__ import annotations

from phantora.protocol.records import SyncReply


class Recording:
    """Collects the records a session sends; a request's reply releases it at the host time it asked for."""

    def __init__(self):
        self.records = []

    def send(self, records):
        self.records += records

    def request(self, records):
        self.records += records
        return SyncReply(records[-1].request_id, 0, records[-1].host_ns)

    def close(self):
        pass
