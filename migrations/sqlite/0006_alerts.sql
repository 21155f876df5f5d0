-- Alert webhooks (alerts crate). Times are unix ms.

-- Receivers added through the API (config-file receivers live in the config, not here).
-- `secret` is the HMAC key of the signature header; it is never returned by the API.
-- `priorities` / `components` are JSON arrays of filters ('[]' = everything).
CREATE TABLE alert_receivers (
    name        TEXT    NOT NULL PRIMARY KEY,
    url         TEXT    NOT NULL,
    secret      TEXT    NULL,
    priorities  TEXT    NOT NULL,
    components  TEXT    NOT NULL,
    created_ms  BIGINT  NOT NULL
);

-- What the alerts service has seen of each problem episode: the priority frozen at firing
-- ('P0' | 'P1' | 'P2' | 'unknown') and when it fired / resolved. No foreign key: the
-- analyzer stays free to purge problems; rows are pruned with the outbox retention.
CREATE TABLE alert_problems (
    problem_id  BIGINT  NOT NULL PRIMARY KEY,
    priority    TEXT    NOT NULL,
    fired_ms    BIGINT  NOT NULL,
    resolved_ms BIGINT  NULL
);
CREATE INDEX alert_problems_resolved ON alert_problems (resolved_ms);

-- One row per (problem episode, receiver) that was notified firing: the de-duplication
-- record ("one firing and one resolved per episode per receiver, ever").
CREATE TABLE alert_episodes (
    problem_id  BIGINT  NOT NULL,
    receiver    TEXT    NOT NULL,
    fired_ms    BIGINT  NOT NULL,
    resolved_ms BIGINT  NULL,
    PRIMARY KEY (problem_id, receiver)
);

-- The durable outbox: one row per notification of one alert to one receiver. Enqueued in
-- the transaction that records the episode; the sender claims due rows by pushing
-- `due_ms` forward (a lease), then marks them delivered, failed or due again (backoff).
-- `alert` is the JSON of the Alertmanager v4 alert object, built at enqueue time.
CREATE TABLE alert_outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    receiver    TEXT    NOT NULL,
    problem_id  BIGINT  NOT NULL,
    -- 'firing' | 'resolved'
    status      TEXT    NOT NULL,
    priority    TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    component   TEXT    NOT NULL,
    alert       TEXT    NOT NULL,
    -- 'pending' | 'delivered' | 'failed'
    state       TEXT    NOT NULL,
    attempts    BIGINT  NOT NULL,
    due_ms      BIGINT  NOT NULL,
    created_ms  BIGINT  NOT NULL,
    finished_ms BIGINT  NULL,
    last_error  TEXT    NULL,
    UNIQUE (receiver, problem_id, status)
);
CREATE INDEX alert_outbox_due ON alert_outbox (state, due_ms);
CREATE INDEX alert_outbox_created ON alert_outbox (created_ms);

-- Small durable settings of the alerts service ('since_ms': when it first ran; problems
-- resolved before that are history, not news).
CREATE TABLE alert_meta (
    name  TEXT   NOT NULL PRIMARY KEY,
    value BIGINT NOT NULL
);
