-- push_enqueue and push_enqueue_campaign took 'infinity' and '-infinity' for send_at and
-- expires_at: a job queued for 'infinity' was never due, and said nothing. Those are refused now,
-- as any other bad input is (SQLSTATE 22023, nothing queued). Replaces the definition in
-- 012_priorities_rate_caps_expiry.sql; nothing else changes.
CREATE OR REPLACE FUNCTION push_enqueue_job(p_app_code text, p_user_ids bigint[], p_platforms text[], p_message jsonb,
                                 p_idempotency_key text, p_send_at timestamptz, p_validate_only boolean,
                                 p_priority text, p_expires_at timestamptz, p_ttl interval)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_app_id bigint;
    v_job_id bigint;
    v_dry_run boolean;
    v_send_at timestamptz := COALESCE(p_send_at, now());
    v_expires_at timestamptz;
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
    IF p_priority IS NULL OR p_priority NOT IN ('high', 'normal', 'bulk') THEN
        RAISE EXCEPTION 'priority must be high, normal or bulk, not %', COALESCE('"' || p_priority || '"', 'null')
            USING ERRCODE = '22023';
    END IF;
    -- 'infinity' would queue a job that is never due, or never expires, without a word.
    IF NOT isfinite(v_send_at) THEN
        RAISE EXCEPTION 'send_at must be a finite time, not %', v_send_at USING ERRCODE = '22023';
    END IF;
    IF NOT isfinite(p_expires_at) THEN
        RAISE EXCEPTION 'expires_at must be a finite time, not %', p_expires_at USING ERRCODE = '22023';
    END IF;
    IF p_expires_at IS NOT NULL AND p_ttl IS NOT NULL THEN
        RAISE EXCEPTION 'give expires_at or ttl, not both' USING ERRCODE = '22023';
    END IF;
    IF p_ttl IS NOT NULL AND p_ttl <= interval '0' THEN
        RAISE EXCEPTION 'ttl must be positive, not %', p_ttl USING ERRCODE = '22023';
    END IF;
    v_expires_at := COALESCE(p_expires_at, v_send_at + p_ttl);
    IF v_expires_at IS NOT NULL AND v_expires_at <= now() THEN
        RAISE EXCEPTION 'expires_at % is in the past', v_expires_at USING ERRCODE = '22023';
    END IF;
    IF v_expires_at IS NOT NULL AND v_expires_at <= v_send_at THEN
        RAISE EXCEPTION 'expires_at % is not after send_at %', v_expires_at, v_send_at USING ERRCODE = '22023';
    END IF;

    INSERT INTO push_jobs (app_id, message, user_ids, platforms, validate_only, idempotency_key, send_at, priority, expires_at)
    VALUES (v_app_id, p_message, p_user_ids, p_platforms, COALESCE(p_validate_only, false),
            p_idempotency_key, v_send_at, p_priority, v_expires_at)
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
