-- Per-period SLA figures (analyzer): one row per scope (cluster, ToR pair, RNIC)
-- and analysis period. Percentiles are nanoseconds, NULL when the period had no
-- successful probe in that scope. Times are unix ms.
CREATE TABLE sla_periods (
    period_start_ms         BIGINT NOT NULL,
    period_ms               BIGINT NOT NULL,
    -- 'cluster' | 'tor_pair' | 'rnic'
    scope                   TEXT    NOT NULL,
    -- 'cluster', '<prober tor>-><target tor>', or the RNIC id in decimal
    scope_key               TEXT    NOT NULL,
    probes                  BIGINT NOT NULL,
    timeouts                BIGINT NOT NULL,
    network_rtt_p50_ns      BIGINT NULL,
    network_rtt_p90_ns      BIGINT NULL,
    network_rtt_p99_ns      BIGINT NULL,
    network_rtt_p999_ns     BIGINT NULL,
    prober_delay_p50_ns     BIGINT NULL,
    prober_delay_p90_ns     BIGINT NULL,
    prober_delay_p99_ns     BIGINT NULL,
    prober_delay_p999_ns    BIGINT NULL,
    responder_delay_p50_ns  BIGINT NULL,
    responder_delay_p90_ns  BIGINT NULL,
    responder_delay_p99_ns  BIGINT NULL,
    responder_delay_p999_ns BIGINT NULL,
    app_rtt_p50_ns          BIGINT NULL,
    app_rtt_p90_ns          BIGINT NULL,
    app_rtt_p99_ns          BIGINT NULL,
    app_rtt_p999_ns         BIGINT NULL,
    PRIMARY KEY (scope, scope_key, period_start_ms)
);

-- Scope-wide time-range queries and retention purges.
CREATE INDEX sla_periods_scope_time ON sla_periods (scope, period_start_ms);
-- Newest-period lookup at analyzer start.
CREATE INDEX sla_periods_time ON sla_periods (period_start_ms);
