"""``KubeSim``: the API server, the object store and (optionally) the simulated controllers
in one embeddable object, so a test or ``xmc-kubesim`` gets a whole "cluster" with one
``await sim.start()``.

The controllers are imported only when enabled, so the API alone never depends on them.
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from aiohttp import web

from kubesim.api.app import build_app
from kubesim.api.context import ApiContext
from kubesim.clock import SimClock
from kubesim.faults import Faults
from kubesim.persist import (
    DEFAULT_INTERVAL,
    Persister,
    clock_start,
    load,
    restored_resource_version,
)
from kubesim.resources import JOBSET
from kubesim.store import ObjectStore
from kubesim.watch import WatchHub

if TYPE_CHECKING:
    from kubesim.controllers import Controllers, ControllerSettings


class KubeSim:
    def __init__(
        self,
        *,
        controllers: bool = True,
        controller_settings: ControllerSettings | None = None,
        watch_history: int = 10_000,
        time_scale: float = 1.0,
        bookmark_interval: float = 1.0,
        clock_offset: timedelta = timedelta(),
        kueue_version: str | None = None,
        state_dir: Path | None = None,
        journal_interval: float = DEFAULT_INTERVAL,
    ) -> None:
        """``watch_history`` is how many events a watch can resume across (older → 410);
        ``time_scale`` is simulated seconds per real second (``controller_settings``, when
        given, carries its own); ``bookmark_interval`` is the real seconds between BOOKMARK
        events on watches that allow them; ``clock_offset`` puts the cluster's clock that far
        from the host's (negative: behind); ``kueue_version`` (``"0.19"``, ``"0.20"``) picks
        the Kueue simulator's waiting reasons (``controller_settings`` carries its own).

        ``state_dir`` None (the default) keeps everything in memory; a directory restores
        the objects saved there (``kubesim.persist``; ``SnapshotError`` when a file
        cannot be read) and journals every write, fsynced every ``journal_interval``
        seconds (what a kill -9 can lose)."""
        self._with_controllers = controllers
        self._controller_settings = controller_settings
        self._kueue_version = kueue_version
        scale = controller_settings.time_scale if controller_settings else time_scale
        restored = load(state_dir) if state_dir is not None else None
        saved = restored.snapshot if restored is not None else None
        start = clock_start(saved, datetime.now(UTC), clock_offset)
        self.clock = SimClock(scale, start=start, offset=clock_offset)
        self._store = ObjectStore(clock=self.clock, history=watch_history)
        self._persister: Persister | None = None
        if state_dir is not None:
            self._persister = Persister(self._store, self.clock, state_dir, journal_interval)
        if restored is not None and self._persister is not None:
            resource_version = restored_resource_version(restored.snapshot)
            self._store.restore(resource_version, restored.snapshot.objects)
            self._persister.restored(restored)
        self.restored = saved
        """The state this kubesim started from, its snapshot with the journals replayed
        (None: a new, empty cluster)."""
        self._watches = WatchHub(self._store)
        self._faults = Faults(self._watches.close_all)
        self._context = ApiContext(
            self._store, self._faults, self._watches, bookmark_interval, clock=self.clock
        )
        self._runner: web.AppRunner | None = None
        self._controllers: Controllers | None = None
        self._url: str | None = None

    @property
    def store(self) -> ObjectStore:
        return self._store

    @property
    def persister(self) -> Persister | None:
        return self._persister

    @property
    def faults(self) -> Faults:
        return self._faults

    @property
    def watches(self) -> WatchHub:
        return self._watches

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("kubesim is not started")
        return self._url

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0 = any free port); returns the base URL."""
        if self._runner is not None:
            raise RuntimeError("kubesim is already started")
        if self._persister is not None:
            await self._persister.start()
        if self._with_controllers:
            await self._start_controllers()
        runner = web.AppRunner(
            build_app(self._context),
            handler_cancellation=True,  # a client disconnect ends its watch at once
            access_log=None,
            shutdown_timeout=1.0,
        )
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        self._runner = runner
        bound_port = runner.addresses[0][1]
        shown_host = f"[{host}]" if ":" in host else host
        self._url = f"http://{shown_host}:{bound_port}"
        return self._url

    async def _start_controllers(self) -> None:
        from kubesim.controllers import Controllers, ControllerSettings, KueueVersion
        from kubesim.controllers.kubelet import log_scripts
        from kubesim.controllers.kueue.webhooks import default_jobset_create, validate_jobset_update
        from kubesim.defaults import install_defaults

        settings = self._controller_settings or ControllerSettings(time_scale=self.clock.scale)
        if self._kueue_version is not None and self._controller_settings is None:
            settings = dataclasses.replace(
                settings, kueue_version=KueueVersion(self._kueue_version)
            )
        if settings.kueue:  # Kueue's JobSet webhook comes with Kueue
            self._context.update_checks[JOBSET.key] = validate_jobset_update
            self._context.create_defaults[JOBSET.key] = default_jobset_create
        # What containers print, for pods/{name}/log (kept without the kubelet too, for
        # statuses written by hand).
        self._context.log_scripts = functools.partial(
            log_scripts,
            start_seconds=settings.pod_start_seconds,
            run_seconds=settings.pod_run_seconds,
        )
        install_defaults(self._store)
        self._controllers = Controllers(self._store, self.clock, settings)
        await self._controllers.start()

    async def stop(self) -> None:
        """End every watch, stop the controllers, then the HTTP server."""
        self._watches.close_all()
        if self._controllers is not None:
            await self._controllers.stop()
            self._controllers = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._persister is not None:  # last, so it holds every write
            await self._persister.stop()
        self._url = None

    async def __aenter__(self) -> KubeSim:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()
