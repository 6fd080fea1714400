"""Who may call which ``/api/v1`` route: one line each, read by :mod:`relay.api.access`.

The scopes are ``/v1``'s (``read``, ``manage``, ``publish``; the event type catalog
written by the operator only). The app in a path is checked by the handlers
(:func:`relay.api.svix.base.app_of`): an app's key or portal session that names another
app gets the 404 a missing app gets.
"""

from __future__ import annotations

from relay.domain.access import ADMIN_ONLY, Rule

READ, MANAGE, PUBLISH = Rule("read"), Rule("manage"), Rule("publish")
OWN = Rule("manage", portal=False)  # the app itself: its record, its portal sessions

APP = "/api/v1/app/{app_id}"
ENDPOINT = APP + "/endpoint/{endpoint_id}"
MSG = APP + "/msg/{msg_id}"

RULES: dict[str, Rule] = {
    "GET /api/v1/app": READ,
    "POST /api/v1/app": OWN,
    f"GET {APP}": READ,
    f"PUT {APP}": OWN,
    f"PATCH {APP}": OWN,
    f"DELETE {APP}": OWN,
    f"GET {APP}/endpoint": READ,
    f"POST {APP}/endpoint": MANAGE,
    f"GET {ENDPOINT}": READ,
    f"PUT {ENDPOINT}": MANAGE,
    f"PATCH {ENDPOINT}": MANAGE,
    f"DELETE {ENDPOINT}": MANAGE,
    f"GET {ENDPOINT}/secret": MANAGE,
    f"POST {ENDPOINT}/secret/rotate": MANAGE,
    f"GET {ENDPOINT}/headers": MANAGE,
    f"PUT {ENDPOINT}/headers": MANAGE,
    f"PATCH {ENDPOINT}/headers": MANAGE,
    f"POST {ENDPOINT}/recover": MANAGE,
    f"GET {ENDPOINT}/msg": READ,
    f"GET {APP}/msg": READ,
    f"POST {APP}/msg": PUBLISH,
    f"GET {MSG}": READ,
    f"GET {MSG}/endpoint": READ,
    f"GET {MSG}/attempt/{{attempt_id}}": READ,
    f"POST {MSG}/endpoint/{{endpoint_id}}/resend": MANAGE,
    f"GET {APP}/attempt/endpoint/{{endpoint_id}}": READ,
    f"GET {APP}/attempt/msg/{{msg_id}}": READ,
    "GET /api/v1/event-type": READ,
    "GET /api/v1/event-type/{event_type_name}": READ,
    "POST /api/v1/event-type": ADMIN_ONLY,
    "PUT /api/v1/event-type/{event_type_name}": ADMIN_ONLY,
    "PATCH /api/v1/event-type/{event_type_name}": ADMIN_ONLY,
    "DELETE /api/v1/event-type/{event_type_name}": ADMIN_ONLY,
    "POST /api/v1/auth/app-portal-access/{app_id}": OWN,
}
