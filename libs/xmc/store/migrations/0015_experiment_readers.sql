-- Restricted reads (XMC_READ_AUTHORIZATION=restricted, docs/auth.md, decision 0048): who
-- may read each experiment, as a column Postgres can filter a listing by before paging.
--
-- readers holds principals (xmc.model.read_access): the creator's email and every owner,
-- writer and reader of the ACL ('alice@example.com', 'group:ml-team',
-- 'domain:example.com', 'allAuthenticatedUsers'). The ESS writes it with the ACL on every
-- create and update. The GIN index answers "readers && $callers_principals".
--
-- NULL means not filled yet: readable only to admins and services, never to a user by
-- mistake. Rows whose doc holds no ACL are filled here (their readers are the creator);
-- the rest need the ACL decoded from protobuf bytes, which the ESS's migrate does right
-- after (xmc.store.read_access.backfill_readers, on every start: the partial index makes
-- finding nothing to fill an empty scan, and catches rows an older ESS wrote during a
-- rolling upgrade).
ALTER TABLE experiments ADD COLUMN readers text[];
UPDATE experiments SET readers = CASE creator WHEN '' THEN '{}' ELSE ARRAY[lower(creator)] END
    WHERE coalesce(octet_length(doc), 0) = 0;
CREATE INDEX experiments_readers ON experiments USING gin (readers);
CREATE INDEX experiments_readers_unfilled ON experiments (xid) WHERE readers IS NULL;
