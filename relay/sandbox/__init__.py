"""Tenant logic (event type schemas, endpoint filters) judged within budgets.

:mod:`relay.sandbox.work` says what is judged and the budgets, :mod:`relay.sandbox.pool`
shares the evaluator children (:mod:`relay.sandbox.child`) among the apps,
:mod:`relay.sandbox.children` starts and ends them, :mod:`relay.sandbox.wire` is what
goes through their pipes and their verdict files.
"""

from relay.sandbox.children import SandboxUnavailable
from relay.sandbox.pool import Sandbox
from relay.sandbox.work import Inline, Judge, SchemaFailure, Verdict, Work

__all__ = ["Inline", "Judge", "Sandbox", "SandboxUnavailable", "SchemaFailure", "Verdict", "Work"]
