"""The delimited sections of a task's user message: a contract, not a prompt.

The AI worker writes the inputs of a task between these lines, and the
development model reads them back; both import them from here::

    Task: strategy.snapshot
    ### JOB POSTING
    Title: …
    Company: …
    Description:
    …
    ### CV
    …
    ### END

A text longer than its budget (``model.subjects``) is cut and ends with
``TRUNCATION_MARK``: the worker writes it, the development model reads it as
no word of the input, and admission's token estimate counts it (``model.budgets``).
"""

from __future__ import annotations

JOB_SECTION = "### JOB POSTING"
CV_SECTION = "### CV"
END_SECTION = "### END"
TRUNCATION_MARK = "[truncated]"
