-- Each work unit's API form in two serialized parts (xmc.store.wire, docs/storage.md), so a
-- page of work units is framed from bytes instead of built message by message:
--   head       the WorkUnit without its current execution (create, UpdateWorkUnit);
--   exec_wire  the current WorkUnitExecution, ACTIVE (create, restart, every observation).
-- NULL in rows written before this migration until xmc.store.wire's backfill reaches them;
-- readers build such rows from the columns.
ALTER TABLE work_units ADD COLUMN head bytea, ADD COLUMN exec_wire bytea;
