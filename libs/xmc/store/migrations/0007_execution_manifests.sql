-- The JobSet each execution was created with, as the Actuator sent it to the API server
-- (docs/decisions/0039-the-manifest-as-created.md). Written by the Actuator in the
-- transaction that settles the task that created the JobSet (xmc.store.transactions.
-- finish_task); read by xmc.v1.SpecService.GetExecutionManifest. Executions created
-- before this migration have no row.
CREATE TABLE execution_manifests (
    xid         bigint      NOT NULL,
    wid         bigint      NOT NULL,
    eid         bigint      NOT NULL,
    -- Compact JSON in the builder's key order (text, not jsonb, which would reorder the
    -- keys); NULL when it was longer than xmc.model.manifest.MAX_MANIFEST_BYTES.
    manifest    text,
    size_bytes  integer     NOT NULL CHECK (size_bytes >= 0),
    -- The task that created the JobSet; a later task of the same execution that created
    -- it again (a repair's re-drive after the JobSet vanished) replaces the row.
    task_id     text        NOT NULL,
    record_time timestamptz NOT NULL,
    PRIMARY KEY (xid, wid, eid),
    FOREIGN KEY (xid, wid) REFERENCES work_units (xid, wid) ON DELETE CASCADE
);
