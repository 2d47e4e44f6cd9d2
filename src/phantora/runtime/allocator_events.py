"""The caching-allocator model's cross-stream events, as events the coordinator places on the simulated GPU.

A block freed after `record_stream` waits for an event on each stream that used it
(models/memory.py Note [Cross-stream frees between syncs]). Each such event is recorded with the
coordinator on its stream, so that when an allocation finds no cached block the model can ask which
of them the GPU has passed by the host's time, as `cudaEventQuery` would answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from phantora.runtime.engine_link import EngineLink


class CoordinatorEventProbe:
    """`models.memory.EventProbe` for one device, backed by the coordinator's events."""

    def __init__(self, link: EngineLink, device: int, stream_id_of: Callable[[tuple[int, int]], int]) -> None:
        self._link = link
        self._device = device
        self._stream_id_of = stream_id_of
        """(device, stream) -> the coordinator's stream id (Session.stream_id)."""
        self._event_ids: dict[int, int] = {}
        """Allocator event seq -> the coordinator event recorded for it."""
        self._spare_ids: list[int] = []
        """Coordinator events whose allocator events are retired: recorded again for new ones, so that the
        coordinator keeps as many marks as there are pending events, not one per free of the run."""

    def recorded(self, stream: int, seq: int) -> None:
        event_id = self._spare_ids.pop() if self._spare_ids else self._link.new_event_id()
        self._link.record_event(event_id, self._stream_id_of((self._device, stream)))
        self._event_ids[seq] = event_id

    def completed(self, stream: int, seqs: list[int]) -> int:
        """A stream passes its events in order: bisect for the last one passed, a query per step."""
        passed, waiting = 0, len(seqs)
        while passed < waiting:
            middle = (passed + waiting) // 2
            if self._link.query("event", event_id=self._event_ids[seqs[middle]]) is None:
                waiting = middle
            else:
                passed = middle + 1
        return seqs[passed - 1] if passed else 0

    def retired(self, seq: int) -> None:
        self._spare_ids.append(self._event_ids.pop(seq))
