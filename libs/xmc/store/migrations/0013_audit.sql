-- The audit trail (issue 29 part 4, docs/audit.md, docs/decisions/0047-the-audit-trail.md):
-- who asked for each change (the principal: the authenticated email or service account),
-- and in which request (x-request-id, caller-supplied or made by the ESS).
--
-- History rows carry both. Rows written before this migration keep NULLs (no rewrite: the
-- columns have no default). The hot observation path writes them in its COPY/INSERT
-- (one batch, one principal and request id), so the per-row cost stays a constant.
ALTER TABLE work_unit_status_history ADD COLUMN principal text, ADD COLUMN request_id text;

-- An Operation's principal is original_requester, already stored (the published
-- contract's OperationMetadata.original_requester); only the request id is new. The
-- empty default keeps the ADD a catalogue change (no rewrite).
ALTER TABLE operations ADD COLUMN request_id text NOT NULL DEFAULT '';
CREATE INDEX operations_requester ON operations (original_requester, create_time);

-- Calls that change something but write neither a history row nor an Operation
-- (experiment edits, launch state, work-unit edits, retry policies, webhooks, artifacts,
-- scheduling pause/resume): one row each, in the transaction of the change.
CREATE TABLE audit_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_time  timestamptz NOT NULL,
    principal   text        NOT NULL,
    request_id  text        NOT NULL,
    -- The RPC's name (UpdateExperiment, PauseScheduling, …).
    action      text        NOT NULL,
    -- The resource changed: experiments/1, experiments/1/workUnits/2, a webhook, scheduling.
    target      text        NOT NULL,
    -- The experiment it belongs to; NULL when none (scheduling, a user's webhook).
    xid         bigint,
    -- One line: what changed (the update mask, the policy, the reason).
    detail      text        NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_time ON audit_log (event_time, id);
CREATE INDEX audit_log_principal ON audit_log (principal, event_time);
CREATE INDEX audit_log_xid ON audit_log (xid, event_time);
