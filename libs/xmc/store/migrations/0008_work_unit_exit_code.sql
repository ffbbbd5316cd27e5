-- The current execution's exit code on the unit's row (docs/logs.md), so ListWorkUnits
-- and SearchWorkUnits can filter and sort on exit_code like on any column: the first
-- non-zero code of its containers to finish, else 0 once one ended with 0; NULL while
-- none has ended, or none was captured. Written with each capture of the current
-- execution (xmc.store.container_logs), cleared by a restart. No index: like state, it is
-- filtered within one experiment's primary-key range, and an unindexed column keeps the
-- hot writes HOT.
ALTER TABLE work_units ADD COLUMN exit_code integer;
