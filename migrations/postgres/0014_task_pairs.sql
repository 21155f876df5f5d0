-- Per-pair probe outcomes of training tasks (C4D's matrix, issue 16): one row per task,
-- (prober RNIC, target RNIC) pair of two of its endpoints, and analysis period. Bounded by
-- analyzer.max_task_pairs per period and purged with the per-RNIC SLA rows. Times are unix
-- ms; the median network RTT is nanoseconds, NULL when no probe of the pair was answered.
CREATE TABLE task_pair_periods (
    task_id         BIGINT NOT NULL,
    period_start_ms BIGINT NOT NULL,
    period_ms       BIGINT NOT NULL,
    src_rnic        BIGINT NOT NULL,
    dst_rnic        BIGINT NOT NULL,
    probes          BIGINT NOT NULL,
    lost            BIGINT NOT NULL,
    rtt_p50_ns      BIGINT NULL,
    PRIMARY KEY (task_id, period_start_ms, src_rnic, dst_rnic)
);

-- Retention purges and the analyzer's read of every task's newest periods.
CREATE INDEX task_pair_periods_time ON task_pair_periods (period_start_ms);
