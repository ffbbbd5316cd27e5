-- Each work unit's args (its hyperparameters): the union of its containers' ExecutableSpec
-- args as one jsonb object of text values (xmc.model.args.work_unit_args), so List/Search
-- can filter and sort on args.<key> (docs/decisions/0035-args-are-filterable.md). Written
-- at create; the executable never changes afterwards. NULL in rows written before this
-- migration until xmc.store.backfill fills them, right after it is applied.
ALTER TABLE work_units ADD COLUMN args jsonb;

-- The numeric reading of an arg value: NULL unless the text is a plain decimal number of
-- bounded size (xmc.query.sql.is_number, the same test), so the cast can never fail and a
-- filter on a value that is not a number is false, never an error. A SQL function the
-- planner inlines (not STRICT, which would stop that): it costs what the expression costs.
CREATE FUNCTION xmc_arg_number(value text) RETURNS numeric
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN length(value) <= 120
             AND value ~ '^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,3})?$'
        THEN value::numeric
    END;

-- The rows still without args, for xmc.store.backfill.backfill_args, which every
-- `xmc-ess migrate` runs: empty once they are filled, so finding none costs nothing and
-- rows with args never enter it.
CREATE INDEX work_units_args_missing ON work_units (xid, wid) WHERE args IS NULL;
