-- Scale-out coordination (several controller and analyzer instances over one
-- PostgreSQL; with SQLite one instance runs and these tables stay empty). Times are unix
-- ms taken from the instances' clocks (NTP-synchronized; leases last seconds).

-- Every running instance: its role ('controller' | 'analyzer'), the base URL agents and
-- peers reach it at, and its latest heartbeat. Rows of dead instances age out.
CREATE TABLE instances (
    id           TEXT    NOT NULL PRIMARY KEY,
    role         TEXT    NOT NULL,
    url          TEXT    NOT NULL,
    heartbeat_ms BIGINT  NOT NULL
);

-- Leases: 'controller/leader', 'analyzer/tomography' and 'shard/<n>'. A lease is taken
-- or renewed by one conditional upsert (only by its holder or once expired), so two
-- instances never hold it at once.
CREATE TABLE leases (
    name       TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    expires_ms BIGINT  NOT NULL
);

-- Per analyzer instance, the newest summary of the anomalous flows its shards' agents
-- probed (JSON: the tomography's observations, elements of failed and ok paths with
-- counts), merged by the holder of 'analyzer/tomography'. Only summaries of instances
-- still holding shard leases are merged, so a dead instance's last one never counts twice.
CREATE TABLE flow_summaries (
    holder   TEXT    NOT NULL PRIMARY KEY,
    tick_ms  BIGINT  NOT NULL,
    body     TEXT    NOT NULL
);
