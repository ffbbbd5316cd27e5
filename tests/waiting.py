"""Waiting in tests: :func:`eventually` for what must happen, :func:`holds_for` for what
must not.

A test that waits must say what it waits for and until when, so that it fails — naming
the condition and the last value seen — instead of hanging or passing by luck. Both
functions read a *probe* (a function, sync or async, returning the value to judge) and
judge it against ``want``: a value the probe must equal, a predicate of the value, or by
default any truthy value.

- ``eventually`` returns the first value that meets ``want`` and fails at its deadline.
  Between reads it sleeps ``every`` real seconds (0 yields one loop turn: for conditions
  inside the test's own event loop), or, given ``changed``, waits for the next event that
  may have changed the answer (a store's watch), so nothing polls.
- ``holds_for`` is the negative check: the value meets ``want`` at every read for the
  whole window. A fixed number of loop turns proves nothing (the behaviour it guards may
  simply not have had its turn yet); a window of real time, while the test's own clock
  stands still, gives anything that would break the condition thousands of turns.
- ``finishes`` bounds one awaitable (a shutdown) and, when it hangs, fails with where
  every task of the loop is waiting: "did not stop in 10 s" alone cannot be diagnosed
  from a CI log.

Deadlines are in real seconds; a caller on a scaled clock (kubesim's time scale, the
contract suite's cluster seconds) converts, as ``tests.contract.cluster`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypedDict, TypeVar, Unpack, overload

T = TypeVar("T")


class _Truthy:
    def __repr__(self) -> str:
        return "a truthy value"


TRUTHY: object = _Truthy()
"""The default ``want``: any value ``bool()`` calls true."""

_SHOWN = 2000
"""Characters of a value a failure message shows (a whole JobSet would drown it)."""


class Pacing(TypedDict, total=False):
    """``eventually``'s keyword arguments, for its typed overloads."""

    within: float
    every: float
    what: str | None
    changed: Callable[[], Awaitable[object]] | None


@overload
async def eventually(
    probe: Callable[[], Awaitable[T | None]], want: object = ..., **pacing: Unpack[Pacing]
) -> T: ...


@overload
async def eventually(
    probe: Callable[[], T | None], want: object = ..., **pacing: Unpack[Pacing]
) -> T: ...


async def eventually(
    probe: Callable[[], object],
    want: object = TRUTHY,
    *,
    within: float = 10.0,
    every: float = 0.02,
    what: str | None = None,
    changed: Callable[[], Awaitable[object]] | None = None,
) -> Any:
    """The probe's value once it meets ``want``; fail after ``within`` seconds naming
    ``what`` and the last value. The probe may raise AssertionError to fail at once.

    A probe typed ``X | None`` gives ``X``: a value that is waited for is there (only an
    explicit ``want=None`` returns None, and its caller has no use for the value)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = await _read(probe)
        if _meets(value, want):
            return value
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise AssertionError(
                f"not within {within} s: {_describe(probe, want, what)}; last value {_shown(value)}"
            )
        if changed is None:
            await asyncio.sleep(min(every, remaining))
        else:
            with contextlib.suppress(TimeoutError):  # one last read, then the failure
                await asyncio.wait_for(changed(), remaining)


async def holds_for(
    probe: Callable[[], object],
    want: object = TRUTHY,
    *,
    during: float,
    every: float = 0.005,
    what: str | None = None,
) -> None:
    """Fail as soon as the probe's value stops meeting ``want`` within ``during`` seconds
    (read every ``every`` seconds, and once more at the end)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        value = await _read(probe)
        if not _meets(value, want):
            raise AssertionError(
                f"stopped holding after {loop.time() - start:.3f} of {during} s: "
                f"{_describe(probe, want, what)}; value {_shown(value)}"
            )
        remaining = start + during - loop.time()
        if remaining <= 0:
            return
        await asyncio.sleep(min(every, remaining))


async def finishes(awaitable: Awaitable[T], *, within: float, what: str) -> T:
    """The awaitable's result; past ``within`` seconds, a failure naming ``what`` and the
    await chain of every other task (the hung one among them)."""
    try:
        return await asyncio.wait_for(awaitable, within)
    except TimeoutError:
        current = asyncio.current_task()
        chains = [_await_chain(task) for task in asyncio.all_tasks() if task is not current]
        raise AssertionError(
            f"{what} did not finish within {within} s; the loop's tasks wait at:\n"
            + "\n".join(chains)
        ) from None


def _await_chain(task: asyncio.Task[Any]) -> str:
    """``task``'s name and the frames of its suspended coroutines, outermost first
    (``Task.get_stack`` shows only the outermost frame of a suspended task)."""
    frames = []
    awaited: Any = task.get_coro()
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            frames.append(f"    {code.co_filename}:{frame.f_lineno} {code.co_name}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return "\n".join([f"  {task.get_name()}:", *frames])


async def _read(probe: Callable[[], object]) -> object:
    value = probe()
    return await value if inspect.isawaitable(value) else value


def _meets(value: object, want: object) -> bool:
    if want is TRUTHY:
        return bool(value)
    if callable(want):
        return bool(want(value))
    return value == want


def _describe(probe: Callable[[], object], want: object, what: str | None) -> str:
    if what is not None:
        return what
    name = getattr(probe, "__qualname__", repr(probe))
    if want is TRUTHY:
        return f"{name}() truthy"
    if callable(want):
        return f"{getattr(want, '__qualname__', repr(want))}({name}())"
    return f"{name}() == {want!r}"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}… ({len(text)} characters)"
