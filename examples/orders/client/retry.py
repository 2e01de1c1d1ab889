"""Places one order through a client generated from the orders example's
OpenAPI document, the way a careful client retries: one new
Idempotency-Key for the operation, the same key again for the retry.

    openapi-python-client generate --path openapi.json --meta none \
        --output-path orders_client
    python retry.py http://127.0.0.1:3000

The second attempt stands in for a retry after a timeout: it gets the
first attempt's answer back (X-Idempotent-Replayed: true) and no second
order is made. Prints what it saw as one JSON line.
"""

import json
import sys
import uuid

from orders_client import Client
from orders_client.api.default import create_order, show_order
from orders_client.models import NewOrder


def main(base_url: str) -> None:
    client = Client(base_url=base_url, raise_on_unexpected_status=True)
    key = str(uuid.uuid4())
    order = NewOrder(item="tea", qty=2)

    first = create_order.sync_detailed(client=client, body=order, idempotency_key=key)
    retry = create_order.sync_detailed(client=client, body=order, idempotency_key=key)
    shown = show_order.sync(client=client, id=first.parsed.id)

    print(
        json.dumps(
            {
                "first": {"status": first.status_code, "id": str(first.parsed.id)},
                "retry": {
                    "status": retry.status_code,
                    "id": str(retry.parsed.id),
                    "replayed": retry.headers.get("x-idempotent-replayed"),
                },
                "location": first.headers.get("location"),
                "shown": str(shown.id),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
