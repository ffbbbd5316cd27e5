-- What each container of each execution printed, kept by XMC once the container ended
-- (or when its JobSet was deleted), so a finished unit's output outlives its pods
-- (docs/logs.md, docs/decisions/0041-container-logs.md). The Reconciler reads a bounded
-- tail from the API server and the ESS stores it here.
--
-- One row per container run: (pod_uid, container, run) names it, run being the
-- container's restartCount when it ended. A later capture of the same run replaces an
-- earlier one only if the earlier was taken while the container still ran (a stop's
-- finalizer reads running containers; their end is read again if the pod still exists).
--
-- text is bytea: a container may print anything, including invalid UTF-8, and the
-- download must give back exactly what was read. Past the experiment's cap the oldest
-- rows lose their text (evicted = true) and keep everything else, exit code included.
CREATE TABLE container_logs (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    xid           bigint      NOT NULL,
    wid           bigint      NOT NULL,
    eid           bigint      NOT NULL,
    pod_name      text        NOT NULL,
    pod_uid       text        NOT NULL,
    container     text        NOT NULL,
    run           integer     NOT NULL,
    -- The container had ended when its log was read: this is its whole tail.
    terminated    boolean     NOT NULL,
    exit_code     integer,
    reason        text        NOT NULL DEFAULT '',
    finished_at   timestamptz,
    text          bytea       NOT NULL,
    -- Bytes dropped from the head to keep the tail under the per-container cap.
    truncated     boolean     NOT NULL,
    evicted       boolean     NOT NULL DEFAULT false,
    -- Why no log could be read (the pod was already gone, the API server refused).
    unavailable   text        NOT NULL DEFAULT '',
    capture_time  timestamptz NOT NULL,
    UNIQUE (xid, wid, eid, pod_uid, container, run),
    FOREIGN KEY (xid, wid) REFERENCES work_units (xid, wid) ON DELETE CASCADE
);
CREATE INDEX container_logs_unit ON container_logs (xid, wid, eid, id);
-- Eviction walks an experiment's rows that still hold text, oldest first.
CREATE INDEX container_logs_evictable ON container_logs (xid, id) WHERE NOT evicted;

-- Bytes of text each experiment holds in container_logs, kept in the capture's
-- transaction so the cap is checked without summing the experiment's rows.
CREATE TABLE experiment_log_bytes (
    xid   bigint NOT NULL PRIMARY KEY REFERENCES experiments (xid) ON DELETE CASCADE,
    bytes bigint NOT NULL DEFAULT 0 CHECK (bytes >= 0)
);
