"""``durable_ops.worker.testing``: a handler run with no services ends as the worker would
settle it, and what it reported on the way is recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from structlog.testing import capture_logs

from durable_ops.worker import (
    CANCEL_REQUESTED,
    Attempt,
    Completed,
    Ending,
    ExternalFallback,
    HandlerFailure,
    InvalidHandlerCall,
    LeaseLost,
    PermanentFailure,
    Privacy,
    Provenance,
    RetryableFailure,
    Route,
    Subject,
    Usage,
    WorkerShutdown,
)
from durable_ops.worker.failures import HANDLER_ERROR, INVALID_HANDLER_CALL, INVALID_RESULT
from durable_ops.worker.testing import HandlerRun, HandlerTest

HANG_GUARD = 5.0
LOCAL = Provenance(provider="127.0.0.1", model="small", route="local")
A_REPORT = Subject("report", "q3")


def _run(
    test: HandlerTest, handler: Callable[[Attempt], Awaitable[str | Completed | None]]
) -> HandlerRun:
    return asyncio.run(asyncio.wait_for(test.run(handler), HANG_GUARD))


async def _long_work(attempt: Attempt) -> str:
    """Reports 10, 40 and 70 with a wait after each, then runs until cancelled."""
    for percent in (10, 40, 70):
        await attempt.progress(percent)
        await asyncio.sleep(0)
    await asyncio.sleep(HANG_GUARD * 2)  # only a cancel ends it
    return "never"


def _failure(run: HandlerRun) -> tuple[str, bool, str]:
    assert run.failure is not None
    assert run.failure is run.outcome
    return run.failure.code, run.failure.retryable, run.failure.message


def test_a_return_completes_with_what_was_reported_on_the_way() -> None:
    test = HandlerTest("report.render", A_REPORT, number=2, privacy=Privacy.EXTERNAL_ALLOWED)

    async def render(attempt: Attempt) -> Completed:
        assert (attempt.subject, attempt.number, attempt.privacy) == (
            A_REPORT,
            2,
            Privacy.EXTERNAL_ALLOWED,
        )
        await attempt.progress(30)
        await attempt.progress(20)  # recorded as passed; the owner would still see 30
        attempt.used(Usage(prompt_tokens=100, completion_tokens=20), LOCAL)
        attempt.used(Usage(prompt_tokens=5), LOCAL)
        return Completed(f"reports/{attempt.subject.id}.pdf", LOCAL)

    run = _run(test, render)
    assert run.outcome == Completed("reports/q3.pdf", LOCAL)
    assert (run.ending, run.attempt.result, run.raised) == (
        Ending.COMPLETED,
        run.outcome,
        None,
    )
    assert (run.progress, run.held) == ((30, 20), True)
    assert run.usage == Usage(prompt_tokens=105, completion_tokens=20)
    assert [call.provenance for call in run.calls] == [LOCAL, LOCAL]


def test_a_short_handler_need_not_hold_its_lease() -> None:
    async def reference(attempt: Attempt) -> str:
        return "r-1"

    run = _run(HandlerTest(), reference)
    assert (run.outcome, run.held, run.progress, run.usage) == (Completed("r-1"), False, (), None)


def test_what_no_completion_can_carry_fails_for_good() -> None:
    async def whole_result(attempt: Attempt) -> str:
        return "r" * 65

    run = _run(HandlerTest(), whole_result)
    assert _failure(run)[:2] == (INVALID_RESULT, False)
    assert run.ending is Ending.FAILED


def test_failures_are_the_handlers_own_or_a_retryable_handler_error() -> None:
    async def fail(attempt: Attempt) -> None:
        if attempt.subject.id == "permanent":
            raise PermanentFailure("unsupported_subject", "cannot be analysed")
        if attempt.subject.id == "retryable":
            raise RetryableFailure("model_busy")
        raise KeyError("Jane Doe")

    def failed(subject_id: str) -> HandlerRun:
        return _run(HandlerTest(subject=Subject("report", subject_id)), fail)

    assert _failure(failed("permanent")) == ("unsupported_subject", False, "cannot be analysed")
    assert _failure(failed("retryable")) == ("model_busy", True, "")
    with capture_logs() as logs:
        crashed = failed("crashed")
    assert _failure(crashed) == (HANDLER_ERROR, True, "KeyError")
    assert isinstance(crashed.raised, KeyError)  # the developer's own exception, as raised
    assert crashed.ending is Ending.FAILED
    (raised,) = [line for line in logs if line["event"] == "worker_handler_raised"]
    assert raised["error_type"] == "KeyError"  # the worker's own log line


def test_a_fallback_asks_for_the_external_route() -> None:
    async def local_down(attempt: Attempt) -> None:
        raise ExternalFallback("circuit_open", provenance=LOCAL)

    run = _run(HandlerTest(route=Route.LOCAL), local_down)
    assert isinstance(run.outcome, ExternalFallback)
    assert run.outcome.reason == "circuit_open"
    assert run.ending is Ending.FELL_BACK


def test_classify_is_the_workers_but_an_invalid_handler_call_fails_at_once() -> None:
    """``classify`` decides a handler's own exceptions; an SDK call out of its bounds fails
    for good as ``invalid_handler_call`` whatever it says, the SDK's message stored."""

    def everything_permanent(error: Exception) -> HandlerFailure:
        return PermanentFailure("classified", type(error).__name__)

    async def wrong(attempt: Attempt) -> None:
        if attempt.subject.id == "own":
            raise ValueError("the handler's own")
        await attempt.progress(150)

    def run(subject_id: str) -> HandlerRun:
        test = HandlerTest(subject=Subject("report", subject_id), classify=everything_permanent)
        return _run(test, wrong)

    assert _failure(run("own")) == ("classified", False, "ValueError")
    refused = run("progress")
    assert _failure(refused) == (
        INVALID_HANDLER_CALL,
        False,
        "progress_percent: must be between 0 and 100",
    )
    assert isinstance(refused.raised, InvalidHandlerCall)
    assert (refused.progress, refused.held) == ((), False)  # refused before the lease


