"""Tenant logic (event type schemas, endpoint filters) judged within budgets.

:mod:`relay.sandbox.work` says what is judged and the budgets, :mod:`relay.sandbox.pool`
runs the evaluator children (:mod:`relay.sandbox.child`), :mod:`relay.sandbox.wire` is
what goes through their pipes.
"""

from relay.sandbox.pool import Sandbox, SandboxUnavailable
from relay.sandbox.work import Inline, Judge, SchemaFailure, Verdict, Work

__all__ = ["Inline", "Judge", "Sandbox", "SandboxUnavailable", "SchemaFailure", "Verdict", "Work"]
