-- Scheduling: a notification to a few users never waits behind a campaign.
--
-- * push_jobs.priority: 'high' | 'normal' | 'bulk', our scheduling priority (not FCM's
--   android.priority or apns-priority). Workers expand audiences and fill free send slots by it,
--   weighted so that lower priorities still progress. push_enqueue defaults to 'high',
--   push_enqueue_campaign to 'bulk'.
-- * push_jobs.expires_at: deliveries not sent by then are skipped (EXPIRED); until then the
--   remaining lifetime goes to FCM as android.ttl, apns-expiration and webpush TTL unless the
--   message sets them.
-- * apps.max_sends_per_second: a per-app cap on first sends, shared by every worker through
--   push_take_send_budget (NULL: unlimited).
--
-- The enqueue functions' parameter lists grow, so the old ones are dropped first: CREATE OR
-- REPLACE alone would add overloads, and calls with the old arguments would be ambiguous.

ALTER TABLE push_jobs
    ADD COLUMN priority text NOT NULL DEFAULT 'normal' CHECK (priority IN ('high', 'normal', 'bulk')),
    ADD COLUMN expires_at timestamptz,
    ADD CONSTRAINT push_jobs_expires_after_send_at CHECK (expires_at > send_at);

-- Jobs queued before this migration get the defaults they would get now.
UPDATE push_jobs SET priority = CASE WHEN user_ids IS NULL THEN 'bulk' ELSE 'high' END;

-- Rank for ordering: 0 first.
CREATE FUNCTION push_priority_rank(priority text) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END
$$;

-- Due audiences in the order workers expand them: priority, then due time.
DROP INDEX push_jobs_expandable;
CREATE INDEX push_jobs_expandable ON push_jobs (push_priority_rank(priority), send_at, id)
    WHERE status IN ('queued', 'running') AND NOT audience_complete;
-- Running jobs past their expiry, for push_expire_jobs.
CREATE INDEX push_jobs_expiring ON push_jobs (expires_at) WHERE status IN ('queued', 'running') AND expires_at IS NOT NULL;

ALTER TABLE apps ADD COLUMN max_sends_per_second integer
    CONSTRAINT apps_max_sends_per_second_positive CHECK (max_sends_per_second > 0);

-- A token bucket per capped app, apart from apps so that taking from it never waits for (or
-- blocks) a credentials update. It holds at most one second of sends.
CREATE TABLE push_app_send_budgets (
    app_id      bigint PRIMARY KEY REFERENCES apps (id) ON DELETE CASCADE,
    tokens      double precision NOT NULL,
    refilled_at timestamptz NOT NULL
);

-- Takes up to p_wanted sends from the app's budget and returns how many were granted:
-- p_wanted for an app without a cap. p_wanted may be negative: unused sends given back.
CREATE FUNCTION push_take_send_budget(p_app_id bigint, p_wanted int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_rate int;
    v_tokens double precision;
    v_granted int;
BEGIN
    SELECT max_sends_per_second INTO v_rate FROM apps WHERE id = p_app_id;
    IF v_rate IS NULL THEN
        RETURN GREATEST(p_wanted, 0);
    END IF;
    INSERT INTO push_app_send_budgets (app_id, tokens, refilled_at) VALUES (p_app_id, v_rate, clock_timestamp())
    ON CONFLICT (app_id) DO NOTHING;
    -- The row lock makes workers take turns: together they never exceed the rate.
    SELECT LEAST(v_rate, b.tokens + v_rate * extract(epoch FROM clock_timestamp() - b.refilled_at))
      INTO v_tokens FROM push_app_send_budgets b WHERE b.app_id = p_app_id FOR UPDATE;
    v_granted := LEAST(p_wanted, GREATEST(floor(v_tokens), 0)::int);
    UPDATE push_app_send_budgets SET tokens = LEAST(v_rate, v_tokens - v_granted), refilled_at = clock_timestamp()
     WHERE app_id = p_app_id;
    RETURN GREATEST(v_granted, 0);
END
$$;

-- Queues a job; the common body of push_enqueue and push_enqueue_campaign. Earlier definition:
-- 004_idempotency_and_audit.sql.
DROP FUNCTION push_enqueue(text, bigint[], jsonb, text, timestamptz, boolean);
DROP FUNCTION push_enqueue_campaign(text, jsonb, text[], text, timestamptz, boolean);
DROP FUNCTION push_enqueue_job(text, bigint[], text[], jsonb, text, timestamptz, boolean);

CREATE FUNCTION push_enqueue_job(p_app_code text, p_user_ids bigint[], p_platforms text[], p_message jsonb,
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

CREATE FUNCTION push_enqueue(app_code text, user_ids bigint[], message jsonb,
                             idempotency_key text DEFAULT NULL, send_at timestamptz DEFAULT NULL,
                             dry_run boolean DEFAULT false, priority text DEFAULT 'high',
                             expires_at timestamptz DEFAULT NULL, ttl interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF user_ids IS NULL OR cardinality(user_ids) = 0 OR array_position(user_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'user_ids must be a non-empty array of user ids' USING ERRCODE = '22023';
    END IF;
    RETURN push_enqueue_job(app_code, user_ids, NULL, message, idempotency_key, send_at, dry_run, priority, expires_at, ttl);
END
$$;

CREATE FUNCTION push_enqueue_campaign(app_code text, message jsonb, platforms text[] DEFAULT NULL,
                                      idempotency_key text DEFAULT NULL, send_at timestamptz DEFAULT NULL,
                                      dry_run boolean DEFAULT false, priority text DEFAULT 'bulk',
                                      expires_at timestamptz DEFAULT NULL, ttl interval DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT push_enqueue_job(app_code, NULL, platforms, message, idempotency_key, send_at, dry_run, priority, expires_at, ttl);
$$;

-- Ends what expired jobs have left: the part of the audience not expanded yet, pending retries
-- no worker holds and chunks whose worker is gone become skipped deliveries (EXPIRED); a job
-- with nothing left in flight completes. Devices a worker holds are skipped by that worker
-- (it checks the expiry before each send). Workers call it every second; returns the jobs it
-- completed.
CREATE FUNCTION push_expire_jobs() RETURNS SETOF bigint
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
            INSERT INTO push_deliveries (job_id, device_id, status, error_code, error_message)
            SELECT v_job.id, d.id, 'skipped', 'EXPIRED', v_message
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
         WHERE job_id = v_job.id AND status = 'pending' AND (lease_owner IS NULL OR next_attempt_at <= now());
        WITH gone AS (
            DELETE FROM push_job_chunks WHERE job_id = v_job.id AND lease_until <= now() RETURNING device_ids)
        INSERT INTO push_deliveries (job_id, device_id, status, error_code, error_message)
        SELECT v_job.id, dev.id, 'skipped', 'EXPIRED', v_message FROM gone CROSS JOIN LATERAL unnest(device_ids) AS dev(id)
        ON CONFLICT ON CONSTRAINT push_deliveries_job_device_key DO NOTHING;
        UPDATE push_jobs j SET status = 'completed', finished_at = now()
         WHERE j.id = v_job.id
           AND NOT EXISTS (SELECT 1 FROM push_deliveries d WHERE d.job_id = j.id AND d.status = 'pending')
           AND NOT EXISTS (SELECT 1 FROM push_job_chunks c WHERE c.job_id = j.id);
        IF FOUND THEN
            RETURN NEXT v_job.id;
        END IF;
    END LOOP;
END
$$;
