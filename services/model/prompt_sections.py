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
"""

from __future__ import annotations

JOB_SECTION = "### JOB POSTING"
CV_SECTION = "### CV"
END_SECTION = "### END"
