-- Quotas and rate limits (docs/quotas.md, decision 0049).
--
-- quota_limits: what an admin set, per principal ('user:<email>', 'group:<name>', or
-- 'default', every user's limits unless their own row replaces them). NULL = unlimited.
CREATE TABLE quota_limits (
    principal          text PRIMARY KEY
                       CHECK (principal = 'default' OR principal ~ '^(user|group):.+$'),
    creates_per_second double precision CHECK (creates_per_second > 0),
    creates_burst      integer CHECK (creates_burst >= 1),
    live_work_units    bigint CHECK (live_work_units >= 0),
    live_experiments   bigint CHECK (live_experiments >= 0),
    update_time        timestamptz NOT NULL,
    updated_by         text NOT NULL
);

-- quota_usage: one counter row per principal that ever created something. A create
-- locks its principals' rows (in principal order) for the length of its transaction, so
-- the count it checks is the count it leaves. tokens/tokens_time: the creates-per-second
-- bucket, kept here so that every ESS replica draws from the same one.
CREATE TABLE quota_usage (
    principal        text PRIMARY KEY,
    live_work_units  bigint NOT NULL DEFAULT 0,
    live_experiments bigint NOT NULL DEFAULT 0,
    tokens           double precision,
    tokens_time      timestamptz
);

-- quota_deltas: changes of the live counts not yet folded into quota_usage. The triggers
-- below append here instead of updating quota_usage, so a unit reaching a terminal state
-- (the hot observation path) takes no lock a create holds and waits for no create; the
-- next admission of that principal (or the reconcile) folds them under the row lock.
CREATE TABLE quota_deltas (
    principal   text NOT NULL,
    work_units  integer NOT NULL DEFAULT 0,
    experiments integer NOT NULL DEFAULT 0
);
CREATE INDEX quota_deltas_principal ON quota_deltas (principal);

-- Whom a work unit or experiment counts against: the creating caller's user and groups,
-- written at create. Rows created before this migration have none and count for nobody.
-- Adding a column with a constant default rewrites nothing (Postgres 11+).
ALTER TABLE work_units ADD COLUMN quota_principals text[] NOT NULL DEFAULT '{}';
ALTER TABLE experiments ADD COLUMN quota_principals text[] NOT NULL DEFAULT '{}';

-- Live = not terminal: a work unit in STOPPED (8), COMPLETED (10) or FAILED (11) is not
-- live; an experiment is live while ACTIVE (1). The triggers fire only when liveness
-- changes (their WHEN clauses), so an observation that keeps a unit live costs one
-- comparison; every path that makes a unit live or not (create, observation, stop,
-- restart, retry, delete) is counted the same way.
CREATE FUNCTION quota_units_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO quota_deltas (principal, work_units)
    SELECT p, count(*) FROM created, unnest(created.quota_principals) AS p
    WHERE created.state NOT IN (8, 10, 11)
    GROUP BY p;
    RETURN NULL;
END $$;

CREATE FUNCTION quota_unit_liveness() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta integer;
BEGIN
    IF TG_OP = 'DELETE' THEN
        delta := -1;
        INSERT INTO quota_deltas (principal, work_units)
        SELECT p, delta FROM unnest(OLD.quota_principals) AS p;
        RETURN NULL;
    END IF;
    delta := CASE WHEN NEW.state IN (8, 10, 11) THEN -1 ELSE 1 END;
    INSERT INTO quota_deltas (principal, work_units)
    SELECT p, delta FROM unnest(NEW.quota_principals) AS p;
    RETURN NULL;
END $$;

CREATE TRIGGER work_units_quota_created AFTER INSERT ON work_units
    REFERENCING NEW TABLE AS created FOR EACH STATEMENT
    EXECUTE FUNCTION quota_units_created();

CREATE TRIGGER work_units_quota_liveness AFTER UPDATE OF state ON work_units FOR EACH ROW
    WHEN ((OLD.state IN (8, 10, 11)) IS DISTINCT FROM (NEW.state IN (8, 10, 11))
          AND cardinality(NEW.quota_principals) > 0)
    EXECUTE FUNCTION quota_unit_liveness();

CREATE TRIGGER work_units_quota_deleted AFTER DELETE ON work_units FOR EACH ROW
    WHEN (OLD.state NOT IN (8, 10, 11) AND cardinality(OLD.quota_principals) > 0)
    EXECUTE FUNCTION quota_unit_liveness();

CREATE FUNCTION quota_experiment_liveness() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO quota_deltas (principal, experiments)
        SELECT p, -1 FROM unnest(OLD.quota_principals) AS p;
    ELSE
        INSERT INTO quota_deltas (principal, experiments)
        SELECT p, CASE WHEN NEW.active_state = 1 THEN 1 ELSE -1 END
        FROM unnest(NEW.quota_principals) AS p;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER experiments_quota_created AFTER INSERT ON experiments FOR EACH ROW
    WHEN (NEW.active_state = 1 AND cardinality(NEW.quota_principals) > 0)
    EXECUTE FUNCTION quota_experiment_liveness();

CREATE TRIGGER experiments_quota_liveness AFTER UPDATE OF active_state ON experiments
    FOR EACH ROW
    WHEN ((OLD.active_state = 1) IS DISTINCT FROM (NEW.active_state = 1)
          AND cardinality(NEW.quota_principals) > 0)
    EXECUTE FUNCTION quota_experiment_liveness();

CREATE TRIGGER experiments_quota_deleted AFTER DELETE ON experiments FOR EACH ROW
    WHEN (OLD.active_state = 1 AND cardinality(OLD.quota_principals) > 0)
    EXECUTE FUNCTION quota_experiment_liveness();
