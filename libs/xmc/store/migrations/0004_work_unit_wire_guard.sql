-- A writer that changes what a wire part is made of without writing that part (an ESS of
-- a version before 0003 during a rolling upgrade, an operator's hand-written UPDATE) gets
-- the part set to NULL, so readers build the row from its columns instead of serving stale
-- bytes. Every XMC writer writes the part itself, so for them the WHEN clause is false
-- and no function runs: the guard costs one row comparison per updated row.
CREATE FUNCTION work_units_drop_head() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.head := NULL;
    RETURN NEW;
END $$;

CREATE FUNCTION work_units_drop_exec_wire() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.exec_wire := NULL;
    RETURN NEW;
END $$;

CREATE TRIGGER work_units_head_guard BEFORE UPDATE ON work_units FOR EACH ROW
    WHEN (NEW.head IS NOT DISTINCT FROM OLD.head
          AND (NEW.xid, NEW.wid, NEW.work_unit_type, NEW.priority, NEW.tags, NEW.notes,
               NEW.doc, NEW.create_time, NEW.update_time)
              IS DISTINCT FROM
              (OLD.xid, OLD.wid, OLD.work_unit_type, OLD.priority, OLD.tags, OLD.notes,
               OLD.doc, OLD.create_time, OLD.update_time))
    EXECUTE FUNCTION work_units_drop_head();

CREATE TRIGGER work_units_exec_wire_guard BEFORE UPDATE ON work_units FOR EACH ROW
    WHEN (NEW.exec_wire IS NOT DISTINCT FROM OLD.exec_wire
          AND (NEW.xid, NEW.wid, NEW.eid, NEW.exec_create_time, NEW.exec_update_time,
               NEW.exec_complete_time, NEW.state, NEW.state_update_time,
               NEW.status_update_time, NEW.system_message, NEW.user_message,
               NEW.scheduling_information, NEW.detailed_status, NEW.metadata)
              IS DISTINCT FROM
              (OLD.xid, OLD.wid, OLD.eid, OLD.exec_create_time, OLD.exec_update_time,
               OLD.exec_complete_time, OLD.state, OLD.state_update_time,
               OLD.status_update_time, OLD.system_message, OLD.user_message,
               OLD.scheduling_information, OLD.detailed_status, OLD.metadata))
    EXECUTE FUNCTION work_units_drop_exec_wire();
