"""The one boundary where the Kubernetes client's refusals become benchlib's errors or values."""

from __future__ import annotations

import json

import kubernetes
import pytest

from benchlib.base.errors import TargetError
from benchlib.targets.kubernetes.api import Refused, absent, attempt, refusal


def refused(status: int, message: str):
    """The client's own exception, as it raises it for an HTTP error (status and JSON body)."""

    def call():
        exc = kubernetes.client.ApiException(status=status, reason="refused")
        exc.body = json.dumps({"kind": "Status", "message": message})
        raise exc

    return call


def test_a_refusal_becomes_a_target_error_naming_what_was_asked_and_the_apis_reason():
    with pytest.raises(TargetError) as exc, refusal("cannot create pod p"):
        refused(403, 'pods is forbidden: User "x" cannot create')()
    assert str(exc.value) == 'kubernetes: cannot create pod p: 403 pods is forbidden: User "x" cannot create'


def test_an_attempt_returns_the_answer_or_the_refusal_as_a_value():
    assert attempt(lambda: "answer") == "answer"
    assert attempt(refused(400, "no previous container")) == Refused(400, "400 no previous container")


def test_absent_tells_a_missing_object_from_a_refusal():
    assert absent(refused(404, 'pods "p" not found'), "cannot delete pod p") is True
    assert absent(lambda: None, "cannot delete pod p") is False
    with pytest.raises(TargetError, match=r"^kubernetes: cannot delete pod p: 500 etcd timed out$"):
        absent(refused(500, "etcd timed out"), "cannot delete pod p")
