-- Accounting (docs/usage.md, decision 0045): what each work unit asked for, and when each
-- execution ran, so usage over any time range is a range read and not a walk of history.

-- What a unit asked of the cluster, summed over its pods the way Kubernetes counts a pod's
-- request (xmc.model.usage.requested_resources), and the LocalQueue it was submitted to.
-- Written by CreateWorkUnit in the create transaction; a restart runs the same spec, so
-- one row serves every execution. Units created before this migration have no row: their
-- resources are unknown (their run time is still counted).
CREATE TABLE work_unit_resources (
    xid            bigint NOT NULL,
    wid            bigint NOT NULL,
    queue          text   NOT NULL,
    cpu_millicores bigint NOT NULL CHECK (cpu_millicores >= 0),
    memory_bytes   bigint NOT NULL CHECK (memory_bytes >= 0),
    -- Accelerators of all types: GPUs, and TPU chips apart.
    gpus           bigint NOT NULL CHECK (gpus >= 0),
    tpu_chips      bigint NOT NULL CHECK (tpu_chips >= 0),
    -- {"nvidia-tesla-a100": 8, "tpu-v5-lite-podslice": 4}: count per accelerator type.
    accelerators   jsonb  NOT NULL DEFAULT '{}',
    PRIMARY KEY (xid, wid),
    FOREIGN KEY (xid, wid) REFERENCES work_units (xid, wid) ON DELETE CASCADE
);

-- One row per stretch an execution spent running (RUNNING or PARTIALLY_FAILED: its pods
-- hold their resources in both). end_time NULL: still running. Maintained by the trigger
-- below from the history rows every writer already inserts, in the same transaction, so
-- no write path changes and none pays a round trip for it. Times are state_update_time
-- (the writer's clock); an end that a skewed clock puts before its start is the start.
CREATE TABLE execution_runs (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    xid        bigint      NOT NULL,
    wid        bigint      NOT NULL,
    eid        bigint      NOT NULL,
    start_time timestamptz NOT NULL,
    end_time   timestamptz,
    -- Counted into the ESS's Prometheus counters (xmc_ess_*_seconds_total) once closed.
    metered    boolean     NOT NULL DEFAULT false,
    CHECK (end_time >= start_time)
);
-- "Ran at some time in [since, until)" is one GiST range search (an open run's range is
-- unbounded above), whatever the age of the range or the size of the table.
CREATE INDEX execution_runs_span ON execution_runs
    USING gist (tstzrange(start_time, end_time, '[)'));
CREATE INDEX execution_runs_unit ON execution_runs (xid, wid, eid);
CREATE INDEX execution_runs_open ON execution_runs (xid, wid) WHERE end_time IS NULL;
CREATE INDEX execution_runs_unmetered ON execution_runs (id)
    WHERE end_time IS NOT NULL AND NOT metered;

-- A history row that enters the run states opens a run; one that leaves them (a stop, a
-- failure, a preemption to DESCHEDULING, a restart's row of the next execution) closes
-- the unit's open run at its time. The WHEN clause is checked in C for each row and queues
-- nothing for the changes that stay on one side (most of them), and an AFTER ROW trigger
-- keeps COPY's multi-row insert.
CREATE FUNCTION xmc_track_execution_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.old_state IN (4, 5) THEN
        UPDATE execution_runs SET end_time = greatest(NEW.state_update_time, start_time)
        WHERE xid = NEW.xid AND wid = NEW.wid AND end_time IS NULL;
    ELSE
        INSERT INTO execution_runs (xid, wid, eid, start_time)
        VALUES (NEW.xid, NEW.wid, NEW.eid, NEW.state_update_time);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER work_unit_status_history_runs
    AFTER INSERT ON work_unit_status_history
    FOR EACH ROW
    WHEN ((NEW.old_state IN (4, 5)) IS DISTINCT FROM (NEW.new_state IN (4, 5)))
    EXECUTE FUNCTION xmc_track_execution_runs();

-- The runs of the history written before this migration, by the same rules: each entry
-- into the run states, closed by the unit's next row that leaves them. Already past, so
-- not metered again.
INSERT INTO execution_runs (xid, wid, eid, start_time, end_time, metered)
SELECT o.xid, o.wid, o.eid, o.state_update_time,
       greatest(c.state_update_time, o.state_update_time), true
FROM work_unit_status_history o
LEFT JOIN LATERAL (
    SELECT h.state_update_time FROM work_unit_status_history h
    WHERE h.xid = o.xid AND h.wid = o.wid AND h.id > o.id
      AND h.old_state IN (4, 5) AND h.new_state NOT IN (4, 5)
    ORDER BY h.id LIMIT 1
) c ON true
WHERE o.new_state IN (4, 5) AND o.old_state NOT IN (4, 5)
ORDER BY o.id;
