"""``xmc-kubesim``: serve the emulated Kubernetes API (and, unless ``--no-controllers``, the
JobSet, Kueue and kubelet simulators) until SIGTERM or SIGINT, then stop cleanly (exit 0)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from datetime import timedelta
from pathlib import Path

import structlog

from kubesim.clock import parse_offset
from kubesim.logs import configure_logging
from kubesim.persist import DEFAULT_INTERVAL, state_path
from kubesim.server import KubeSim
from kubesim.snapshot import SnapshotError

KUEUE_VERSIONS = ("0.19", "0.20")
"""``--kueue-version`` values (kubesim.controllers.KueueVersion; not imported, so the API
alone never loads the controllers)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="xmc-kubesim", description="Kubernetes API emulator with JobSet/Kueue simulators"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--port", type=int, default=8001, help="port to bind (0 = any free)")
    parser.add_argument(
        "--no-controllers", action="store_true", help="serve the API alone (no simulators)"
    )
    parser.add_argument(
        "--watch-history",
        type=int,
        default=10_000,
        help="events a watch can resume across; older resourceVersions get 410 Expired",
    )
    parser.add_argument(
        "--time-scale", type=float, default=1.0, help="simulated seconds per real second"
    )
    parser.add_argument(
        "--clock-offset",
        type=parse_offset,
        default=timedelta(),
        help="skew of the cluster's clock against the host's, e.g. -5s or +2m (default 0)",
    )
    parser.add_argument(
        "--bookmark-interval",
        type=float,
        default=1.0,
        help="seconds between BOOKMARK events on watches that allow them",
    )
    parser.add_argument(
        "--kueue-version",
        choices=KUEUE_VERSIONS,
        default=KUEUE_VERSIONS[0],
        help="whose defaults the Kueue simulator's waiting reasons follow: 0.19 (Pending, "
        "Inadmissible) or 0.20, current upstream (WaitingForQuota, ExceedsMaxQuota, ...)",
    )
    persistence = parser.add_mutually_exclusive_group()
    persistence.add_argument(
        "--state-dir",
        type=Path,
        help="keep the cluster across restarts: restore it from DIR (a snapshot, "
        "kubesim-state.jsonl, and the journal of writes since, kubesim-journal-*.jsonl); "
        "every write is journalled there, fsynced every --journal-interval",
    )
    persistence.add_argument(
        "--ephemeral",
        action="store_true",
        help="keep everything in memory: a restart is an empty cluster (the default without "
        "--state-dir)",
    )
    parser.add_argument(
        "--journal-interval",
        "--snapshot-interval",  # its name before the journal; same meaning for a user
        dest="journal_interval",
        type=float,
        default=DEFAULT_INTERVAL,
        help="seconds between fsyncs of the journal (with --state-dir): a kill -9 loses at "
        "most the writes of the last interval",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    if args.journal_interval <= 0:
        parser.error("--journal-interval must be > 0")
    return args


async def serve(args: argparse.Namespace) -> None:
    sim = _build(args)
    url = await sim.start(args.host, args.port)
    log = structlog.get_logger()
    restored = sim.restored
    log.info(
        "kubesim serving",
        url=url,
        controllers=not args.no_controllers,
        clock_offset_seconds=args.clock_offset.total_seconds(),
        kueue_version=args.kueue_version,
        state_file=None if args.state_dir is None else str(state_path(args.state_dir)),
        restored_objects=None if restored is None else len(restored.objects),
        restored_clean=None if restored is None else restored.clean,
        resource_version=sim.store.resource_version,
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    await sim.stop()
    log.info("kubesim stopped")


def _build(args: argparse.Namespace) -> KubeSim:
    return KubeSim(
        controllers=not args.no_controllers,
        watch_history=args.watch_history,
        time_scale=args.time_scale,
        bookmark_interval=args.bookmark_interval,
        clock_offset=args.clock_offset,
        kueue_version=args.kueue_version,
        state_dir=args.state_dir,
        journal_interval=args.journal_interval,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_logging(args.log_level)
    try:
        asyncio.run(serve(args))
    except SnapshotError as error:
        # Starting empty over a cluster it cannot read would make every JobSet a ghost.
        print(
            f"xmc-kubesim: cannot restore --state-dir {args.state_dir}: {error}\n"
            f"Move {state_path(args.state_dir)} and the kubesim-journal-*.jsonl files beside "
            "it away to start an empty cluster there, or run with --ephemeral.",
            file=sys.stderr,
        )
        sys.exit(2)
