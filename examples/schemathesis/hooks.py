"""Schemathesis hooks for Autumn's examples (loaded with SCHEMATHESIS_HOOKS).

A client that follows the retry protocol sends a new Idempotency-Key with
each new operation and the same key only with a retry of it. Schemathesis
draws header values from a small space, so two different valid requests
would often share a key, and the second would rightly be refused with 422
idempotency_key_reused. Valid requests therefore get a fresh key each, as
a real client's would; invalid ones keep the (malformed) key Schemathesis
drew, so the refusals of bad keys are still tested.
"""

import uuid

import schemathesis
from schemathesis.generation import GenerationMode


@schemathesis.hook
def before_call(context, case, kwargs):
    headers = case.headers or {}
    key = next((name for name in headers if name.lower() == "idempotency-key"), None)
    meta = getattr(case, "meta", None)
    positive = meta is None or meta.generation.mode == GenerationMode.POSITIVE
    if key is not None and positive:
        headers[key] = str(uuid.uuid4())
