-- Fenced leader writes (docs/reconciler.md, decision 0054): the newest generation of each
-- Lease's leader that wrote through UpdateWorkUnitExecutions. Checked, and moved up, in
-- the same transaction as the write it guards, so every ESS replica refuses the same
-- stale writes. One row per Lease: a handful of rows, read on every Reconciler batch.
CREATE TABLE leader_fences (
    lease       text PRIMARY KEY,
    generation  bigint NOT NULL CHECK (generation >= 0),
    update_time timestamptz NOT NULL
);
