UPDATE outbox SET attempts = attempts + 1, last_error = $2 WHERE id = $1;
