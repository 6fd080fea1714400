"""The Svix-compatible API under ``/api/v1/``: the routes the official Svix SDKs call.

One module per resource (applications, endpoints, messages, attempts, event types,
portal access), thin handlers over the same services as ``/v1/`` (publishing, endpoint
lifecycle, reads, replay): no second path for delivery, signing or storage. What Svix
offers that relay does not is refused with a 4xx (docs/guides/svix.md lists each).

This package's ``__init__`` imports nothing: :mod:`relay.api.common` imports
:mod:`relay.api.svix.errors` and :mod:`relay.api.access` imports
:mod:`relay.api.svix.rules`; :mod:`relay.api` imports the route modules.
"""
