"""The restart budget of a child of ``opsctl up``: backoff, bound and window."""

from __future__ import annotations

from durable_ops.stack.restarts import RestartBudget


def test_each_restart_waits_twice_as_long_up_to_the_cap() -> None:
    budget = RestartBudget(limit=6, window=300, first_delay=0.5, max_delay=3)
    delays = [budget.next_delay("gateway", now=float(t)) for t in range(6)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


def test_the_budget_is_spent_within_the_window_and_comes_back_after_it() -> None:
    budget = RestartBudget(limit=2, window=60)
    assert budget.next_delay("worker", now=0) is not None
    assert budget.next_delay("worker", now=10) is not None
    assert budget.next_delay("worker", now=20) is None
    assert budget.next_delay("worker", now=61) is not None  # the first restart is out of the window
    assert budget.used("worker") == 2


def test_children_have_budgets_of_their_own() -> None:
    budget = RestartBudget(limit=1)
    assert budget.next_delay("gateway", now=0) is not None
    assert budget.next_delay("gateway", now=1) is None
    assert budget.next_delay("workspace", now=1) == budget.first_delay