def test_usage_out_of_bounds_is_an_invalid_handler_call() -> None:
    async def too_much(attempt: Attempt) -> None:
        attempt.used(Usage(prompt_tokens=-1), LOCAL)

    run = _run(HandlerTest(), too_much)
    assert _failure(run)[:2] == (INVALID_HANDLER_CALL, False)
    assert run.calls == ()


def test_a_provenance_out_of_bounds_is_an_invalid_handler_call() -> None:
    """The SDK's ``Provenance`` is a value the handler hands it: an empty model name fails
    the attempt for good, named by the SDK, not as a ``ValueError`` retried for ever."""

    async def no_model(attempt: Attempt) -> Completed:
        return Completed("reports/q3.pdf", Provenance("127.0.0.1", "", "local"))

    run = _run(HandlerTest(), no_model)
    assert _failure(run) == (
        INVALID_HANDLER_CALL,
        False,
        "provenance: model must be 1 to 128 characters",
    )


def test_the_owners_cancel_at_a_chosen_progress_cancels_the_handler() -> None:
    seen: list[tuple[bool, bool, bool]] = []

    async def work(attempt: Attempt) -> str:
        try:
            return await _long_work(attempt)
        except asyncio.CancelledError:
            assert attempt.lease is not None
            seen.append(
                (attempt.cancelled.is_set(), attempt.shutting_down, attempt.lease.ended.is_set())
            )
            raise

    test = HandlerTest()
    test.cancel(at_progress=40)
    run = _run(test, work)
    assert (run.outcome, run.ending) == (Ending.CANCELLED, Ending.CANCELLED)
    assert isinstance(run.raised, asyncio.CancelledError)
    assert run.progress == (10, 40)
    assert seen == [(True, False, True)]  # the owner's cancel, on the lease too


def test_a_handler_that_returns_anyway_after_a_cancel_completes() -> None:
    """Its return is the result's publication, which the cancel wins only until then."""

    async def stubborn(attempt: Attempt) -> str:
        try:
            return await _long_work(attempt)
        except asyncio.CancelledError:
            return "published"

    test = HandlerTest()
    test.cancel(at_progress=10)
    run = _run(test, stubborn)
    assert (run.outcome, run.attempt.cancelled.is_set()) == (Completed("published"), True)


