"""The subject-kind registry: what an operation can be about, and how each layer reads one.

An operation refers to its subject (and an optional second reference, its
context) by an opaque id; a ``SubjectKind`` says what such an id names and
carries everything the three readers derive their read from, so none of them
keeps a per-kind table of its own:

    name, url_segment, label   "job", /api/jobs/{id}/…, how a page names one
    table                      the workspace table holding the owner's rows: AI admission
                               proves a reference is the caller's own by reading it there
                               (``storage.workspace.get_subject``)
    workspace_read             the Workspace RPC that reads one of the owner's (its request's
                               one field is the id): the gateway's ownership read and the
                               AI worker's input read call it (``rpc.subjects``)
    section, fields            how the worker lays the text out in the prompt: a section
                               line of ``model.prompt_sections`` and the reply's text
                               fields, each cut to its token budget (``TextField.shown``:
                               what the worker sends and admission reserves for)

Adding a kind: an entry below, the task that takes it (``model.tasks``), the
task's instructions, its test (docs/tasks.md, "Adding a subject kind").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from durable_ops.model import prompt_tokens
from durable_ops.model.prompt_sections import CV_SECTION, JOB_SECTION, TRUNCATION_MARK

_SECTION_LIKE = re.compile(r"^([ \t]*)#{3,}", re.MULTILINE)


@dataclass(frozen=True)
class TextField:
    """One text of a subject, as the prompt shows it."""

    name: str  # the field of the Workspace reply, e.g. "description"
    budget: int  # tokens the prompt keeps (``prompt_tokens.tokens_of``); the rest is cut
    label: str = ""  # "Title": the line's prefix; empty: the text stands alone
    single_line: bool = False  # whitespace folded into one line (a title, a name)

    def shown(self, value: str) -> str:
        """The text as the prompt shows it: one line ending everywhere (so every reader
        splits lines where "###" was looked for), a line that would open or close a
        section rewritten to begin with "##", whitespace folded for a single line, and
        cut to the budget, the cut marked. The worker sends this, and admission reserves
        for its ``tokens_of``: one function, so both count the same text."""
        if self.single_line:
            value = " ".join(value.split())
        text = "\n".join(value.replace("\x00", "").splitlines())
        text = _SECTION_LIKE.sub(r"\1##", text)
        kept = prompt_tokens.cut(text, self.budget)
        return text if kept == text else kept + TRUNCATION_MARK


@dataclass(frozen=True)
class SubjectKind:
    """A kind of thing an operation refers to by an opaque id."""

    name: str  # stored as the operation's subject_type
    url_segment: str  # /api/<url_segment>/{id}
    label: str  # how a page names one: "job", "CV"
    table: str
    workspace_read: str
    section: str
    fields: tuple[TextField, ...]
    # The column of the workspace row a page names one by ("filename": "with cv.txt"); a
    # result records it as it was when the result was made. Empty: named by its id only.
    name_column: str = ""

    def __post_init__(self) -> None:
        if not self.fields:
            raise ValueError(f"{self.name}: a subject kind gives the prompt at least one text")

    @property
    def reference_field(self) -> str:
        """The request field naming one, e.g. ``attachment_id``."""
        return f"{self.name}_id"


# The input budget of a prompt, in estimated tokens (``prompt_tokens.tokens_of``, ASCII at
# 3 characters a token): whatever was uploaded, the prompt stays bounded, and fits the
# model's context (``budgets.MODEL_CONTEXT_TOKENS``). In English: about 200 characters of
# a title and of a company, 6,000 of a description, 8,000 of a CV; in Japanese a third
# as many characters (3 bytes each), in emoji a quarter.
JOB_TITLE_BUDGET = 67
JOB_COMPANY_BUDGET = 67
JOB_DESCRIPTION_BUDGET = 2_000
CV_BUDGET = 2_667

JOB = SubjectKind(
    name="job",
    url_segment="jobs",
    label="job",
    table="jobs",
    workspace_read="GetJob",
    section=JOB_SECTION,
    fields=(
        TextField("title", JOB_TITLE_BUDGET, label="Title", single_line=True),
        TextField("company", JOB_COMPANY_BUDGET, label="Company", single_line=True),
        TextField("description", JOB_DESCRIPTION_BUDGET, label="Description"),
    ),
    name_column="title",
)
CV = SubjectKind(
    name="attachment",
    url_segment="attachments",
    label="CV",
    table="attachments",
    workspace_read="GetAttachment",
    section=CV_SECTION,
    fields=(TextField("text", CV_BUDGET),),
    name_column="filename",
)

# Every kind the product knows, in the order a prompt lays out their sections: the
# posting first, whichever of the two a task is about (the order the prompts were
# written and measured with).
KINDS: tuple[SubjectKind, ...] = (JOB, CV)
