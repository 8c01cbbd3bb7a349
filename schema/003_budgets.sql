-- 003_budgets.sql - every result records the budget it ran under and how many
-- passes over the training tokens it made.
--
-- A run's budget is wall-clock seconds or training tokens; exactly one of
-- time_budget_s and token_budget is nonzero (the spec's rule). epochs is
-- tokens seen / training tokens of the dataset. Rows written before this
-- migration hold NULL in all three.

ALTER TABLE results ADD COLUMN time_budget_s REAL;
ALTER TABLE results ADD COLUMN token_budget INTEGER;
ALTER TABLE results ADD COLUMN epochs REAL;
