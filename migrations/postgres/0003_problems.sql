-- Diagnosed problems (analyzer): one row per problem episode. At most one active row per
-- (kind, component_kind, component); it is updated while the symptom persists and marked
-- resolved when it stops. Times are unix ms; evidence is the JSON of proto::api::Evidence.
CREATE TABLE problems (
    id             BIGSERIAL PRIMARY KEY,
    -- proto::api::ProblemKind, snake_case ('link_fault', 'host_down', ...)
    kind           TEXT    NOT NULL,
    -- proto::api::ComponentKind ('rnic' | 'link' | 'switch' | 'host' | 'agent')
    component_kind TEXT    NOT NULL,
    component      TEXT    NOT NULL,
    -- 'active' | 'resolved'
    state          TEXT    NOT NULL,
    confidence     DOUBLE PRECISION NOT NULL,
    -- 1 when the network is to blame
    network        BIGINT  NOT NULL,
    first_seen_ms  BIGINT  NOT NULL,
    last_seen_ms   BIGINT  NOT NULL,
    resolved_ms    BIGINT  NULL,
    evidence       TEXT    NOT NULL
);

CREATE UNIQUE INDEX problems_one_active ON problems (kind, component_kind, component) WHERE state = 'active';
-- Listing by state and recency.
CREATE INDEX problems_state_seen ON problems (state, last_seen_ms);
CREATE INDEX problems_seen ON problems (last_seen_ms);
