-- Training tasks (controller, SkeletonHunter §5.1): a task and its endpoints (RNICs named by
-- host and interface, which need not be registered yet). Ids are never reused. `ready` is
-- 0/1: the endpoint registered itself ready to be probed (incremental activation).
CREATE TABLE tasks (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT    NOT NULL UNIQUE,
    created_at_ms BIGINT  NOT NULL,
    updated_at_ms BIGINT  NOT NULL
);

CREATE TABLE task_endpoints (
    task_id   BIGINT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    -- position in the task spec (endpoints are served in this order)
    pos       BIGINT NOT NULL,
    host      TEXT   NOT NULL,
    rnic      TEXT   NOT NULL,
    rail      BIGINT NULL,
    namespace TEXT   NULL,
    pod       TEXT   NULL,
    ready     BIGINT NOT NULL,
    PRIMARY KEY (task_id, pos),
    UNIQUE (task_id, host, rnic)
);
