"""The effect: a row written once per Idempotency-Key, and the API around it."""
