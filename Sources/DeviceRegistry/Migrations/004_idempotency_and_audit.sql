-- An idempotency key replayed with the other dry-run setting is refused instead of answered
-- with the other job's id; and the delivery audit gets an index to find a user's deliveries.
CREATE OR REPLACE FUNCTION push_enqueue_job(p_app_code text, p_user_ids bigint[], p_platforms text[], p_message jsonb,
                                 p_idempotency_key text, p_send_at timestamptz, p_validate_only boolean)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_app_id bigint;
    v_job_id bigint;
    v_dry_run boolean;
BEGIN
    SELECT id INTO v_app_id FROM apps WHERE code = p_app_code;
    IF v_app_id IS NULL THEN
        RAISE EXCEPTION 'unknown app code "%"', p_app_code USING ERRCODE = '22023';
    END IF;
    PERFORM push_check_message(p_message);
    IF p_platforms IS NOT NULL AND (cardinality(p_platforms) = 0
        OR NOT p_platforms <@ ARRAY['ios', 'android', 'web'] OR array_position(p_platforms, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION 'platforms must be a non-empty subset of ios, android, web' USING ERRCODE = '22023';
    END IF;

    INSERT INTO push_jobs (app_id, message, user_ids, platforms, validate_only, idempotency_key, send_at)
    VALUES (v_app_id, p_message, p_user_ids, p_platforms, COALESCE(p_validate_only, false),
            p_idempotency_key, COALESCE(p_send_at, now()))
    ON CONFLICT ON CONSTRAINT push_jobs_idempotency DO NOTHING
    RETURNING id INTO v_job_id;

    IF v_job_id IS NULL THEN
        -- The key was used before for this app: the same job, never a second one. But a dry run
        -- and a real send are not the same job: answering one with the other's id would make a
        -- rehearsal silently swallow the real send.
        SELECT id, validate_only INTO v_job_id, v_dry_run
          FROM push_jobs WHERE app_id = v_app_id AND idempotency_key = p_idempotency_key;
        IF v_dry_run <> COALESCE(p_validate_only, false) THEN
            RAISE EXCEPTION 'idempotency key "%" was used by % job %; give the % its own key',
                p_idempotency_key, CASE WHEN v_dry_run THEN 'dry-run' ELSE 'real' END, v_job_id,
                CASE WHEN v_dry_run THEN 'real send' ELSE 'dry run' END
                USING ERRCODE = '22023';
        END IF;
        RETURN v_job_id;
    END IF;
    -- Delivered at commit: workers wake at once instead of waiting for their poll.
    PERFORM pg_notify('push_jobs', v_job_id::text);
    RETURN v_job_id;
END
$$;

-- GET /admin/deliveries?userId= and pushctl deliveries --user: a user's devices, then their
-- deliveries newest first, without reading the whole log.
CREATE INDEX push_deliveries_by_device ON push_deliveries (device_id, id);
