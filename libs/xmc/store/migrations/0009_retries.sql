-- Automatic retries (issue 28, docs/retries.md, docs/decisions/0042-retries-in-the-failing-transaction.md).
--
-- One row per FAILED execution whose failure was judged against a retry policy, written in
-- the transaction that records the FAILED state: the primary key on the failed execution
-- is what makes a retry exactly-once (a second judgement of one failure cannot insert).
-- For a retry, the same transaction archives the execution, makes retry_eid current in
-- RESTARTING and puts its RESTART task in task_outbox, due at due_time.
CREATE TABLE retry_decisions (
    xid          bigint      NOT NULL,
    wid          bigint      NOT NULL,
    -- The execution that failed.
    eid          bigint      NOT NULL,
    -- xmc.model.retries.Verdict: retry, not_matched, never, exhausted, disruptions.
    verdict      text        NOT NULL,
    -- The failed execution's attempt and the policy's budget at the time.
    attempt      integer     NOT NULL CHECK (attempt >= 1),
    max_attempts integer     NOT NULL CHECK (max_attempts >= 1),
    -- The facts the policy was matched against (internal.v1.RunFailure).
    exit_code    integer,
    disrupted    boolean     NOT NULL,
    -- One sentence: why (not) retried.
    reason       text        NOT NULL,
    -- For a retry: the new execution, its attempt, whether this retry spent an attempt,
    -- the disruption retries of the chain so far, and when its task is due.
    retry_eid    bigint,
    retry_attempt integer,
    counted      boolean,
    disruptions  integer     NOT NULL DEFAULT 0,
    due_time     timestamptz,
    operation    text,
    decided_time timestamptz NOT NULL,
    PRIMARY KEY (xid, wid, eid),
    FOREIGN KEY (xid, wid) REFERENCES work_units (xid, wid) ON DELETE CASCADE
);
-- The attempt of an execution a retry made: looked up when that execution fails in turn.
CREATE UNIQUE INDEX retry_decisions_retry_eid ON retry_decisions (xid, wid, retry_eid)
    WHERE retry_eid IS NOT NULL;

-- The cluster's retry cap (retries per minute): the time the next retry may start at
-- the earliest. One row, locked by the transaction that schedules a retry, so retries
-- across ESS replicas are spaced without a clock of their own.
CREATE TABLE retry_slots (
    id        smallint    PRIMARY KEY CHECK (id = 1),
    next_free timestamptz NOT NULL
);

-- An experiment's default retry policy for its units (JSON, xmc.model.retry_policy); a
-- unit's own xmc.dev/retry-policy annotation wins over it. NULL: no default.
ALTER TABLE experiments ADD COLUMN retry_policy text;

-- A retry's RESTART task is an outbox row of its own origin.
ALTER TABLE task_outbox DROP CONSTRAINT task_outbox_origin_check,
    ADD CONSTRAINT task_outbox_origin_check CHECK (origin IN ('intent', 'repair', 'retry'));
