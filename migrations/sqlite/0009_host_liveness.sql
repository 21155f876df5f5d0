-- Upload liveness of each agent as the analyzer last saved it (every few seconds while
-- the host uploads), so a host that went silent before an analyzer restart is still
-- reported down after it. Times are unix ms.
CREATE TABLE host_liveness (
    host_id         BIGINT  NOT NULL PRIMARY KEY,
    epoch           BIGINT  NOT NULL,
    last_upload_ms  BIGINT  NOT NULL
);
