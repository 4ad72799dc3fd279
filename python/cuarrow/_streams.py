"""CUDA streams and events."""

from __future__ import annotations

from typing import Any

from cuarrow import _cuarrow as _lib
from cuarrow._memory import Context, _as_context


class Stream(_lib.Stream):
    """A CUDA stream of `context` (a Context, a device number, or None for device 0).

    Non-blocking by default (it does not synchronize with the legacy default
    stream).  Pass it as ``stream=`` to copies; other libraries take it
    through ``__cuda_stream__`` (e.g. ``cupy.cuda.ExternalStream(s.handle)``).
    """

    def __init__(self, context: Any = None, *, non_blocking: bool = True) -> None:
        super().__init__(_as_context(context)._ctx, non_blocking)

    @property
    def context(self) -> Context:
        return Context._wrap(self.raw_context)

    @property
    def device_number(self) -> int:
        return self.raw_context.device_number

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol: ``(version, handle)``."""
        return (0, self.handle)

    def wait_event(self, event: Event) -> None:
        """Make work queued later on this stream wait for `event`."""
        self.wait(event)

    def record(self, event: Event | None = None) -> Event:
        """Record an event (a new one by default) capturing the work queued so far."""
        if event is None:
            event = Event(self.context)
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<cuarrow.cuda.Stream handle={self.handle:#x} device_number={self.device_number}>"


class Event(_lib.Event):
    """A CUDA event of `context` (timing disabled unless ``timing=True``)."""

    def __init__(self, context: Any = None, *, timing: bool = False) -> None:
        super().__init__(_as_context(context)._ctx, timing)

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to `end` (both recorded, completed, with timing)."""
        return end.elapsed_ms_since(self)

    def __repr__(self) -> str:
        return f"<cuarrow.cuda.Event handle={self.handle:#x}>"
