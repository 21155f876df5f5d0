-- Cluster probe keys (issue 8): the MAC keys agents tag PROBE/ACK packets with. Every
-- controller sharing this database serves the same keys; one of them adds the next key
-- each probe_key_rotate_s (ids are consecutive: an insert that loses the race is a no-op).
-- `key_hex` is a secret: it leaves the controller only in agent registration and pinglist
-- replies. Times are unix ms.
CREATE TABLE probe_keys (
    id          BIGINT  NOT NULL PRIMARY KEY,
    key_hex     TEXT    NOT NULL,
    created_ms  BIGINT  NOT NULL
);
