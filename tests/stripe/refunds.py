"""Drives the simulator's refunds with the official stripe-python library (tests/integration/simulator_refunds.rs).

Creates a payment, refunds it in three parts, lists the refunds page by page both ways, retrieves one,
asks for more than is left, and calls two routes with a method Stripe does not serve. Prints one JSON
object with what the library returned or raised; the Rust test asserts on it and on the simulator.
"""

import json
import os
import sys

import stripe


def error_of(call):
    """What the library raised for `call`, or a marker that it raised nothing."""
    try:
        call()
    except stripe.StripeError as e:
        err = e.error
        return {
            "class": type(e).__name__,
            "http_status": e.http_status,
            "code": err.code if err else None,
            "type": err.type if err else None,
            "param": err.param if err else None,
            "message": err.message if err else None,
        }
    return {"class": None}


def main():
    base = os.environ["SIM_BASE"]
    client = stripe.StripeClient(
        os.environ["SIM_KEY"], base_addresses={"api": base}, max_network_retries=0
    )
    pi = client.v1.payment_intents.create(
        {"amount": 3000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": True}
    )
    created = []
    for n, amount in enumerate([500, 700, 900]):
        r = client.v1.refunds.create(
            {"payment_intent": pi.id, "amount": amount, "reason": "requested_by_customer",
             "metadata": {"payonce_operation_id": f"op_part{n}"}},
            {"idempotency_key": f"py-refund-{n}"},
        )
        created.append(r.id)
    # Same key, same parameters: the first refund again, not a fourth.
    again = client.v1.refunds.create(
        {"payment_intent": pi.id, "amount": 500, "reason": "requested_by_customer",
         "metadata": {"payonce_operation_id": "op_part0"}},
        {"idempotency_key": "py-refund-0"},
    )
    first_page = client.v1.refunds.list({"payment_intent": pi.id, "limit": 2})
    second_page = client.v1.refunds.list(
        {"payment_intent": pi.id, "limit": 2, "starting_after": first_page.data[-1].id}
    )
    before_page = client.v1.refunds.list(
        {"payment_intent": pi.id, "limit": 2, "ending_before": second_page.data[0].id}
    )
    every = [r.id for r in client.v1.refunds.list({"payment_intent": pi.id, "limit": 1}).auto_paging_iter()]
    got = client.v1.refunds.retrieve(created[1])
    out = {
        "payment_intent": pi.id,
        "created": created,
        "replayed_id": again.id,
        "first_page": {"ids": [r.id for r in first_page.data], "has_more": first_page.has_more},
        "second_page": {"ids": [r.id for r in second_page.data], "has_more": second_page.has_more},
        "before_page": {"ids": [r.id for r in before_page.data], "has_more": before_page.has_more},
        "auto_paging": every,
        "retrieved": {"id": got.id, "amount": got.amount, "status": got.status,
                      "payment_intent": got.payment_intent, "metadata": got.metadata.to_dict()},
        "too_large": error_of(lambda: client.v1.refunds.create(
            {"payment_intent": pi.id, "amount": 1000})),
        "missing": error_of(lambda: client.v1.refunds.retrieve("re_missing")),
        "delete_list": error_of(lambda: client.raw_request("delete", "/v1/refunds")),
        "delete_payment": error_of(lambda: client.raw_request("delete", f"/v1/payment_intents/{pi.id}")),
        "delete_one": error_of(lambda: client.raw_request("delete", f"/v1/refunds/{created[0]}")),
    }
    rest = client.v1.refunds.create({"payment_intent": pi.id})
    out["rest"] = {"amount": rest.amount, "status": rest.status}
    out["already_refunded"] = error_of(lambda: client.v1.refunds.create({"payment_intent": pi.id}))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
