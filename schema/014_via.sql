-- 014_via.sql - how an agent's proposal came: experiments.via is "webhook"
-- (the daemon's agent hook got it in a reply) or "mcp" (an MCP client called
-- the submit tool, over stdio or /mcp); NULL for a person's submission
-- (source api or cli). The source stays "agent" for both, so the queue
-- orders them alike. Every agent proposal before this came by the webhook.

ALTER TABLE experiments ADD COLUMN via TEXT CHECK (via IN ('webhook', 'mcp'));
UPDATE experiments SET via = 'webhook' WHERE source = 'agent';
