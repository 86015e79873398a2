"""Moving tensors between the processes of a pipeline run on one host: reused shared memory.

Every channel (a sender and one receiving stage) owns a POSIX shared-memory block of a few
message *slots*. The sender copies a micro-batch's tensors into the next slot and queues only
the slot's address; the receiver hands views of the slot straight to onnxruntime and frees the
slot once the micro-batch has run; a semaphore counts the free slots, so a sender that gets
``SLOTS`` micro-batches ahead waits (bounded buffers, which cannot deadlock in a DAG pipeline
processed in micro-batch order). Reusing the block matters: on this kind of virtual machine,
touching fresh pages costs ~4 ms per MB, pipes move data in 64 KB chunks that each wait for
the receiver to be scheduled, while copying into pages already mapped runs at memory speed.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections.abc import Mapping
from multiprocessing import shared_memory
from typing import Any

import numpy as np

SLOTS = 3
_POLL_S = 1.0
_ALIGN = 64

Channel = tuple[int, int]  # (sending stage or -1 for the driver, receiving stage)


def _layout(arrays: Mapping[str, np.ndarray]) -> tuple[dict[str, tuple[int, str, tuple[int, ...]]], int]:
    layout, offset = {}, 0
    for name, array in arrays.items():
        layout[name] = (offset, array.dtype.str, tuple(array.shape))
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    return layout, max(offset, _ALIGN)


class Outbox:
    """The sending end of one channel."""

    def __init__(
        self, channel: Channel, queue: Any, free: Any, slots: int = SLOTS, tag: str | None = None
    ) -> None:
        """``tag``: wrap each message as ``(tag, microbatch, message, time)``, to share a queue
        with other kinds of message (the receiver passes the inner message to ``Inbox.open``)."""
        self.channel, self.queue, self.free, self.slots, self.tag = channel, queue, free, slots, tag
        self.blocks: list[shared_memory.SharedMemory] = []
        self.slot_bytes = 0
        self.slot = 0

    def send(self, microbatch: int, arrays: Mapping[str, np.ndarray]) -> float:
        """Copy ``arrays`` into the next free slot and queue its address; returns the seconds
        spent waiting for a free slot (the receiver being behind, not a cost of sending)."""
        layout, size = _layout(arrays)
        if size > self.slot_bytes:  # first message, or a larger one: a new block (old ones stay
            self.blocks.append(shared_memory.SharedMemory(create=True, size=size * self.slots))
            np.ndarray((size * self.slots,), np.uint8, buffer=self.blocks[-1].buf)[:] = (
                0  # fault pages in now
            )
            self.slot_bytes, self.slot = size, 0  # mapped until close, for messages in flight)
        block = self.blocks[-1]
        waiting = time.monotonic()
        self.free.acquire()
        waited = time.monotonic() - waiting
        base = self.slot * self.slot_bytes
        for name, (offset, dtype, shape) in layout.items():
            target = np.ndarray(shape, dtype, buffer=block.buf, offset=base + offset)
            target[...] = arrays[name]
        placed = {name: (base + offset, dtype, shape) for name, (offset, dtype, shape) in layout.items()}
        message = (self.channel, microbatch, block.name, placed)
        self.queue.put(message if self.tag is None else (self.tag, microbatch, message, time.monotonic()))
        self.slot = (self.slot + 1) % self.slots
        return waited

    def close(self) -> None:
        for block in self.blocks:
            block.close()
            block.unlink()
        self.blocks.clear()


class Inbox:
    """The receiving end of every channel into one process."""

    def __init__(self, queue: Any, free: Mapping[Channel, Any]) -> None:
        self.queue, self.free = queue, free
        self.blocks: dict[str, shared_memory.SharedMemory] = {}

    def receive(self, timeout: float | None = None) -> tuple[Channel, int, dict[str, np.ndarray]] | None:
        """The next message as views into shared memory, or ``None`` when told to stop.

        Without a timeout it waits as long as the parent process lives: a stage whose driver
        was killed ends instead of waiting forever."""
        while True:
            try:
                message = self.queue.get(timeout=_POLL_S if timeout is None else timeout)
                break
            except queue.Empty:
                parent = multiprocessing.parent_process()
                if timeout is not None or (parent is not None and not parent.is_alive()):
                    raise
        return None if message is None else self.open(message)

    def open(self, message: tuple) -> tuple[Channel, int, dict[str, np.ndarray]]:
        """A message from :meth:`Outbox.send` as views into shared memory."""
        channel, microbatch, block_name, placed = message
        if block_name not in self.blocks:
            self.blocks[block_name] = shared_memory.SharedMemory(name=block_name)
        buffer = self.blocks[block_name].buf
        arrays = {
            name: np.ndarray(shape, dtype, buffer=buffer, offset=offset)
            for name, (offset, dtype, shape) in placed.items()
        }
        return tuple(channel), microbatch, arrays

    def release(self, channel: Channel) -> None:
        """The views of one message from ``channel`` are no longer used: free its slot."""
        self.free[channel].release()

    def close(self) -> None:
        """Unmap every block; call once no view into them is alive."""
        for block in self.blocks.values():
            block.close()
        self.blocks.clear()
