"""Speculative runs of a sandboxed split: the run goes on with the reference's answer at every call while the
candidate's child answers the same calls on the other core, and is kept only where the child answered each
exactly so.

A sandboxed split's call is one exchange with its child (``fuzz.sandbox.remote``), 140-170 us here, and a long
generation makes a thousand calls, nearly all of them answered as the reference answers them (a decode step's
split returns what it is offered). With an in-process reference (``vllm``, the default, is one), a run's split
(:meth:`Speculation.result`) answers each call with the reference's answer at once and sends the call with that
expected answer without waiting, :data:`TOGETHER` to a write; the child answers in order (``fuzz.sandbox.child``)
and the answers are read as they come (:func:`agrees`). The run is kept where every answer agreed and the child
asked nothing: then each call was made on the state the synchronous run would have made it on and got the
same answer, so the two runs are one.

Otherwise the first call that departed (answered otherwise, asked the deciding process something, or was never
answered: the child ended, or the run's deadline passed while it worked on it) is where the run is made again,
by a replay: the calls before it answered as the child answered them (none sent again), the departing call
given the child's answer (or its question answered from the replay's live objects, the child still waiting in
that call; or the fault its end or the deadline is), and every later call exchanged synchronously.

Invariants:
- a run's result is the synchronous run's: the same answers at the same calls on the same states (the replay
  checks that each call the child saw is made on the very snapshot and arguments it was sent with; where one is
  not, the run is made a third time, synchronously from the start with a fresh child);
- the child sees each call of the synchronous run once, in order, and no other: a speculative call made after
  the first that departed is dropped unanswered in the child, and the replay sends none of the calls the child
  has seen. The replay's scheduler and requests take the serials the speculative run's had at the same calls
  (``fuzz.sandbox.views.assume_identities``), so what the split set on them stays set;
- the trust boundary is the sandbox's: what is taken from the child is its answers, judged here by the split's
  contract as any other, and a child that answers a call it was not sent, or says it is settled before it has
  answered every call, is killed (the run's fault). The child learns the reference's answer to each speculative
  call: nothing it could not compute itself (the built-in references are the installed vLLM's code and
  gdnfuzz's own).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fuzz.model.deadline import DeadlineExceeded, deadline_seconds
from fuzz.model.decision import SplitFn, ask
from fuzz.model.policies import Policy, Rewind
from fuzz.model.result import RunResult
from fuzz.sandbox.channel import ChildBroken, ChildFailed, ChildTimedOut
from fuzz.sandbox.remote import RemoteSplit, gone
from fuzz.sandbox.views import assume_identities, lookup, snapshot

_speculating = True  # False within ``synchronous()``
TOGETHER = 16  # speculative calls sent in one write (one wake-up of the child)
IN_FLIGHT = 64  # speculative calls sent and not answered, at most: about 50 KiB, within a socket's buffer
_RUNS = itertools.count()


@contextmanager
def synchronous() -> Iterator[None]:
    """Within the block every call of a sandboxed split is one exchange, as if no run were speculative: what a
    speculative run is compared with (``bench/sandbox_cost.py``, ``tests/test_speculation.py``)."""
    global _speculating
    _speculating = False
    try:
        yield
    finally:
        _speculating = True


def agrees(answer: Any, expected: Any) -> bool:
    """Whether a child's ``answer`` is the int ``expected``, exactly (``True`` is not ``1``, nor ``1.0``)."""
    return type(answer) is dict and answer.keys() == {"value"} and type(answer["value"]) is int \
        and type(expected) is int and answer["value"] == expected


@dataclass
class Departure:
    """Where a speculative run left the path: the index of the call, and what the child did there: ``answer``
    (its answer, not the expected one), ``question`` (asked, and waits for the answer), ``ended`` (it ended or
    broke the channel), ``deadline`` (the run's deadline passed while it worked), ``unsent`` (the reference gave
    no answer to expect, so the call was never sent)."""

    call: int
    answer: dict[str, Any] | None = None
    question: Any = None
    ended: ChildFailed | None = None
    deadline: bool = False
    unsent: bool = False


