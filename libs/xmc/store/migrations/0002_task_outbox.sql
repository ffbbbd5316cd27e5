-- The transactional outbox of tasks (SPEC §6 "No intent is lost", docs/outbox.md).
--
-- Every task is inserted in the same transaction as the intent it carries; the relay in
-- the ESS publishes it to xmc-tasks-stream and keeps checking it until the Actuator says
-- how it ended. A crash between commit and XADD, a Redis outage or a Redis restart without
-- persistence therefore delays a task and never loses it. Finished rows are also the
-- Actuator's record of executed tasks: a replayed entry of a finished task is not acted on.
CREATE TABLE task_outbox (
    -- Publish order: the relay publishes due tasks in seq order, so a work unit's tasks
    -- reach the stream in the order their intents committed.
    seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id        text        NOT NULL UNIQUE,
    xid            bigint      NOT NULL,
    wid            bigint      NOT NULL,
    -- The execution the task brings about or acts on (RESTART: the new eid N+1).
    eid            bigint      NOT NULL,
    kind           smallint    NOT NULL,
    -- intent: written with the user's intent; repair: re-driven by the repair sweep.
    origin         text        NOT NULL DEFAULT 'intent' CHECK (origin IN ('intent', 'repair')),
    -- The serialized Task, unsigned: the relay signs each publish with a fresh token.
    task           bytea       NOT NULL,
    -- pending: to publish; published: on the stream, checked until finished;
    -- parked: waiting in paused_tasks for a resume; finished: the Actuator (or the relay,
    -- giving up) settled it.
    status         text        NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'published', 'parked', 'finished')),
    -- When the relay looks at the row next (publish, or check a published one).
    next_attempt   timestamptz,
    publish_count  integer     NOT NULL DEFAULT 0,
    -- Stream entry of the last publish, which the relay checks for.
    entry_id       text,
    create_time    timestamptz NOT NULL,
    published_time timestamptz,
    finished_time  timestamptz,
    -- How it ended: the Actuator's outcome (done, skipped, permanent, max_deliveries) or
    -- the relay's (abandoned).
    outcome        text,
    CHECK ((status = 'finished') = (finished_time IS NOT NULL)),
    CHECK ((status IN ('pending', 'published')) = (next_attempt IS NOT NULL))
);
CREATE INDEX task_outbox_due ON task_outbox (next_attempt)
    WHERE status IN ('pending', 'published');
-- The latest task of an execution (the repair sweep's question).
CREATE INDEX task_outbox_execution ON task_outbox (xid, wid, eid, seq);
CREATE INDEX task_outbox_finished ON task_outbox (finished_time) WHERE status = 'finished';
