"""The subject-kind registry against what its readers derive from it.

The readers hold no per-kind table: they take the kind's names on trust. These
checks make the names good for every registered kind: the Workspace RPC exists
and takes the id and a worker's lease (ADR 62), its reply has the kind's text fields, the
table is owner-bearing, and the spellings and prompt sections are unique.
"""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import FieldDescriptor

from durable_ops.model import subjects, tasks
from durable_ops.model.prompt_sections import END_SECTION
from durable_ops.model.scope import ReadLease
from durable_ops.model.subjects import KINDS, SubjectKind
from durable_ops.rpc.subjects import LEASE_FIELDS, WORKSPACE_SERVICE, read_request
from durable_ops.storage.schema import Base


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_the_workspace_read_takes_the_id_and_answers_the_texts(kind: SubjectKind) -> None:
    method = WORKSPACE_SERVICE.methods_by_name[kind.workspace_read]
    fields = method.input_type.fields_by_name
    (id_field,) = (field for name, field in fields.items() if name not in LEASE_FIELDS)
    assert {id_field.name, *LEASE_FIELDS} == set(fields)
    for name, request_field in fields.items():
        assert request_field.type == FieldDescriptor.TYPE_STRING, name
    assert getattr(read_request(kind, "some-id"), id_field.name) == "some-id"
    leased = read_request(kind, "some-id", ReadLease("op-1", "token-1"))
    assert (leased.operation_id, leased.lease_token) == ("op-1", "token-1")  # type: ignore[attr-defined]
    reply = method.output_type.fields_by_name
    for field in kind.fields:
        assert reply[field.name].type == FieldDescriptor.TYPE_STRING, field.name


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_its_table_is_owner_bearing(kind: SubjectKind) -> None:
    assert "owner_user_id" in Base.metadata.tables[kind.table].columns


def test_spellings_and_sections_are_unique() -> None:
    for spelling in ("name", "url_segment", "section"):
        values = [getattr(kind, spelling) for kind in KINDS]
        assert len(set(values)) == len(values), spelling
    assert END_SECTION not in {kind.section for kind in KINDS}


def test_every_kind_a_task_names_is_registered() -> None:
    named = {task.subject for task in tasks.TASKS} | {
        task.context for task in tasks.TASKS if task.context is not None
    }
    assert named <= set(KINDS)


def test_a_kind_gives_the_prompt_at_least_one_text() -> None:
    with pytest.raises(ValueError, match="at least one text"):
        SubjectKind("note", "notes", "note", "jobs", "GetJob", "### NOTE", fields=())
    assert subjects.JOB.reference_field == "job_id"
    assert subjects.CV.reference_field == "attachment_id"
