-- want-error: 2:8
SELECT ÿþ FROM outbox;
