-- Impact (R-Pingmesh §4.3.4): problem priorities and the service performance they are judged by.
-- `priority` is 'P0' | 'P1' | 'P2' (NULL = not assessed yet); `affected_tasks` is the JSON array
-- of the task ids whose service network the problem sits in (NULL = none / not assessed).
ALTER TABLE problems ADD COLUMN priority TEXT NULL;
ALTER TABLE problems ADD COLUMN affected_tasks TEXT NULL;
CREATE INDEX problems_priority_seen ON problems (priority, last_seen_ms);

-- The same affected-task relation, indexed by task (verdicts list a task's problems).
CREATE TABLE problem_tasks (
    problem_id BIGINT NOT NULL REFERENCES problems(id) ON DELETE CASCADE,
    task_id    BIGINT NOT NULL,
    PRIMARY KEY (problem_id, task_id)
);
CREATE INDEX problem_tasks_task ON problem_tasks (task_id, problem_id);

-- Performance samples a task reports (e.g. training throughput); bounded by retention.
CREATE TABLE task_metric_samples (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id BIGINT  NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    name    TEXT    NOT NULL,
    at_ms   BIGINT  NOT NULL,
    value   REAL    NOT NULL
);
CREATE INDEX task_metric_samples_series ON task_metric_samples (task_id, name, at_ms);
CREATE INDEX task_metric_samples_at ON task_metric_samples (at_ms);

-- What a task's performance is judged against: one objective per task. `baseline` NULL = learn it:
-- `learned_baseline` is then set once, to the median of the first samples (kept when retention
-- drops those samples); `higher_is_better` is 0/1.
CREATE TABLE task_objectives (
    task_id               BIGINT  NOT NULL PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    metric                TEXT    NOT NULL,
    higher_is_better      BIGINT  NOT NULL,
    baseline              REAL    NULL,
    learned_baseline      REAL    NULL,
    tolerable_degradation REAL    NOT NULL,
    updated_at_ms         BIGINT  NOT NULL
);
