-- push_first_day_changed_since asked each day's partition `EXISTS (... WHERE updated_at >= since)`,
-- meaning to read the first entry of its updated_at index. The planner is free to answer an
-- EXISTS with a sequential scan when it expects many matching rows, and for the day that holds
-- `since` it does: it takes the matches to be spread through the table, where the rows lie in
-- the order they were written, the matching ones last. At 100 million rows (3 to 4 million a
-- day) that read most of the day: 0.1 s warm, over a second from disk, on every request for
-- changes since a time of day. The latest change of a partition is its index's last entry
-- whatever the planner expects, so each day is now asked for max(updated_at), one index
-- descent, and changed when that is at or after `since`.
CREATE OR REPLACE FUNCTION push_first_day_changed_since(since timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_partition record;
    v_changed boolean;
    v_first timestamptz;
BEGIN
    SELECT date_trunc('day', min(d.job_created_at) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' INTO v_first
      FROM push_deliveries_default d WHERE d.updated_at >= since;
    FOR v_partition IN
        SELECT c.relname, to_date(substr(c.relname, length('push_deliveries_') + 1), 'YYYYMMDD') AS day
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'push_deliveries'::regclass AND c.relname ~ '^push_deliveries_[0-9]{8}$'
         ORDER BY 2
    LOOP
        EXIT WHEN v_first IS NOT NULL AND v_partition.day::timestamp AT TIME ZONE 'UTC' >= v_first;
        -- NULL for an empty day: not changed.
        EXECUTE format('SELECT max(updated_at) >= $1 FROM %I', v_partition.relname) INTO v_changed USING since;
        IF v_changed THEN
            RETURN v_partition.day::timestamp AT TIME ZONE 'UTC';
        END IF;
    END LOOP;
    RETURN v_first;
END
$$;
