-- Declaring the column is not a retry loop: walpost bounds attempts in its
-- own configuration (poison.max_attempts).
CREATE TABLE outbox (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    idempotency_key text NOT NULL UNIQUE,
    payload         jsonb NOT NULL,
    attempts        int NOT NULL DEFAULT 0
);
-- Resetting the counter is not an increment.
UPDATE outbox SET attempts = 0 WHERE id = $1;
