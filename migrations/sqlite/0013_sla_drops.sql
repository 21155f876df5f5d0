-- Service-network SLAs (R-Pingmesh §5): rows of scope 'task' (key: task name) and
-- 'service' (key 'service') join the cluster, ToR-pair and RNIC rows, and every row
-- splits its timeouts into RNIC drops (to or from an RNIC with an RNIC-fault problem)
-- and switch-network drops; the rest were hosts down, restarted or noisy.
ALTER TABLE sla_periods ADD COLUMN rnic_drops BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sla_periods ADD COLUMN switch_drops BIGINT NOT NULL DEFAULT 0;
-- Stored rows had no split: their timeouts count as switch drops.
UPDATE sla_periods SET switch_drops = timeouts;
