-- Business metrics (docs/metrics.md, decision 0050): the ESS counts live work units by
-- owner, queue and state every 15 s from the ACTIVE experiments only. This index lets that
-- read find them without scanning every experiment ever made; an experiment row changes
-- active_state rarely (its first live unit, its last one), so the index costs the hot
-- rollup updates nothing.
CREATE INDEX experiments_active ON experiments (xid) WHERE active_state = 1;
