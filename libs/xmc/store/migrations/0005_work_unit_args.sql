-- Each work unit's args (its hyperparameters): the union of its containers' ExecutableSpec
-- args as one jsonb object of text values (xmc.model.args.work_unit_args), so List/Search
-- can filter and sort on args.<key> (docs/decisions/0035-args-are-filterable.md); and
-- beside it the numeric reading of each value that is a number (xmc.query.sql.is_number)
-- as a jsonb number, so a numeric comparison or sort casts a number Postgres already
-- parsed instead of testing the text with a regular expression on every row (3x the
-- cost). Written at create; the executable never changes afterwards. NULL in rows written
-- before this migration until xmc.store.backfill fills them.
ALTER TABLE work_units ADD COLUMN args jsonb, ADD COLUMN arg_numbers jsonb;

-- The rows still without args, for xmc.store.backfill.backfill_args, which every
-- `xmc-ess migrate` runs: empty once they are filled, so finding none costs nothing and
-- rows with args never enter it.
CREATE INDEX work_units_args_missing ON work_units (xid, wid) WHERE args IS NULL;
