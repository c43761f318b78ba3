WITH claimed AS (
    UPDATE outbox SET sent_at = now() -- want: OBX004
    WHERE id = $1
    RETURNING payload
)
SELECT payload FROM claimed;
NOTIFY outbox_events;
