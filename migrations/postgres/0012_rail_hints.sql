-- The rail an agent gave, kept apart from the rail in force (`rail`), which node labels
-- supply when the agent gives none: a label added or removed later re-derives `rail`.
ALTER TABLE rnics ADD COLUMN rail_hint BIGINT NULL;
UPDATE rnics SET rail_hint = rail;
