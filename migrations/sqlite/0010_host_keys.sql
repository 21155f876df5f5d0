-- Per-host upload keys (issue 14): the SHA-256 (hex) of the key the last registration
-- issued to the host's agent. The analyzer refuses, with auth on, a result batch naming
-- this host unless it carries the key. NULL: registered before keys existed.
ALTER TABLE hosts ADD COLUMN upload_key_sha256 TEXT NULL;
