-- Devices are deactivated, never deleted, but an operator can DELETE one. One deleted while it
-- sat in a chunk made the expired chunks' insert below violate push_deliveries' foreign key, and
-- since one call expires every due job, no job expired any more. A deleted device now gets no
-- row, as the workers' write of a chunk's results and a job's ending already do. Replaces the
-- definition in 016_deliveries_by_app_and_time.sql; nothing else changes, nothing waits.
CREATE OR REPLACE FUNCTION push_expire_jobs() RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_job push_jobs%ROWTYPE;
    v_message text;
BEGIN
    FOR v_job IN
        SELECT * FROM push_jobs
         WHERE status IN ('queued', 'running') AND expires_at IS NOT NULL AND expires_at <= now()
         ORDER BY expires_at
           FOR UPDATE SKIP LOCKED
    LOOP
        v_message := 'expired at ' || to_char(v_job.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || ' before it was sent';
        IF NOT v_job.audience_complete THEN
            INSERT INTO push_deliveries (job_id, device_id, status, error_code, error_message, job_created_at, app_id)
            SELECT v_job.id, d.id, 'skipped', 'EXPIRED', v_message, v_job.created_at, v_job.app_id
              FROM push_devices d
             WHERE d.app_id = v_job.app_id AND d.is_active AND d.id > v_job.audience_cursor
               AND (v_job.user_ids IS NULL OR d.user_id = ANY(v_job.user_ids))
               AND (v_job.platforms IS NULL OR d.platform = ANY(v_job.platforms))
            ON CONFLICT ON CONSTRAINT push_deliveries_job_device_key DO NOTHING;
        END IF;
        UPDATE push_jobs
           SET status = 'running', started_at = COALESCE(started_at, now()), audience_complete = true
         WHERE id = v_job.id;
        UPDATE push_deliveries SET status = 'skipped', error_code = 'EXPIRED', error_message = v_message,
                                   lease_owner = NULL, updated_at = now()
         WHERE job_id = v_job.id AND job_created_at = v_job.created_at
           AND status = 'pending' AND (lease_owner IS NULL OR next_attempt_at <= now());
        WITH gone AS (
            DELETE FROM push_job_chunks WHERE job_id = v_job.id AND lease_until <= now() RETURNING device_ids)
        INSERT INTO push_deliveries (job_id, device_id, status, error_code, error_message, job_created_at, app_id)
        SELECT v_job.id, dev.id, 'skipped', 'EXPIRED', v_message, v_job.created_at, v_job.app_id
          FROM gone CROSS JOIN LATERAL unnest(device_ids) AS dev(id)
          JOIN push_devices d ON d.id = dev.id
        ON CONFLICT ON CONSTRAINT push_deliveries_job_device_key DO NOTHING;
        UPDATE push_jobs j SET status = 'completed', finished_at = now()
         WHERE j.id = v_job.id
           AND NOT EXISTS (SELECT 1 FROM push_deliveries d
                            WHERE d.job_id = j.id AND d.job_created_at = v_job.created_at AND d.status = 'pending')
           AND NOT EXISTS (SELECT 1 FROM push_job_chunks c WHERE c.job_id = j.id);
        IF FOUND THEN
            RETURN NEXT v_job.id;
        END IF;
    END LOOP;
END
$$;
