-- Registry of hosts and their RNICs (controller). Times are unix ms, ids are dense integers
-- that are never reused (AUTOINCREMENT), because the analyzer indexes vectors by RNIC id.
CREATE TABLE hosts (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    name             TEXT    NOT NULL UNIQUE,
    epoch            BIGINT  NOT NULL,
    registrations    BIGINT  NOT NULL,
    registered_at_ms BIGINT  NOT NULL
);

CREATE TABLE rnics (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    host_id          BIGINT  NOT NULL REFERENCES hosts(id) ON DELETE CASCADE,
    ifname           TEXT    NOT NULL,
    ip               TEXT    NOT NULL,
    gid              TEXT    NULL,
    qpn              BIGINT  NOT NULL,
    port             BIGINT  NOT NULL,
    -- resolved ToR (what the analyzer groups by)
    tor              TEXT    NOT NULL,
    -- the agent's own ToR hint, kept so a changed topology file can re-resolve `tor`
    tor_hint         TEXT    NULL,
    rail             BIGINT  NULL,
    gateway          TEXT    NULL,
    epoch            BIGINT  NOT NULL,
    registered_at_ms BIGINT  NOT NULL,
    UNIQUE (host_id, ifname)
);

CREATE INDEX rnics_ip ON rnics (ip);
