-- The push API (xmc.v1.WatchService, docs/watch.md, decision 0043): the changes of an
-- experiment are read back, in commit order, from the tables they are already written to.
--
-- txid is the writing transaction's id (pg_current_xact_id(), 64 bits, never wraps),
-- stored as bigint so every driver and index reads it without a custom codec. A reader
-- takes only rows whose txid is below its snapshot's xmin: every transaction below xmin
-- has ended, so no row with such a txid can still appear, and (txid, source, id) is an
-- order no later commit can insert into. A bigserial id is not: a transaction that
-- commits later can hold a smaller id.
--
-- The column is added without a default and the default set afterwards, so the migration
-- does not rewrite the tables: rows written before it keep txid NULL, which no watch
-- reads (they predate every cursor). The default costs each insert one function call. The hot observation path (history COPY,
-- message INSERT) names its columns, so the default fills txid without a statement
-- changing. BRIN indexes: txid grows with the heap's order (rows are only appended), so a
-- few block ranges answer "txid >= horizon" and the index costs the insert next to
-- nothing, where a btree would be one more index entry per history row.
ALTER TABLE work_unit_status_history ADD COLUMN txid bigint;
ALTER TABLE work_unit_status_history ALTER COLUMN txid SET DEFAULT (pg_current_xact_id()::text::bigint);
CREATE INDEX work_unit_status_history_txid ON work_unit_status_history USING brin (txid);

ALTER TABLE status_messages ADD COLUMN txid bigint;
ALTER TABLE status_messages ALTER COLUMN txid SET DEFAULT (pg_current_xact_id()::text::bigint);
CREATE INDEX status_messages_txid ON status_messages USING brin (txid);

-- Experiment-level changes are rare (created, active state, launch state): one explicit
-- row each, written where they happen (xmc.store.experiments). Dropped by the janitor
-- after 8 days, a day past the longest a cursor is accepted (7 days).
CREATE TABLE experiment_events (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    txid         bigint      NOT NULL DEFAULT (pg_current_xact_id()::text::bigint),
    xid          bigint      NOT NULL,
    kind         text        NOT NULL CHECK (kind IN ('created', 'state')),
    active_state smallint    NOT NULL,
    launch_state smallint    NOT NULL,
    record_time  timestamptz NOT NULL
);
CREATE INDEX experiment_events_txid ON experiment_events (txid, id);
CREATE INDEX experiment_events_record_time ON experiment_events (record_time);
