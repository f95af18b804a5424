"""What a refusal of an operation on a stored record names (registry.core.problems.refuse_on_record),
the one rule for revoking a ticket and deciding an approval: not_found names nothing."""

from __future__ import annotations

import pytest

from auth.policy import NOT_FOUND_CODE, Refusal
from db.approvals import ApprovalRow
from registry.core.problems import ProblemError, RefusalSubject, refuse_on_record


class Stored:
    tenant = "acme"
    ref = "acme/ledger-agent/ledger.reverse@1.0.0"
    scopes = ["ledger:write", "ledger:read", "ledger:write"]
    on_behalf_of = "user-19"


def test_no_refusal_raises_nothing():
    refuse_on_record(None, Stored())
    refuse_on_record(None, None)


@pytest.mark.parametrize("record", [Stored(), None])
def test_not_found_names_no_record(record):
    with pytest.raises(ProblemError) as raised:
        refuse_on_record(Refusal(code=NOT_FOUND_CODE, message="no such ticket"), record)
    assert raised.value.subject == RefusalSubject(tenant=None, ref=None, scopes=(), on_behalf_of=None, event=None)


def test_any_other_refusal_names_the_record():
    with pytest.raises(ProblemError) as raised:
        refuse_on_record(Refusal(code="tenant_mismatch", message="not yours"), Stored())
    assert raised.value.subject == RefusalSubject(
        tenant="acme", ref=Stored.ref, scopes=("ledger:read", "ledger:write"), on_behalf_of="user-19", event=None
    )


def test_a_stored_row_is_a_subject():
    assert {"tenant", "ref", "scopes", "on_behalf_of"} <= set(ApprovalRow.__struct_fields__)
