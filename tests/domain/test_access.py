"""Roles, grants and the one question every call asks: may this principal do this here?"""

from __future__ import annotations

import pytest

from helix_runner.domain.access import ADMIN, Principal, Role, parse_grants


def test_each_role_implies_what_it_says_and_no_more():
    alice = Principal("alice", parse_grants({"team-a": ["operator"], "team-b": ["approver"]}, "test"))
    assert alice.may(Role.OPERATOR, "team-a") and alice.may(Role.VIEWER, "team-a")
    assert not alice.may(Role.APPROVER, "team-a") and not alice.may(Role.ADMIN, "team-a")
    assert alice.may(Role.APPROVER, "team-b") and alice.may(Role.VIEWER, "team-b")
    assert not alice.may(Role.OPERATOR, "team-b")
    assert not alice.may(Role.VIEWER, "team-c") and not alice.everywhere(Role.VIEWER)
    assert alice.projects(Role.VIEWER) == {"team-a", "team-b"}


def test_a_grant_on_every_project_covers_projects_it_never_named():
    auditor = Principal("auditor", parse_grants({"*": ["viewer"], "ops": ["admin"]}, "test"))
    assert auditor.may(Role.VIEWER, "anything") and auditor.everywhere(Role.VIEWER)
    assert not auditor.may(Role.OPERATOR, "anything") and auditor.may(Role.OPERATOR, "ops")
    assert ADMIN.everywhere(Role.ADMIN) and all(ADMIN.may(r, "x") for r in Role)


@pytest.mark.parametrize(("grants", "message"), [
    ({"team-a": ["owner"]}, "unknown role 'owner'"),
    ({"team-a": "operator"}, "must be a list"),
    ({"": ["viewer"]}, "1-128 characters"),
    (["team-a"], "must map a project"),
])
def test_bad_grants_are_refused_with_what_is_wrong(grants, message):
    with pytest.raises(ValueError, match=message):
        parse_grants(grants, "test")