def test_a_cancel_before_the_run_reaches_a_handler_that_holds_its_lease_first() -> None:
    """The first beat says the owner cancelled: a handler that holds its lease before
    expensive work starts none."""
    started: list[str] = []

    async def careful(attempt: Attempt) -> str:
        lease = await attempt.hold()
        if lease.cancel_requested:
            await asyncio.sleep(HANG_GUARD * 2)  # the cancel ends this wait
        started.append("expensive work")
        return "r"

    test = HandlerTest()
    test.cancel()
    run = _run(test, careful)
    assert (run.ending, run.held, started) == (Ending.CANCELLED, True, [])


def test_a_cancel_while_running_from_a_concurrent_task() -> None:
    test = HandlerTest()

    async def scenario() -> HandlerRun:
        running = asyncio.create_task(test.run(_long_work))
        await asyncio.sleep(0.01)
        test.cancel()
        return await running

    run = asyncio.run(asyncio.wait_for(scenario(), HANG_GUARD))
    assert (run.ending, run.progress) == (Ending.CANCELLED, (10, 40, 70))


def test_a_shutdown_releases_the_attempt_whatever_the_handler_does_then() -> None:
    seen: list[tuple[bool, bool]] = []

    async def swallowing(attempt: Attempt) -> str:
        try:
            return await _long_work(attempt)
        except asyncio.CancelledError:
            seen.append((attempt.shutting_down, attempt.cancelled.is_set()))
            return "too late"

    test = HandlerTest()
    test.shut_down(at_progress=70)
    run = _run(test, swallowing)
    assert isinstance(run.outcome, WorkerShutdown)
    assert (run.ending, run.attempt.result, run.progress) == (Ending.RELEASED, None, (10, 40, 70))
    assert seen == [(True, False)]  # a shutdown, not the owner's cancel


def test_a_lost_lease_settles_nothing() -> None:
    async def never_holds(attempt: Attempt) -> str:
        await asyncio.sleep(HANG_GUARD * 2)
        return "never"

    test = HandlerTest()
    test.lose_lease()
    with capture_logs() as logs:
        run = _run(test, never_holds)
    assert (run.outcome, run.ending, run.held) == (None, None, False)
    assert run.attempt.lease_lost
    assert [line["event"] for line in logs] == ["worker_lease_lost"]

    async def holds_again(attempt: Attempt) -> str:
        try:
            return await _long_work(attempt)
        except asyncio.CancelledError:
            await attempt.hold()  # raises what the lease ended with
            raise

    test.lose_lease(at_progress=10)
    run = _run(test, holds_again)
    assert (run.outcome, run.held, run.progress) == (None, True, (10,))
    assert isinstance(run.raised, LeaseLost)


def test_a_fenced_write_refused_for_the_owners_cancel_is_a_cancel() -> None:
    async def refused() -> str:
        raise LeaseLost("the owner cancelled first", code=CANCEL_REQUESTED)

    async def publish(attempt: Attempt) -> str:
        return await attempt.fenced(refused())

    run = _run(HandlerTest(), publish)
    assert (run.ending, run.attempt.cancelled.is_set()) == (Ending.CANCELLED, True)


def test_the_lease_answers_at_once_and_records_the_answer_text() -> None:
    async def streaming(attempt: Attempt) -> str:
        lease = await attempt.hold()
        lease.report_text("The ans")
        lease.report_text("The answer")
        await lease.confirm()
        return "r"

    run = _run(HandlerTest(lease_seconds=5), streaming)
    assert (run.ending, run.text, run.held) == (Ending.COMPLETED, "The answer", True)


def test_one_handler_at_a_time() -> None:
    test = HandlerTest()

    async def twice() -> None:
        first = asyncio.create_task(test.run(_long_work))
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="runs a handler already"):
            await test.run(_long_work)
        test.cancel()
        await first

    asyncio.run(asyncio.wait_for(twice(), HANG_GUARD))