class Speculation:
    """One run of ``remote`` (a sandboxed split) judged against ``reference`` (an in-process one), attempt by
    attempt (:meth:`result`): the speculative one, settled (:meth:`settle`), then the replay where it departed."""

    def __init__(self, remote: RemoteSplit, reference: SplitFn):
        remote.refresh()
        self.remote, self.reference = remote, reference
        self.run = next(_RUNS)  # the child drops this run's speculative calls once one departed
        self.sent: list[dict[str, Any]] = []  # the speculative calls, in order, as made (``expect`` included)
        self.flushed = 0  # how many of them were sent
        self.agreed = 0  # how many of them the child answered as expected
        self.departure: Departure | None = None
        self.settling = False  # a settle was sent and its ``settled`` is not read yet

    @staticmethod
    def of(policy: Policy, reference: Policy | None) -> Speculation | None:
        """The speculation for a run of ``policy`` with ``reference``, where one can be made: a sandboxed split
        judged against a split of this process."""
        if not _speculating or reference is None or reference == policy or not isinstance(policy.split, RemoteSplit) \
                or reference.sandboxed or reference.checkout is not None or policy.checkout is not None:
            return None
        return Speculation(policy.split, reference.split)

    def result(self, run: Callable[[SplitFn, bool], RunResult]) -> RunResult:
        """The run's result: ``run(split, probed)`` makes one attempt with ``split`` (``probed``: with the
        reference, to record the first disagreement). The speculative attempt first, kept where every answer
        agreed (then there is no disagreement to record); else the replay up to its departure, and where that
        met a call the child never saw as it was made, a synchronous run from the start with a fresh child."""
        try:
            result = run(self._speculate, False)
            self.settle()
            return result
        except Rewind:
            pass
        replay = _Replay(self)
        try:
            return run(replay, True)
        except Rewind:
            pass
        finally:
            if replay.waiting:  # it ended before the call the child waits in: the child is ended with it
                self.remote.child.kill()
        self.remote.child.kill()
        return run(self.remote, True)

    def _speculate(self, scheduler: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
                   num_external_computed_tokens: int = 0) -> int:
        args = (num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
        expected = ask(self.reference, scheduler, request, args)
        if type(expected) is not int:
            self.settle()
            self._depart(Departure(len(self.sent), unsent=True))
        message = self.remote.message({"self": scheduler, "request": request}, args)
        message.update(expect=expected, run=self.run)
        self.sent.append(message)
        if len(self.sent) - self.flushed >= TOGETHER:
            self._flush()
        return expected

    def _flush(self) -> None:
        """Send the calls made since the last flush, take the answers that are here, and wait for the child while
        more than :data:`IN_FLIGHT` are unanswered."""
        child = self.remote.child
        with self._waiting_on_the_child():
            if self.flushed == 0:
                child.start()  # the run's child: never another in its place before the run settles
            child.send(*self.sent[self.flushed:])
            self.flushed = len(self.sent)
            self._take(child.ready_answers())
            while self.flushed - self.agreed > IN_FLIGHT:  # the child is behind: wait for it
                self._take([child.read(deadline_seconds())])

    @contextmanager
    def _waiting_on_the_child(self) -> Iterator[None]:
        """Where the child fails the block, the run departs at the first call it has not answered: its end, or
        the deadline (a read's bound, or the run's own while the block waits on the child)."""
        try:
            yield
        except (ChildTimedOut, DeadlineExceeded):
            self._depart(Departure(self.agreed, deadline=True))
        except ChildFailed as exc:
            self._depart(Departure(self.agreed, ended=exc))

    def _take(self, answers: list[dict[str, Any]]) -> None:
        for answer in answers:
            if self.agreed == self.flushed:  # an answer to a call not sent: the channel is not the child's protocol
                self.remote.child.kill()
                raise ChildBroken("answered a call it was not sent and was killed")
            if "ask" in answer:
                self.settling = False  # a child waiting on its question drops the settle
                self._depart(Departure(self.agreed, question=answer["ask"]))
            if not agrees(answer, self.sent[self.agreed]["expect"]):
                self._depart(Departure(self.agreed, answer=answer))
            self.agreed += 1

    def settle(self) -> None:
        """Wait for every answer to the speculative calls (within the run's deadline); a :class:`Rewind` where
        one departed."""
        if self.departure is not None:
            raise Rewind
        if not self.sent:
            return
        self._flush()
        child = self.remote.child
        with self._waiting_on_the_child():
            child.send({"op": "settle"})
            self.settling = True
            while True:
                answer = child.read(deadline_seconds())
                if "settled" in answer and self.agreed == self.flushed:
                    self.settling = False
                    return
                self._take([answer])  # (a ``settled`` before every answer: not the protocol, the child is killed)

    def _depart(self, departure: Departure) -> None:
        """Record where the run departed and stop it (:class:`Rewind`), with no answer of this run left unread."""
        self.departure = departure
        if departure.ended is None and not departure.deadline:
            try:
                while self.settling and "settled" not in self.remote.child.read(deadline_seconds()):
                    pass
            except ChildFailed:
                pass  # gone: the replay's first exchange starts a fresh one
        self.settling = False
        if departure.deadline:
            self.remote.child.kill()  # still working on that call: its answer must never be read as another's
        raise Rewind


class _Replay:
    """The split of a run made again up to the speculation's departure (module docstring)."""

    def __init__(self, speculation: Speculation):
        assert speculation.departure is not None
        self.speculation, self.departure = speculation, speculation.departure
        self.remote = speculation.remote
        self.calls = 0

    @property
    def waiting(self) -> bool:
        """Whether the child still waits on its question in the departed call (the replay has not reached it)."""
        return self.departure.question is not None and self.calls <= self.departure.call

    def __call__(self, scheduler: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
                 num_external_computed_tokens: int = 0) -> Any:
        args = (num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
        roots = {"self": scheduler, "request": request}
        index, self.calls = self.calls, self.calls + 1
        departure = self.departure
        if index > departure.call or (index == departure.call and departure.unsent):
            return self.remote(scheduler, request, *args)
        if index < departure.call or departure.answer is not None or departure.question is not None:
            self._same_call(index, roots, args)  # a call the child has seen
        if index < departure.call:
            return self.speculation.sent[index]["expect"]
        if departure.answer is not None:
            return self.remote.answer_of(departure.answer, lookup(roots))
        if departure.question is not None:
            asked = lookup(roots)
            return self.remote.answer_of(self.remote.exchange(None, asked, departure.question), asked)
        if departure.ended is not None:
            raise gone(departure.ended, self.remote.spec)
        raise DeadlineExceeded

    def _same_call(self, index: int, roots: dict[str, Any], args: tuple[int, int, int]) -> None:
        """The call ``index`` is made as the child saw it, and its objects take the serials they had then; else
        the run is made again, synchronously from the start (:class:`Rewind`)."""
        sent = self.speculation.sent[index]
        if sent["args"] != list(args) or sent["snapshot"] != snapshot(roots):
            raise Rewind
        assume_identities(roots, sent["ids"])
