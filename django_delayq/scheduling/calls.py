"""A :class:`Call`: a task with its arguments, not yet scheduled.

``schedule(task, *args, **kwargs)`` takes its options (``delay``, ``queue``, ``priority``...)
out of the task's keyword arguments, so a task cannot be given an argument of such a name
that way, and arguments that come from data (a recurring schedule's kwargs run from the
admin) must never be read as options. A Call keeps the two apart: the task's arguments
go into the Call (``Task.call(...)``, :func:`django_delayq.call`), the options into
:meth:`Call.schedule`, which takes nothing else.

A plain value: the task's name, the positional arguments and the keyword arguments,
checked (as JSON, against the function's signature) when it is scheduled, as schedule()
checks them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_delayq.jobs.job import Job

# "schedule": api.schedule_call, "aschedule": async_api.aschedule_call, "chain":
# batches.chains.schedule_chain (see use_scheduler).
_schedulers: dict[str, Callable[[Call, dict[str, Any]], Any]] = {}


@dataclass(frozen=True)
class Call:
    """``task(*args, **kwargs)`` as a value, to schedule with :meth:`schedule`.

    Made by ``Task.call(*args, **kwargs)`` or ``django_delayq.call(task, *args, **kwargs)``;
    ``task`` is the task's registered name. Its keyword arguments are all the task's, whatever
    their names (``delay``, ``queue``...): the options go to :meth:`schedule`.
    """

    task: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Copies: a Call does not change when the caller's list or dict does.
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "kwargs", dict(self.kwargs))

    def __repr__(self) -> str:
        shown = [repr(self.task), *map(repr, self.args)]
        shown += [f"{name}={value!r}" for name, value in self.kwargs.items()]
        return f"call({', '.join(shown)})"

    def schedule(self, **options: Any) -> Job:
        """Store a job of this call; ``options`` are :func:`~django_delayq.schedule`'s
        (``delay``, ``at``, ``key``, ``on_conflict``, ``queue``, ``max_retries``,
        ``priority``, ``on_commit``) and nothing else. Returns the Job as schedule() does."""
        return _schedulers["schedule"](self, options)

    async def aschedule(self, **options: Any) -> Job:
        """:meth:`schedule` from async code, as :func:`~django_delayq.aschedule` (no
        ``on_commit``)."""
        return await _schedulers["aschedule"](self, options)

    def then(self, call: Call, **options: Any) -> Chain:
        """A chain: this call, then ``call`` once this one succeeded (``options``:
        ``delay``, counted from that moment, ``queue``, ``priority``, ``max_retries``).
        Schedule it with :meth:`Chain.schedule`."""
        return Chain(((self, {}),)).then(call, **options)


@dataclass(frozen=True)
class Chain:
    """Calls run one after the other: each step is scheduled when the one before it
    succeeded, its delay counted from then; a dead step ends the chain (``on_death`` is
    scheduled then, if given); a cancelled one ends it too. Made by :meth:`Call.then`."""

    steps: tuple[tuple[Call, dict[str, Any]], ...]
    death: Call | None = None

    def then(self, call: Call, **options: Any) -> Chain:
        """This chain, then ``call`` (options as :meth:`Call.then`)."""
        if not isinstance(call, Call):
            raise TypeError(
                f"then() takes a Call (Task.call(...) or django_delayq.call(...)), got {call!r}"
            )
        return Chain((*self.steps, (call, dict(options))), self.death)

    def on_death(self, call: Call) -> Chain:
        """This chain, scheduling ``call`` when one of its steps dies."""
        return Chain(self.steps, call)

    def schedule(self, **options: Any) -> Job:
        """Schedule the first step (``options`` as :meth:`Call.schedule`); returns its
        Job. The chain's id is the first step's id."""
        return _schedulers["chain"](self, options)


def use_scheduler(method: str, function: Callable[[Call, dict[str, Any]], Any]) -> None:
    """Give :meth:`Call.schedule` (``method`` "schedule") or :meth:`Call.aschedule` the
    function it calls: api.py and async_api.py register theirs when imported (the package's
    __init__ imports both), so this module, which they import, never imports them."""
    _schedulers[method] = function
