"""Webhooks: a tenancy's endpoints told of its containers' status changes.

* ``models``: the tables (endpoint, delivery outbox, attempt log) and request/response shapes;
* ``outbox``: the one call the status-changing writes make, in their own transaction;
* ``ssrf``: which URLs and addresses a delivery may reach;
* ``signing``: the HMAC-SHA256 signature scheme (and the verifier tenants copy);
* ``store``: queries and writes of the routes and the dispatcher;
* ``dispatcher``: the thread that delivers due events with exponential back-off.

The scheme follows Stripe's webhook signatures (https://docs.stripe.com/webhooks#verify-manually):
the signed payload is ``timestamp + "." + body``, HMAC-SHA256 with the endpoint's secret,
and receivers refuse timestamps outside a tolerance window (replay protection). The
header names follow the Standard Webhooks specification's (webhook-id,
webhook-timestamp, webhook-signature; https://www.standardwebhooks.com/), prefixed
``Gpucaas-``.
"""
