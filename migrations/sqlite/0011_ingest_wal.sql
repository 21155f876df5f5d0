-- Write-ahead log of accepted result batches (issue 14): a batch is stored here before the
-- analyzer answers 200, replayed at start, and deleted once every period it touched is in
-- sla_periods. `last_period_ms` is the start of the newest period its records fall in.
CREATE TABLE ingest_wal (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    received_ms    BIGINT  NOT NULL,
    last_period_ms BIGINT  NOT NULL,
    body           BLOB    NOT NULL
);
