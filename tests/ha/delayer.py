"""Hold every packet of one NFQUEUE queue for a fixed time, then accept it: a 500 ms
delay on a network path, where the kernel has no ``sch_netem`` (decision 0053).

Run inside the namespace whose iptables rule queues the packets (an NFQUEUE queue belongs
to its network namespace)::

    ip netns exec NS python -m tests.ha.delayer --queue 1 --delay 0.5

It prints ``ready`` once bound, so the harness adds the rule only then (without a reader,
queued packets are dropped: the path would be cut, not slowed). A constant delay keeps
the packets in order, so a FIFO is the whole schedule. SIGTERM accepts whatever is still
held before exiting, so removing a delay never drops a packet.
"""

from __future__ import annotations

import argparse
import collections
import select
import signal
import sys
import time
from types import FrameType
from typing import Any

from netfilterqueue import NetfilterQueue

#: Packets the kernel may hold for us before it drops (a 500 ms backlog of a busy path).
QUEUE_LENGTH = 65536


class Stop(Exception):
    """SIGTERM: release what is held and exit."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise Stop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", type=int, required=True, help="NFQUEUE queue number")
    parser.add_argument("--delay", type=float, required=True, help="seconds to hold a packet")
    args = parser.parse_args()
    held: collections.deque[tuple[float, Any]] = collections.deque()
    queue = NetfilterQueue()
    queue.bind(args.queue, lambda packet: held.append((time.monotonic() + args.delay, packet)),
               max_len=QUEUE_LENGTH)  # fmt: skip
    signal.signal(signal.SIGTERM, _stop)
    print("ready", flush=True)
    try:
        while True:
            wait = max(0.0, held[0][0] - time.monotonic()) if held else None
            readable, _, _ = select.select([queue.get_fd()], [], [], wait)
            if readable:
                queue.run(block=False)
            now = time.monotonic()
            while held and held[0][0] <= now:
                held.popleft()[1].accept()
    except (Stop, KeyboardInterrupt):
        for _, packet in held:
            packet.accept()
    finally:
        queue.unbind()
    return 0


if __name__ == "__main__":
    sys.exit(main())
