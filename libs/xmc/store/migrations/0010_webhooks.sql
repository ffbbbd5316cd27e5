-- Notifications (docs/notifications.md, decision 0044): webhooks, the durable queue of
-- their deliveries, and the log of every attempt.
--
-- A webhook belongs to one experiment (xid) or to one user (owner: it applies to every
-- experiment that user created). Its secret signs each delivery and is never read back by
-- an API. Thresholds (failed_count, failed_fraction) arm the failures-over-threshold event.
CREATE TABLE webhooks (
    id bigserial PRIMARY KEY,
    xid bigint REFERENCES experiments (xid) ON DELETE CASCADE,
    owner text,
    url text NOT NULL,
    secret text NOT NULL,
    events text[] NOT NULL,
    failed_count integer,
    failed_fraction double precision,
    creator text NOT NULL,
    create_time timestamptz NOT NULL,
    CHECK ((xid IS NULL) <> (owner IS NULL))
);
CREATE INDEX webhooks_xid ON webhooks (xid) WHERE xid IS NOT NULL;
CREATE INDEX webhooks_owner ON webhooks (owner) WHERE owner IS NOT NULL;

-- The queue: one row per (event, webhook), inserted in the transaction of the state
-- change that raised the event (the transactional outbox, as task_outbox). The event's
-- facts are kept, not the body: the worker renders the same bytes from them every
-- attempt. delivery_id is the stable X-XMC-Delivery header receivers dedupe on.
-- status: pending → delivered | failed. A claimed row's next_attempt is pushed past the
-- attempt's timeout (a lease): a worker killed mid-POST leaves it due again, later.
CREATE TABLE webhook_deliveries (
    id bigserial PRIMARY KEY,
    delivery_id uuid NOT NULL UNIQUE,
    webhook_id bigint NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    xid bigint NOT NULL,
    event text NOT NULL,
    facts jsonb NOT NULL,
    status text NOT NULL DEFAULT 'pending',
    attempts integer NOT NULL DEFAULT 0,
    next_attempt timestamptz NOT NULL,
    create_time timestamptz NOT NULL,
    finish_time timestamptz
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_xid ON webhook_deliveries (xid, id);

-- Every attempt: when, what came back (an HTTP status, or the error), how long it took,
-- and the first bytes of the answer.
CREATE TABLE webhook_attempts (
    delivery bigint NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt integer NOT NULL,
    start_time timestamptz NOT NULL,
    http_status integer,
    error text NOT NULL DEFAULT '',
    latency_ms integer NOT NULL,
    response text NOT NULL DEFAULT '',
    PRIMARY KEY (delivery, attempt)
);
